//! [`RedisBackend`]: locks on one Redis (single server, a sentinel-monitored
//! master, or a Redis Cluster).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, ReleaseOutcome, TryAcquire,
};
use lockkit_core::{LockError, detach, lease, ttl_millis};
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, Cmd, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisConnectionInfo,
    RedisError, RedisFuture, RedisResult, Value,
};

use crate::config::{Mode, Node, RedisConfig, Tls};
use crate::error::{Fault, ReplicasError, redis_error};
use crate::layout::Keys;
use crate::scripts::{self, AcquireReply, ExtendItem, Publish, Queueing, Released, Replicas, TurnOf, millis};
use crate::wait::{Attempt, PubSubConn, Turn, UNKNOWN_LEASE_RECHECK, Waiters, wait_loop};

/// Locks on one Redis: `redis://`, `rediss://`, `redis+sentinel://` or
/// `redis+cluster://`. Cheap to clone; clones share connections.
///
/// One connection (a reconnecting [`ConnectionManager`], or the cluster
/// client's connections) carries every command; a second one, opened when
/// the first waiter needs it, carries the pub/sub messages of all waiters.
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

struct Inner {
    kind: &'static str,
    conn: Conn,
    keys: Keys,
    publish: Publish,
    waiters: Waiters,
    durable_tokens: bool,
    /// `WAIT` after acquisitions and extensions (`wait_replicas` above 0).
    replicas: Option<Replicas>,
    config: RedisConfig,
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("kind", &self.inner.kind)
            .field("config", &self.inner.config)
            .field("durable_tokens", &self.inner.durable_tokens)
            .field("waiters", &self.inner.waiters)
            .finish()
    }
}

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
    fn current(&self) -> ConnectionManager {
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

#[cfg(feature = "tls")]
fn tls_addr(node: &Node, insecure: bool) -> Result<ConnectionAddr, LockError> {
    // One process-wide rustls provider; keep one that is installed already.
    let _ = rustls::crypto::ring::default_provider().install_default();
    Ok(ConnectionAddr::TcpTls {
        host: node.host.clone(),
        port: node.port,
        insecure,
        tls_params: None,
    })
}

#[cfg(not(feature = "tls"))]
fn tls_addr(_: &Node, _: bool) -> Result<ConnectionAddr, LockError> {
    Err(LockError::config(
        "url scheme",
        "TLS needs the `tls` cargo feature of lockkit-redis, which is not enabled",
    ))
}

/// The CA and client certificate files named in the URL, read now.
#[cfg(feature = "tls")]
pub(crate) fn tls_certificates(cfg: &RedisConfig) -> Result<Option<redis::TlsCertificates>, LockError> {
    if cfg.tls_ca.is_none() && cfg.tls_client.is_none() {
        return Ok(None);
    }
    let read = |param: &str, path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| LockError::config(format!("query parameter {param}"), format!("{}: {e}", path.display())))
    };
    Ok(Some(redis::TlsCertificates {
        root_cert: cfg.tls_ca.as_deref().map(|p| read("tls_ca", p)).transpose()?,
        client_tls: match &cfg.tls_client {
            Some((cert, key)) => Some(redis::ClientTlsConfig {
                client_cert: read("tls_cert", cert)?,
                client_key: read("tls_key", key)?,
            }),
            None => None,
        },
    }))
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

