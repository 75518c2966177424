//! Connections: the command connection of each mode ([`Conn`]), the client
//! of one node (with TLS, in `tls`), the reconnect settings every connection
//! manager shares, and opening a mode's connections (`cluster`, `sentinel`;
//! one server here). Redlock opens one client per node through
//! [`open_client`].

mod cluster;
mod sentinel;
mod tls;

use std::time::Duration;

use lockkit_core::LockError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisConnectionInfo,
    RedisError, RedisFuture, RedisResult, Value,
};

use crate::config::{Mode, Node, RedisConfig, Tls};
use crate::error::redis_error;
use crate::wait::{PubSubConn, Waiters};

pub(crate) use cluster::cluster_primaries;
pub(crate) use sentinel::SentinelConn;
use tls::tls_addr;
#[cfg(feature = "tls")]
use tls::tls_certificates;

/// The command connection of each mode.
#[derive(Clone)]
pub(crate) enum Conn {
    Manager(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Manager(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
            Conn::Sentinel(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Manager(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Sentinel(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Manager(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
            Conn::Sentinel(c) => c.current().get_db(),
        }
    }
}

/// The connection info of one node, with RESP3 (pub/sub messages arrive as
/// push messages on a connection that still takes commands).
pub(crate) fn connection_info(cfg: &RedisConfig, node: &Node) -> Result<ConnectionInfo, LockError> {
    let addr = match cfg.tls {
        Tls::Off => ConnectionAddr::Tcp(node.host.clone(), node.port),
        Tls::On | Tls::Insecure => tls_addr(node, cfg.tls == Tls::Insecure)?,
    };
    let info = addr
        .into_connection_info()
        .map_err(|e| LockError::config("url host", format!("{node}: {e}")))?;
    Ok(info.set_redis_settings(redis_settings(cfg)))
}

fn redis_settings(cfg: &RedisConfig) -> RedisConnectionInfo {
    let mut redis = RedisConnectionInfo::default()
        .set_db(cfg.db)
        .set_protocol(ProtocolVersion::RESP3)
        .set_lib_name("lockkit", env!("CARGO_PKG_VERSION"));
    if let Some(u) = &cfg.username {
        redis = redis.set_username(u);
    }
    if let Some(p) = &cfg.password {
        redis = redis.set_password(p);
    }
    redis
}

/// A client for one node, with the URL's certificates if any.
pub(crate) fn open_client(cfg: &RedisConfig, node: &Node) -> Result<Client, LockError> {
    let info = connection_info(cfg, node)?;
    #[cfg(feature = "tls")]
    if let Some(certs) = tls_certificates(cfg)? {
        return Client::build_with_tls(info, certs)
            .map_err(|e| LockError::config("query parameter tls_ca", format!("{node}: {e}")));
    }
    Client::open(info).map_err(|e| LockError::config("url host", format!("{node}: {e}")))
}

/// How every connection manager of the backend reconnects: quickly, and
/// giving up after one retry, so a command during an outage fails with a
/// retryable error at once instead of hanging; the next command tries again.
pub(crate) fn manager_config(connect_timeout: Duration, response_timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(Some(response_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(500))
}

/// The pub/sub variant of [`manager_config`]: messages go to `waiters`,
/// subscriptions are restored after a reconnect.
pub(crate) fn pubsub_config(
    connect_timeout: Duration,
    response_timeout: Duration,
    waiters: &Waiters,
    index: usize,
) -> ConnectionManagerConfig {
    manager_config(connect_timeout, response_timeout)
        .set_push_sender(waiters.push_handler(index))
        .set_automatic_resubscription()
}

fn connect_error(kind: &'static str, e: RedisError) -> LockError {
    redis_error(kind, "connect", None, e)
}

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
        Mode::Cluster => cluster::open(config, kind, waiters).await?,
        Mode::Sentinel { service } => sentinel::open(config, service, kind, waiters).await?,
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
