//! [`RedisBackend`]: locks on one Redis (single server, a sentinel-monitored
//! master, or a Redis Cluster) — the type, its constructor and its
//! [`LockBackend`] impl, whose methods delegate to `acquire`, `release`,
//! `extend` and `inspect`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::raw::{
    AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, ServerClock, TryAcquire,
};
use lockkit_core::{Capabilities, LockError, LockInfo, LockKind};

use crate::config::{Mode, RedisConfig};
use crate::conn::{self, Conn};
use crate::error::Fault;
use crate::layout::Keys;
use crate::scripts::{self, Publish, Replicas};
use crate::wait::Waiters;

/// Locks on one Redis: `redis://`, `rediss://`, `redis+sentinel://` or
/// `redis+cluster://`. Cheap to clone; clones share connections.
///
/// One connection (a reconnecting
/// [`ConnectionManager`](redis::aio::ConnectionManager), or the cluster
/// client's connections) carries every command; a second one, opened when
/// the first waiter needs it, carries the pub/sub messages of all waiters.
#[derive(Clone)]
pub struct RedisBackend {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) kind: &'static str,
    pub(crate) conn: Conn,
    pub(crate) keys: Keys,
    pub(crate) publish: Publish,
    pub(crate) waiters: Waiters,
    pub(crate) durable_tokens: bool,
    /// `WAIT` after acquisitions and extensions (`wait_replicas` above 0).
    pub(crate) replicas: Option<Replicas>,
    pub(crate) config: RedisConfig,
    /// The server's clock as last read (with the restart guard on).
    pub(crate) clock: ServerClock,
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

impl RedisBackend {
    /// Connects to the server(s) `config` names (not Redlock: see
    /// [`RedlockBackend`](crate::RedlockBackend)). Fails if no server
    /// answers.
    pub async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        config.check_wait_replicas()?;
        config.check_restart_guard()?;
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
        let conn = conn::open(&config, kind, &waiters).await?;
        if let Some(id) = waiters.waiter_id() {
            let (conn, keys, id) = (conn.clone(), Keys::new(&config.prefix), id.to_owned());
            waiters.set_leave(Arc::new(move |channel: Vec<u8>, entry: Option<String>| {
                let (mut conn, keys, id) = (conn.clone(), keys.clone(), id.clone());
                Box::pin(async move {
                    let leave = scripts::Leaving {
                        channel: &channel,
                        id: &id,
                        entry: entry.as_deref(),
                        publish,
                    };
                    scripts::leave_line(&mut conn, &keys, &leave).await
                })
            }));
        }
        let durable_tokens = conn::append_only(&conn).await;
        let replicas = (config.wait_replicas > 0).then(|| Replicas {
            n: config.wait_replicas,
            timeout_ms: u64::try_from(config.wait_replicas_timeout.as_millis())
                .unwrap_or(u64::MAX)
                .max(1),
        });
        let backend = RedisBackend {
            inner: Arc::new(Inner {
                kind,
                conn,
                keys: Keys::new(&config.prefix),
                publish,
                waiters,
                durable_tokens,
                replicas,
                config,
                clock: ServerClock::new(),
            }),
        };
        // With the guard on, the clock is read once now, so that the first
        // acquisition's reading already has one to be compared with.
        if backend.inner.config.guard_floor().is_some() {
            backend.inner.first_clock_reading().await;
        }
        Ok(backend)
    }

    pub(crate) fn error(&self, operation: &'static str, name: &str, f: Fault) -> LockError {
        f.into_error(self.inner.kind, operation, Some(name))
    }
}

#[async_trait]
impl LockBackend for RedisBackend {
    fn name(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::ttl_leases().with_batch_extend().with_shared_holds();
        let caps = if self.inner.durable_tokens {
            caps.with_durable_tokens()
        } else {
            caps
        };
        caps.with_admin()
            .with_idempotent_attempts()
            .with_fair()
            .with_semaphores()
            .with_rw_locks()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        Ok(self.attempt(req, self.queueing(None, req.fair)).await?.0)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        self.acquire_waiting(req, wait).await
    }

    /// Idempotent by `attempt`, so a try whose reply was lost (timed out,
    /// connection reset) is sent again, up to three times; a
    /// retry that finds the hold gone after a lost try reports it released
    /// (the lost try freed it — or its lease ran out meanwhile, which frees
    /// it just the same).
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.release_share(hold, attempt).await
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
        self.extend_holds(holds).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inspect_name(name).await
    }

    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        self.holders_of(name, kind).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.list_held(prefix, limit).await
    }

    /// The clients queued for `name`: a client's several waiters for one
    /// name queue once (they take their turns in the order they began
    /// waiting, one per turn of the client).
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.waiting_for(name, LockKind::Mutex).await
    }

    /// The clients queued for `name`'s `kind` (readers and writers of a
    /// read-write lock queue in one line), as [`waiting`](Self::waiting).
    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        self.queued(name, kind).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.force_release_name(name).await
    }
}
