//! The client of one node (with TLS, in `tls`) and the reconnect settings
//! every connection manager shares.

use std::time::Duration;

use lockkit_core::LockError;
use redis::aio::ConnectionManagerConfig;
use redis::{
    Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, ProtocolVersion, RedisConnectionInfo, RedisError,
};

use super::tls::tls_addr;
#[cfg(feature = "tls")]
use super::tls::tls_certificates;
use crate::config::{Node, RedisConfig, Tls};
use crate::error::redis_error;
use crate::wait::Waiters;

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

pub(super) fn connect_error(kind: &'static str, e: RedisError) -> LockError {
    redis_error(kind, "connect", None, e)
}
