//! [`SqlBackend`]: the handle and its shared state, and its [`LockBackend`]
//! implementation, each method delegating to the module that does the work
//! (`acquire.rs`, `wait/`, `release.rs`, `extend.rs`, `inspect.rs`). The
//! logic is the same for every database; the SQL text comes from `sql/`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockError;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, LockKind, ReleaseOutcome,
    TryAcquire,
};
use lockkit_core::name::check_attempt_id;
use tokio_util::sync::CancellationToken;

use crate::config::{Dialect, SqlConfig};
use crate::conn::Db;
use crate::extend::EXTEND_CHUNK;
use crate::sql::{KindStatements, Statements};
use crate::wait::listener::Waiters;
use crate::wait::live::Live;
use crate::wait::queue::Places;

/// A lock table in MySQL/MariaDB, Postgres or SQLite.
///
/// Cheap to clone (clones share the pool). The sweeper and the Postgres
/// listener stop when the last clone is dropped.
#[derive(Clone)]
pub struct SqlBackend {
    pub(crate) inner: Arc<Inner>,
}

/// What the clones of a [`SqlBackend`] share: settings, pools, statements,
/// this process's waiters, and the stop signal of the background tasks.
pub(crate) struct Inner {
    pub(crate) kind: &'static str,
    pub(crate) config: SqlConfig,
    pub(crate) db: Db,
    /// The fair line's statements (see [`Db::open_line`]).
    pub(crate) line_db: Db,
    /// Lease extensions: `db`'s pool, with the connections its operations
    /// leave free (see [`Db::renewals`]).
    pub(crate) renew_db: Db,
    pub(crate) sql: Statements,
    /// Semaphores' and read-write locks' statements (see `kinds/`).
    pub(crate) ksql: KindStatements,
    pub(crate) waiters: Arc<Waiters>,
    /// The places this backend's fair waiters hold in line (renewed by the
    /// task in `wait/queue.rs`).
    pub(crate) places: Arc<Places>,
    /// The key that tells other processes this backend's waiters live.
    pub(crate) live: Live,
    /// MySQL/MariaDB: where the claims draw tokens (set by `migrate`).
    #[cfg(feature = "mysql")]
    pub(crate) tokens: std::sync::OnceLock<crate::sql::MysqlTokens>,
    /// Postgres: this backend's places on the wait lists of names.
    #[cfg(feature = "postgres")]
    pub(crate) wait_list: std::sync::OnceLock<crate::wait::waitlist::WaitList>,
    pub(crate) stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

#[async_trait]
impl LockBackend for SqlBackend {
    fn kind(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        let durable = !(self.inner.config.dialect == Dialect::Sqlite && self.inner.config.database == ":memory:");
        // One statement per part; the watchdog sends parts concurrently over the pool.
        let caps = Capabilities::ttl_leases().with_batch_extend().with_shared_holds();
        let caps = if durable { caps.with_durable_tokens() } else { caps };
        caps.with_extend_batch_max(EXTEND_CHUNK)
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
            .with_semaphores()
            .with_rw_locks()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        // Fair, the claim refuses a free name while others wait in line.
        self.detached_attempt(req, false).await.map(|(r, _)| r)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        if req.fair {
            return self.acquire_fair(req, wait).await;
        }
        self.acquire_unfair(req, wait).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        check_attempt_id(attempt)?;
        let released = self.inner.release(hold, attempt).await?;
        if !matches!(released, ReleaseOutcome::Released { remaining } if remaining > 0) {
            let key = crate::wait::line_key(&hold.name, hold.kind);
            self.inner.waiters.set_holder(&key, &hold.owner, false);
        }
        Ok(released)
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.inner.extend(hold, ttl).await
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        self.extend_batches(holds).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }

    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self.inner.inspect(name).await?.into_iter().collect()),
            kind => self.inner.kind_holders(name, kind).await,
        }
    }

    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        match kind {
            LockKind::Mutex => self.count_waiting(name).await,
            kind => self.inner.kind_waiting(name, kind).await,
        }
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.count_waiting(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.list_prefix(prefix, limit).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.force_release_name(name).await
    }
}
