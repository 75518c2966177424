//! Sentinel mode: the connection to the master a sentinel group names,
//! followed across failovers ([`SentinelConn`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use lockkit_core::LockError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Cmd, ConnectionAddr, Pipeline, ProtocolVersion, RedisError, RedisFuture, RedisResult, Value};

use super::client::{connect_error, manager_config, pubsub_config};
use super::tls::tls_addr;
use crate::config::{RedisConfig, Tls};
use crate::wait::{PubSubConn, Waiters};

/// The manager of the master a sentinel group names, looked up again (and
/// replaced) when the master stops answering as one.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    shared: Arc<SentinelShared>,
}

struct SentinelShared {
    sentinel: tokio::sync::Mutex<SentinelClient>,
    current: Mutex<(ConnectionManager, String)>,
    config: ConnectionManagerConfig,
    pubsub: Arc<Mutex<ConnectionManager>>,
    pubsub_config: ConnectionManagerConfig,
    waiters: Waiters,
    looking: AtomicBool,
}

impl SentinelConn {
    pub(super) fn current(&self) -> ConnectionManager {
        self.shared.current.lock().unwrap_or_else(|e| e.into_inner()).0.clone()
    }

    /// After an error that suggests a failover, asks the sentinels for the
    /// master again (in the background, one lookup at a time).
    fn check(&self, e: &RedisError) {
        let failover = e.is_io_error()
            || e.is_connection_dropped()
            || e.is_connection_refusal()
            || matches!(e.code(), Some("READONLY" | "MASTERDOWN" | "LOADING"))
            || crate::error::is_replica_refusal(e);
        if !failover || self.shared.looking.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.rediscover().await {
                tracing::warn!(error = %e, "sentinel: looking up the master failed");
            }
            this.shared.looking.store(false, Ordering::Release);
        });
    }

    async fn rediscover(&self) -> RedisResult<()> {
        let client = self.shared.sentinel.lock().await.async_get_client().await?;
        let addr = client.get_connection_info().addr().to_string();
        let same = self.shared.current.lock().unwrap_or_else(|e| e.into_inner()).1 == addr;
        if same {
            return Ok(());
        }
        tracing::warn!(master = %addr, "sentinel: the master moved; reconnecting");
        let manager = ConnectionManager::new_lazy_with_config(client.clone(), self.shared.config.clone())?;
        let pubsub = ConnectionManager::new_lazy_with_config(client, self.shared.pubsub_config.clone())?;
        *self.shared.current.lock().unwrap_or_else(|e| e.into_inner()) = (manager, addr);
        let channels = self.shared.waiters.channels();
        let mut sub = pubsub.clone();
        *self.shared.pubsub.lock().unwrap_or_else(|e| e.into_inner()) = pubsub;
        if !channels.is_empty() {
            let _ = sub.subscribe(channels).await;
        }
        self.shared.waiters.wake_all();
        Ok(())
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let r = self.current().req_packed_command(cmd).await;
            if let Err(e) = &r {
                self.check(e);
            }
            r
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let r = self.current().req_packed_commands(cmd, offset, count).await;
            match &r {
                Err(e) => self.check(e),
                // A pipeline that ignores errors (a script call and its
                // `WAIT`) gets a demoted master's READONLY as a reply.
                Ok(replies) => {
                    if let Some(Value::ServerError(e)) = replies.iter().find(|v| matches!(v, Value::ServerError(_))) {
                        self.check(&e.clone().into());
                    }
                }
            }
            r
        })
    }

    fn get_db(&self) -> i64 {
        self.current().get_db()
    }
}

/// Asks the sentinels for the master of `service` and opens the command and
/// pub/sub connections to it.
pub(super) async fn open(
    config: &RedisConfig,
    service: &str,
    kind: &'static str,
    waiters: &Waiters,
) -> Result<SentinelConn, LockError> {
    let (ct, rt) = (config.connect_timeout, config.response_timeout);
    let sentinels: Vec<ConnectionAddr> = config
        .nodes
        .iter()
        .map(|n| match config.tls {
            Tls::Off => Ok(ConnectionAddr::Tcp(n.host.clone(), n.port)),
            _ => tls_addr(n, config.tls == Tls::Insecure),
        })
        .collect::<Result<_, _>>()?;
    let mut b = SentinelClientBuilder::new(sentinels, service, SentinelServerType::Master)
        .map_err(|e| connect_error(kind, e))?
        .set_client_to_redis_db(config.db)
        .set_client_to_redis_protocol(ProtocolVersion::RESP3);
    if let Some(u) = &config.username {
        b = b.set_client_to_redis_username(u);
    }
    if let Some(p) = &config.password {
        b = b.set_client_to_redis_password(p);
    }
    if let Some(u) = &config.sentinel_username {
        b = b.set_client_to_sentinel_username(u);
    }
    if let Some(p) = &config.sentinel_password {
        b = b.set_client_to_sentinel_password(p);
    }
    if config.tls != Tls::Off {
        let mode = if config.tls == Tls::Insecure {
            redis::TlsMode::Insecure
        } else {
            redis::TlsMode::Secure
        };
        b = b
            .set_client_to_redis_tls_mode(mode)
            .set_client_to_sentinel_tls_mode(mode);
    }
    let mut sentinel = b.build().map_err(|e| connect_error(kind, e))?;
    let client = sentinel.async_get_client().await.map_err(|e| connect_error(kind, e))?;
    let addr = client.get_connection_info().addr().to_string();
    let config_cmd = manager_config(ct, rt);
    let config_sub = pubsub_config(ct, rt, waiters, 0);
    let manager = ConnectionManager::new_with_config(client.clone(), config_cmd.clone())
        .await
        .map_err(|e| connect_error(kind, e))?;
    let pubsub =
        ConnectionManager::new_lazy_with_config(client, config_sub.clone()).map_err(|e| connect_error(kind, e))?;
    let pubsub = Arc::new(Mutex::new(pubsub));
    waiters.set_connections(vec![PubSubConn::Swappable(pubsub.clone())]);
    Ok(SentinelConn {
        shared: Arc::new(SentinelShared {
            sentinel: tokio::sync::Mutex::new(sentinel),
            current: Mutex::new((manager, addr)),
            config: config_cmd,
            pubsub,
            pubsub_config: config_sub,
            waiters: waiters.clone(),
            looking: AtomicBool::new(false),
        }),
    })
}