impl RedisBackend {
    /// Connects to the server(s) `config` names (not Redlock: see
    /// [`RedlockBackend`](crate::RedlockBackend)). Fails if no server
    /// answers.
    pub async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        config.check_wait_replicas()?;
        let (kind, publish) = match &config.mode {
            Mode::Single => ("redis", Publish::Classic),
            Mode::Sentinel { .. } => ("redis+sentinel", Publish::Classic),
            Mode::Cluster => ("redis+cluster", Publish::Sharded),
            Mode::Redlock => {
                return Err(LockError::config(
                    "url scheme",
                    "redlock:// URLs are served by RedlockBackend",
                ));
            }
        };
        let waiters = Waiters::new(1, 1, config.response_timeout, Some(Keys::new(&config.prefix)));
        waiters.share_locally(format!(
            "{kind} {:?} db {} prefix {}",
            config.nodes, config.db, config.prefix
        ));
        let (ct, rt) = (config.connect_timeout, config.response_timeout);
        let conn = match &config.mode {
            Mode::Single => {
                let client = open_client(&config, &config.nodes[0])?;
                let manager = ConnectionManager::new_with_config(client.clone(), manager_config(ct, rt))
                    .await
                    .map_err(|e| connect_error(kind, e))?;
                let pubsub = ConnectionManager::new_lazy_with_config(client, pubsub_config(ct, rt, &waiters, 0))
                    .map_err(|e| connect_error(kind, e))?;
                waiters.set_connections(vec![PubSubConn::Manager(pubsub)]);
                Conn::Manager(manager)
            }
            Mode::Cluster => {
                let seeds = config
                    .nodes
                    .iter()
                    .map(|n| connection_info(&config, n))
                    .collect::<Result<Vec<_>, _>>()?;
                let builder = |seeds: Vec<ConnectionInfo>| {
                    let mut b = ClusterClientBuilder::new(seeds)
                        .use_protocol(ProtocolVersion::RESP3)
                        .connection_timeout(ct)
                        .response_timeout(rt)
                        .retries(3);
                    if let Some(u) = &config.username {
                        b = b.username(u);
                    }
                    if let Some(p) = &config.password {
                        b = b.password(p);
                    }
                    #[cfg(feature = "tls")]
                    if config.tls != Tls::Off {
                        b = b.tls(if config.tls == Tls::Insecure {
                            redis::TlsMode::Insecure
                        } else {
                            redis::TlsMode::Secure
                        });
                        if let Ok(Some(certs)) = tls_certificates(&config) {
                            b = b.certs(certs);
                        }
                    }
                    b
                };
                #[cfg(feature = "tls")]
                tls_certificates(&config)?;
                let client = builder(seeds.clone()).build().map_err(|e| connect_error(kind, e))?;
                let conn = client
                    .get_async_connection()
                    .await
                    .map_err(|e| connect_error(kind, e))?;
                let pubsub_client = builder(seeds)
                    .push_sender(waiters.push_handler(0))
                    .build()
                    .map_err(|e| connect_error(kind, e))?;
                let pubsub = pubsub_client
                    .get_async_connection()
                    .await
                    .map_err(|e| connect_error(kind, e))?;
                waiters.set_connections(vec![PubSubConn::Cluster(pubsub)]);
                Conn::Cluster(conn)
            }
            Mode::Sentinel { service } => {
                let sentinels: Vec<ConnectionAddr> = config
                    .nodes
                    .iter()
                    .map(|n| match config.tls {
                        Tls::Off => Ok(ConnectionAddr::Tcp(n.host.clone(), n.port)),
                        _ => tls_addr(n, config.tls == Tls::Insecure),
                    })
                    .collect::<Result<_, _>>()?;
                let mut b = SentinelClientBuilder::new(sentinels, service.clone(), SentinelServerType::Master)
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
                let config_sub = pubsub_config(ct, rt, &waiters, 0);
                let manager = ConnectionManager::new_with_config(client.clone(), config_cmd.clone())
                    .await
                    .map_err(|e| connect_error(kind, e))?;
                let pubsub = ConnectionManager::new_lazy_with_config(client, config_sub.clone())
                    .map_err(|e| connect_error(kind, e))?;
                let pubsub = Arc::new(Mutex::new(pubsub));
                waiters.set_connections(vec![PubSubConn::Swappable(pubsub.clone())]);
                Conn::Sentinel(SentinelConn {
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
            Mode::Redlock => unreachable!("refused above"),
        };
        if let Some(id) = waiters.waiter_id() {
            let (conn, keys, id) = (conn.clone(), Keys::new(&config.prefix), id.to_owned());
            waiters.set_leave(Arc::new(move |channel: Vec<u8>| {
                let (mut conn, queue, id) = (conn.clone(), keys.queue_of_lock(&channel), id.clone());
                Box::pin(async move {
                    let _: RedisResult<Value> = redis::cmd("ZREM").arg(queue).arg(id).query_async(&mut conn).await;
                })
            }));
        }
        let durable_tokens = append_only(&conn).await;
        let replicas = (config.wait_replicas > 0).then(|| Replicas {
            n: config.wait_replicas,
            timeout_ms: u64::try_from(config.wait_replicas_timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        });
        Ok(RedisBackend {
            inner: Arc::new(Inner {
                kind,
                conn,
                keys: Keys::new(&config.prefix),
                publish,
                waiters,
                durable_tokens,
                replicas,
                config,
            }),
        })
    }

    fn queueing(&self, turn: Option<Turn>, fair: bool) -> Queueing {
        let waiter = self.inner.waiters.waiter_id();
        Queueing::new(waiter, turn, fair, self.inner.publish, None)
    }

    fn error(&self, operation: &'static str, name: &str, f: Fault) -> LockError {
        f.into_error(self.inner.kind, operation, Some(name))
    }

    /// One acquisition attempt, detached: if the caller is gone when the
    /// answer comes, a hold it got is released at once. With the outcome,
    /// the waiting client whose turn it is when the name is free but queued
    /// for another client (fair only).
    async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        queueing: Queueing,
    ) -> Result<(TryAcquire, Option<TurnOf>), LockError> {
        let ttl_ms = ttl_millis(req.ttl);
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let inner = self.inner.clone();
        let work = async move {
            let sent_at = Instant::now();
            let r = match inner.replicas {
                None => {
                    scripts::acquire(
                        &mut inner.conn.clone(),
                        &inner.keys,
                        &name,
                        &owner,
                        ttl_ms,
                        &attempt,
                        None,
                        &queueing,
                    )
                    .await
                }
                Some(replicas) => {
                    acquire_replicated(&inner, &name, &owner, ttl_ms, &attempt, &queueing, replicas).await
                }
            };
            (sent_at, r, inner, name, owner, attempt)
        };
        let (sent_at, reply, ..) = detach(self.inner.kind, work, |(_, reply, inner, name, owner, attempt)| async move {
            if let Ok(AcquireReply::Acquired { token, .. }) = reply {
                let hold = Hold { name, owner, token };
                let backend = RedisBackend { inner };
                match backend.release(&hold, &attempt).await {
                    Ok(_) => tracing::debug!(lock = %hold.name, "released the hold of a cancelled acquisition"),
                    Err(e) => tracing::warn!(lock = %hold.name, error = %e, "releasing the hold of a cancelled acquisition failed; it expires with its ttl"),
                }
            }
        })
        .await?;
        Ok(match reply.map_err(|f| self.error("acquire", req.name, f))? {
            AcquireReply::Acquired { token, count, pttl, .. } => (
                TryAcquire::Acquired(Lease {
                    token,
                    hold_count: count,
                    valid_until: Some(lease::valid_until(sent_at, millis(pttl))),
                    lost: None,
                    session_deadline: None,
                }),
                None,
            ),
            AcquireReply::Busy { pttl, turn_of } => (
                TryAcquire::Busy {
                    retry_in: (pttl >= 0).then(|| millis(pttl)),
                },
                turn_of,
            ),
        })
    }

    /// The lock keys of names starting with `prefix`, on every primary.
    async fn lock_keys(&self, prefix: &str) -> Result<Vec<Vec<u8>>, Fault> {
        let pattern = self.inner.keys.scan_pattern(prefix);
        let pattern = &pattern;
        let Conn::Cluster(cluster) = &self.inner.conn else {
            let conn = &self.inner.conn;
            return scripts::scan(pattern, |cmd| {
                let mut c = conn.clone();
                async move { cmd.query_async(&mut c).await }
            })
            .await;
        };
        let scans = cluster_primaries(cluster)
            .await?
            .into_iter()
            .map(|(host, port)| async move {
                scripts::scan(pattern, |cmd| {
                    let mut c = cluster.clone();
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    async move { c.route_command(cmd, route).await }
                })
                .await
            });
        let mut keys = Vec::new();
        for r in join_all(scans).await {
            keys.extend(r?);
        }
        Ok(keys)
    }

    async fn extend_items(&self, items: &[ExtendItem<'_>]) -> Vec<Result<Option<i64>, Fault>> {
        let mut conn = self.inner.conn.clone();
        let replicas = self.inner.replicas;
        if !matches!(conn, Conn::Cluster(_)) {
            return match replicated(scripts::extend(&mut conn, items, replicas).await, replicas) {
                Ok(v) => v,
                Err(f) => items.iter().map(|_| Err(f.clone())).collect(),
            };
        }
        // Cluster: one call per hash tag (so per slot), all at once.
        let mut groups: HashMap<[u8; 5], Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let tag_at = item.key.iter().position(|b| *b == b'{').unwrap_or(0);
            let mut tag = [0u8; 5];
            tag.copy_from_slice(&item.key[tag_at..tag_at + 5]);
            groups.entry(tag).or_default().push(i);
        }
        let calls = groups.into_values().map(|indices| {
            let mut conn = conn.clone();
            async move {
                let group: Vec<ExtendItem<'_>> = indices
                    .iter()
                    .map(|&i| ExtendItem {
                        key: items[i].key.clone(),
                        owner: items[i].owner,
                        token: items[i].token,
                        ttl_ms: items[i].ttl_ms,
                    })
                    .collect();
                (
                    indices,
                    replicated(scripts::extend(&mut conn, &group, replicas).await, replicas),
                )
            }
        });
        let mut out: Vec<Result<Option<i64>, Fault>> = items.iter().map(|_| Ok(None)).collect();
        for (indices, result) in join_all(calls).await {
            match result {
                Ok(v) => {
                    for (i, r) in indices.into_iter().zip(v) {
                        out[i] = r;
                    }
                }
                Err(f) => {
                    for i in indices {
                        out[i] = Err(f.clone());
                    }
                }
            }
        }
        out
    }
}

/// One acquisition attempt followed by `WAIT` (in the same round trip): a
/// hold (new, re-entered or repeated) that fewer than `replicas.n` replicas
/// acknowledged is taken back — this attempt's share, by its id — and the
/// attempt fails with a retryable [`ReplicasError`].
async fn acquire_replicated(
    inner: &Arc<Inner>,
    name: &str,
    owner: &str,
    ttl_ms: u64,
    attempt: &str,
    queueing: &Queueing,
    replicas: Replicas,
) -> Result<AcquireReply, Fault> {
    let mut conn = inner.conn.clone();
    let (reply, acked) =
        scripts::acquire_replicated(&mut conn, &inner.keys, name, owner, ttl_ms, attempt, queueing, replicas).await?;
    let AcquireReply::Acquired { token, .. } = reply else {
        return Ok(reply);
    };
    if acked >= replicas.n {
        return Ok(reply);
    }
    let hold = Hold {
        name: name.to_owned(),
        owner: owner.to_owned(),
        token,
    };
    let backend = RedisBackend { inner: inner.clone() };
    match backend.release(&hold, attempt).await {
        Ok(_) => {
            tracing::debug!(lock = %name, acked, asked = replicas.n, "took back an acquisition too few replicas acknowledged")
        }
        Err(e) => {
            tracing::warn!(lock = %name, error = %e, "taking back an acquisition too few replicas acknowledged failed; it expires with its ttl")
        }
    }
    Err(short_ack(acked, replicas))
}

/// Extension replies, or a [`ReplicasError`] for all of them when fewer
/// replicas acknowledged than asked (holds not held stay not held).
fn replicated(
    r: Result<(Vec<Option<i64>>, Option<u32>), Fault>,
    replicas: Option<Replicas>,
) -> Result<Vec<Result<Option<i64>, Fault>>, Fault> {
    let (leases, acked) = r?;
    let short = match (replicas, acked) {
        (Some(replicas), Some(acked)) if acked < replicas.n => Some(short_ack(acked, replicas)),
        _ => None,
    };
    Ok(leases
        .into_iter()
        .map(|l| match (&short, l) {
            (Some(f), Some(_)) => Err(f.clone()),
            (_, l) => Ok(l),
        })
        .collect())
}

fn short_ack(acked: u32, replicas: Replicas) -> Fault {
    Fault::Replicas(ReplicasError {
        acknowledged: acked,
        asked: replicas.n,
        timeout: Duration::from_millis(replicas.timeout_ms),
    })
}

/// The primaries of a cluster, from `CLUSTER SLOTS`.
async fn cluster_primaries(conn: &ClusterConnection) -> Result<Vec<(String, u16)>, Fault> {
    let reply = conn
        .clone()
        .route_command(
            redis::cmd("CLUSTER").arg("SLOTS").clone(),
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
        )
        .await?;
    let mut primaries = Vec::new();
    if let Value::Array(ranges) = &reply {
        for range in ranges {
            if let Value::Array(parts) = range
                && let Some(Value::Array(node)) = parts.get(2)
                && let [host, Value::Int(port), ..] = node.as_slice()
            {
                let host = match host {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    _ => continue,
                };
                let entry = (host, u16::try_from(*port).unwrap_or(0));
                if !primaries.contains(&entry) {
                    primaries.push(entry);
                }
            }
        }
    }
    if primaries.is_empty() {
        return Err(crate::error::UnexpectedReply(format!("CLUSTER SLOTS: {reply:?}")).into());
    }
    Ok(primaries)
}

/// Whether the server writes an append-only file (`INFO persistence`), so
/// its counters survive a restart without relying on its clock.
async fn append_only(conn: &Conn) -> bool {
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

/// The listing every mode shares: the names found by a key scan that start
/// with `prefix`, sorted and deduplicated, inspected `chunk` at a time until
/// `limit` holders are found.
pub(crate) async fn inspect_listed<F, Fut>(
    names: impl Iterator<Item = String>,
    prefix: &str,
    limit: usize,
    chunk: usize,
    inspect: F,
) -> Result<Vec<LockInfo>, LockError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Option<LockInfo>, LockError>>,
{
    let mut names: Vec<String> = names.filter(|n| n.starts_with(prefix)).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for batch in names.chunks(chunk) {
        if out.len() >= limit {
            break;
        }
        for info in join_all(batch.iter().cloned().map(&inspect)).await {
            out.extend(info?);
        }
    }
    out.truncate(limit);
    Ok(out)
}

/// How often a release whose reply was lost is sent (it is idempotent by
/// its attempt id).
const RELEASE_TRIES: u32 = 3;

#[async_trait]
impl LockBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ttl(true, self.inner.durable_tokens)
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        Ok(self.attempt(req, self.queueing(None, req.fair)).await?.0)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let channel = self.inner.keys.lock(req.name);
        // Uncontended: one round trip, no subscription. A retryable failure
        // (a reply lost to a timeout or a reset) is tried again in the wait
        // loop with the same attempt id, which the server recognises if the
        // lost try went through. A name this client still listens on (it
        // waited for it a moment ago) is likely contended: the wait loop's
        // first attempt, which queues when busy, is the only one.
        if wait.is_some_and(|w| w.is_zero()) || !self.inner.waiters.is_listening(&channel) {
            let first = self.attempt(req, self.queueing(None, req.fair)).await.map(|(t, _)| t);
            let expired = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
            match first {
                Ok(TryAcquire::Acquired(lease)) => return Ok(Some(lease)),
                Ok(TryAcquire::Busy { .. }) if expired => return Ok(None),
                Err(e) if expired || !e.is_retryable() => return Err(e),
                Ok(TryAcquire::Busy { .. }) | Err(_) => {}
            }
        }
        wait_loop(&self.inner.waiters, &channel, deadline, |turn| async move {
            Ok(match self.attempt(req, self.queueing(Some(turn), req.fair)).await? {
                (TryAcquire::Acquired(lease), _) => Attempt::Done(lease),
                (TryAcquire::Busy { retry_in }, turn_of) => Attempt::Busy {
                    retry_in: retry_in.unwrap_or(UNKNOWN_LEASE_RECHECK),
                    turn_of,
                },
            })
        })
        .await
    }

    /// Idempotent by `attempt`, so a try whose reply was lost (timed out,
    /// connection reset) is sent again, up to three times; a
    /// retry that finds the hold gone after a lost try reports it released
    /// (the lost try freed it — or its lease ran out meanwhile, which frees
    /// it just the same).
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let (mut lost_try, mut tries) = (false, 1);
        loop {
            let r = scripts::release(
                &mut self.inner.conn.clone(),
                &self.inner.keys,
                &hold.name,
                &hold.owner,
                hold.token,
                attempt,
                self.inner.publish,
                self.inner.waiters.waiter_id().is_some(),
            )
            .await;
            if let Ok(Released {
                published: Some(message),
                ..
            }) = &r
            {
                self.inner
                    .waiters
                    .deliver_locally(&self.inner.keys.lock(&hold.name), message);
            }
            match r.map(|r| r.remaining) {
                Ok(Some(remaining)) => return Ok(ReleaseOutcome::Released { remaining }),
                Ok(None) if lost_try => return Ok(ReleaseOutcome::Released { remaining: 0 }),
                Ok(None) => return Ok(ReleaseOutcome::NotHeld),
                Err(f) if f.retryable() && tries < RELEASE_TRIES => {
                    tracing::debug!(lock = %hold.name, error = %f, "release reply lost; sending it again");
                    (lost_try, tries) = (true, tries + 1);
                }
                Err(f) => return Err(self.error("release", &hold.name, f)),
            }
        }
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.extend_many(&[(hold.clone(), ttl)]).await.pop().unwrap_or_else(|| {
            Err(self.error(
                "extend",
                &hold.name,
                Fault::Reply(crate::error::UnexpectedReply("no reply".into())),
            ))
        })
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let items: Vec<ExtendItem<'_>> = holds
            .iter()
            .map(|(h, ttl)| ExtendItem {
                key: self.inner.keys.lock(&h.name),
                owner: &h.owner,
                token: h.token,
                ttl_ms: ttl_millis(*ttl),
            })
            .collect();
        let sent_at = Instant::now();
        self.extend_items(&items)
            .await
            .into_iter()
            .zip(holds)
            .map(|(r, (hold, _))| match r {
                Ok(Some(pttl)) => Ok(ExtendOutcome::Extended {
                    valid_until: Some(lease::valid_until(sent_at, millis(pttl))),
                }),
                Ok(None) => Ok(ExtendOutcome::NotHeld),
                Err(f) => Err(self.error("extend", &hold.name, f)),
            })
            .collect()
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let stored = scripts::inspect(&mut self.inner.conn.clone(), &self.inner.keys, name)
            .await
            .map_err(|f| self.error("inspect", name, f))?;
        Ok(stored.map(|s| s.into_info(name)))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let keys = self
            .lock_keys(prefix)
            .await
            .map_err(|f| f.into_error(self.inner.kind, "list", None))?;
        let names = keys.iter().filter_map(|k| self.inner.keys.name_of(k));
        inspect_listed(names, prefix, limit, 64, |n| async move { self.inspect(&n).await }).await
    }

    /// The clients queued for `name`: a client's several waiters for one
    /// name queue once (they take their turns in the order they began
    /// waiting, one per turn of the client).
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let queued: RedisResult<usize> = redis::cmd("ZCARD")
            .arg(self.inner.keys.queue(name))
            .query_async(&mut self.inner.conn.clone())
            .await;
        queued.map_err(|e| self.error("waiting", name, Fault::Redis(e)))
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let removed = scripts::force_release(&mut self.inner.conn.clone(), &self.inner.keys, name, self.inner.publish)
            .await
            .map_err(|f| self.error("force_release", name, f))?;
        Ok(removed.map(|s| s.into_info(name)))
    }
}
