//! Opening a mode's connections (one server here; `cluster`, `sentinel`),
//! and what the server says of its persistence.

use lockkit_core::LockError;
use redis::aio::ConnectionManager;
use redis::{RedisResult, Value};

use super::client::{connect_error, manager_config, open_client, pubsub_config};
use super::command::Conn;
use super::{cluster, sentinel};
use crate::config::{Mode, RedisConfig};
use crate::wait::{PubSubConn, Waiters};

/// Opens the command connection of `config`'s mode (not Redlock), and the
/// pub/sub connection of `waiters`.
pub(crate) async fn open(config: &RedisConfig, kind: &'static str, waiters: &Waiters) -> Result<Conn, LockError> {
    let (ct, rt) = (config.connect_timeout, config.response_timeout);
    Ok(match &config.mode {
        Mode::Single => {
            let client = open_client(config, &config.nodes[0])?;
            let manager = ConnectionManager::new_with_config(client.clone(), manager_config(ct, rt))
                .await
                .map_err(|e| connect_error(kind, e))?;
            let pubsub = ConnectionManager::new_lazy_with_config(client, pubsub_config(ct, rt, waiters, 0))
                .map_err(|e| connect_error(kind, e))?;
            waiters.set_connections(vec![PubSubConn::Manager(pubsub)]);
            Conn::Manager(manager)
        }
        Mode::Cluster => Conn::Cluster(cluster::open(config, kind, waiters).await?),
        Mode::Sentinel { service } => Conn::Sentinel(sentinel::open(config, service, kind, waiters).await?),
        Mode::Redlock => unreachable!("refused above"),
    })
}

/// Whether the server writes an append-only file (`INFO persistence`), so
/// its counters survive a restart without relying on its clock.
pub(crate) async fn append_only(conn: &Conn) -> bool {
    let info: RedisResult<Value> = redis::cmd("INFO")
        .arg("persistence")
        .query_async(&mut conn.clone())
        .await;
    let mut texts = Vec::new();
    fn collect(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::BulkString(b) => out.push(String::from_utf8_lossy(b).into_owned()),
            Value::VerbatimString { text, .. } => out.push(text.clone()),
            Value::SimpleString(s) => out.push(s.clone()),
            Value::Map(m) => m.iter().for_each(|(_, v)| collect(v, out)),
            Value::Array(a) => a.iter().for_each(|v| collect(v, out)),
            _ => {}
        }
    }
    match info {
        Ok(v) => collect(&v, &mut texts),
        Err(_) => return false,
    }
    let flags: Vec<bool> = texts
        .iter()
        .flat_map(|t| t.lines())
        .filter_map(|l| l.trim().strip_prefix("aof_enabled:"))
        .map(|v| v == "1")
        .collect();
    !flags.is_empty() && flags.iter().all(|f| *f)
}
