//! Redis and Redlock floor: `SET NX PX` + Lua compare-and-delete, on every
//! node of the URL at once.

use async_trait::async_trait;
use futures_util::future::try_join_all;
use lockkit::raw::ConnectUrl;
use redis::Script;
use redis::aio::MultiplexedConnection;

use super::cycle::Floor;
use crate::error::BenchError;
use crate::redis_info::commandstats_sum;

const COMPARE_AND_DELETE: &str =
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end";

/// One multiplexed connection per node.
pub struct RedisFloor {
    nodes: Vec<MultiplexedConnection>,
    release: Script,
}

impl RedisFloor {
    /// Connects to every host of a `redis://` or `redlock://` URL.
    pub async fn connect(url: &ConnectUrl) -> Result<Self, BenchError> {
        Ok(RedisFloor {
            nodes: connect_nodes(url).await?,
            release: Script::new(COMPARE_AND_DELETE),
        })
    }
}

/// One multiplexed connection to every host of a `redis://` or
/// `redlock://` URL, with its user, password and database.
pub async fn connect_nodes(url: &ConnectUrl) -> Result<Vec<MultiplexedConnection>, BenchError> {
    let mut nodes = Vec::new();
    for host in &url.hosts {
        let mut info = redis::IntoConnectionInfo::into_connection_info(format!(
            "redis://{}:{}",
            host.host,
            host.port.unwrap_or(6379)
        ))?;
        let user = url.url.username();
        let mut redis_settings = info.redis_settings().clone();
        if !user.is_empty() {
            redis_settings = redis_settings.set_username(user);
        }
        if let Some(pw) = url.url.password() {
            redis_settings = redis_settings.set_password(pw);
        }
        if let Some(db) = url
            .url
            .path()
            .trim_start_matches('/')
            .parse()
            .ok()
            .filter(|_| url.hosts.len() == 1)
        {
            redis_settings = redis_settings.set_db(db);
        }
        info = info.set_redis_settings(redis_settings);
        let client = redis::Client::open(info)?;
        nodes.push(client.get_multiplexed_async_connection().await?);
    }
    Ok(nodes)
}

#[async_trait]
impl Floor for RedisFloor {
    async fn cycle(&self, name: &str) -> Result<(), BenchError> {
        let value = format!("{:032x}", rand::random::<u128>());
        let set = try_join_all(self.nodes.iter().map(|c| {
            let mut c = c.clone();
            let value = &value;
            async move {
                redis::cmd("SET")
                    .arg(name)
                    .arg(value)
                    .arg("NX")
                    .arg("PX")
                    .arg(30_000)
                    .query_async::<Option<String>>(&mut c)
                    .await
            }
        }))
        .await?;
        if set.iter().any(Option::is_none) {
            return Err(format!("floor key {name} was held").into());
        }
        try_join_all(self.nodes.iter().map(|c| {
            let mut c = c.clone();
            let mut call = self.release.key(name);
            call.arg(&value);
            async move { call.invoke_async::<i64>(&mut c).await }
        }))
        .await?;
        Ok(())
    }

    async fn ping(&self) -> Result<(), BenchError> {
        let mut c = self.nodes[0].clone();
        redis::cmd("PING").query_async::<String>(&mut c).await?;
        Ok(())
    }

    async fn server_commands(&self) -> Result<Option<u64>, BenchError> {
        if self.nodes.len() != 1 {
            return Ok(None);
        }
        let mut c = self.nodes[0].clone();
        let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut c).await?;
        Ok(Some(commandstats_sum(&info, "calls")))
    }
}
