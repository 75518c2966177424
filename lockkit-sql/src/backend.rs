//! [`SqlBackend`]'s [`LockBackend`] implementation, each method delegating
//! to the module that does the work (`acquire.rs`, `wait/`, `release.rs`,
//! `extend.rs`, `inspect.rs`), and [`SqlBackend::connect`], which opens a
//! backend: its pools, the schema check (`layout.rs`), the background tasks
//! (the sweeper, the renewal of places in line) and, on Postgres, the
//! listener and wait-list connections. The logic is the same for every
//! database; the SQL text comes from `sql/`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::raw::{
    AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, TryAcquire, check_attempt_id,
};
use lockkit_core::{Capabilities, LockError, LockInfo, LockKind};
use tokio_util::sync::CancellationToken;

use crate::config::{Dialect, Mode, SqlConfig};
use crate::conn::Db;
use crate::conn::pooler::resolve_pooler;
use crate::error::backend_error;
use crate::extend::EXTEND_CHUNK;
use crate::handle::{Inner, SqlBackend};
use crate::sql::{KindStatements, Statements};
use crate::wait::listener::Waiters;

#[async_trait]
impl LockBackend for SqlBackend {
    fn name(&self) -> &'static str {
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
            // One name, one lock: this process's waiters of the other kinds
            // may be let in now (other processes' look on their backoff).
            let kinds = [LockKind::Mutex, LockKind::Permit { permits: 1 }, LockKind::Write];
            for other in kinds.into_iter().filter(|k| !k.same_lock(hold.kind)) {
                self.inner.waiters.wake(&crate::wait::line_key(&hold.name, other));
            }
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
        self.inner.inspect_any(name).await
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

impl SqlBackend {
    /// Opens the pool, creates or checks the tables ([`migrate`](Self::migrate)),
    /// and starts the sweeper (and on Postgres the release listener).
    ///
    /// On Postgres it first finds out whether a connection pooler that
    /// shares server sessions (PgBouncer in transaction or statement
    /// mode) stands in between (`?pooler=`, probed by default): then its
    /// statements go with their arguments inlined in the simple protocol,
    /// and it keeps nothing on a server session — no `LISTEN` and no wait
    /// list, so waiters in other processes poll (`max_backoff`), and a
    /// dead waiter's place lives out its `queue_lease`.
    pub async fn connect(config: SqlConfig) -> Result<Self, LockError> {
        let kind = config.dialect.name();
        check_config(&config)?;
        // A direct connection first: the pool would report a refused
        // connection or a bad password only as a timeout, this says why.
        Db::probe(&config)
            .await
            .map_err(|e| backend_error(kind, "connect", None, e))?;
        let config = behind_pooler(config).await?;
        let (db, line_db) = open_pools(&config)?;
        let backend = SqlBackend {
            inner: Arc::new(Inner::open(config, db, line_db)),
        };
        backend.migrate().await?;
        let inner = &backend.inner;
        inner.start_sweeper();
        inner.start_renewer();
        #[cfg(feature = "postgres")]
        if inner.config.dialect == Dialect::Postgres && !inner.config.pooler.shares_sessions() {
            inner.start_wake_ups()?;
        }
        Ok(backend)
    }
}

/// Refuses what this backend cannot serve before anything is opened: the
/// session mode (another crate's backend), a SQLite file in a directory
/// that is not there.
fn check_config(config: &SqlConfig) -> Result<(), LockError> {
    if config.mode == Mode::Session {
        return Err(LockError::config(
            "query parameter mode",
            "mode=session is served by lockkit_sql_session::SessionBackend (lockkit::connect picks it)",
        ));
    }
    if config.dialect == Dialect::Sqlite {
        check_sqlite_dir(&config.database)?;
    }
    Ok(())
}

/// `config` with its pooler found out (`pooler=auto` probed). Behind
/// one that shares server sessions no release is pushed to other
/// processes, so Postgres's default `max_backoff` (1 s, for a fallback to
/// `NOTIFY`) becomes MySQL's (250 ms), the pause of a backend that polls.
async fn behind_pooler(mut config: SqlConfig) -> Result<SqlConfig, LockError> {
    config.pooler = resolve_pooler(&config)
        .await
        .map_err(|e| backend_error(config.dialect.name(), "connect", None, e))?;
    let postgres_default = SqlConfig::new(Dialect::Postgres, "").max_backoff;
    if config.pooler.shares_sessions() && config.max_backoff == postgres_default {
        config.max_backoff = SqlConfig::new(Dialect::Mysql, "").max_backoff;
    }
    if config.pooler.shares_sessions() {
        tracing::debug!(
            pooler = config.pooler.describe(),
            "lockkit: a connection pooler shares server sessions"
        );
    }
    Ok(config)
}

/// The backend's pool, and the fair line's (see [`Db::open_line`]).
fn open_pools(config: &SqlConfig) -> Result<(Db, Db), LockError> {
    let opened = Db::open(config).and_then(|db| {
        let line_db = db.open_line(config)?;
        Ok((db, line_db))
    });
    opened.map_err(|e| match e {
        sqlx::Error::Configuration(e) => LockError::config("url", e.to_string()),
        e => backend_error(config.dialect.name(), "connect", None, e),
    })
}

impl Inner {
    /// The state of a backend on `config`'s table, over the pools `db` and
    /// `line_db`; no task runs yet.
    fn open(config: SqlConfig, db: Db, line_db: Db) -> Self {
        let kind = config.dialect.name();
        // Backends of this process on one database and table share their
        // waiters, so a release wakes the next in line whichever backend
        // it waits on.
        let shared_key =
            (config.database != ":memory:").then(|| format!("{}\0{}\0{}", kind, config.database, config.table));
        Inner {
            kind,
            sql: Statements::new(config.dialect, &config.table),
            ksql: KindStatements::new(config.dialect, &config.table),
            renew_db: db.renewals(),
            db,
            line_db,
            waiters: Waiters::shared(shared_key),
            places: Arc::default(),
            live: Default::default(),
            #[cfg(feature = "mysql")]
            tokens: std::sync::OnceLock::new(),
            #[cfg(feature = "postgres")]
            wait_list: std::sync::OnceLock::new(),
            stop: CancellationToken::new(),
            config,
        }
    }

    /// Starts the sweeper of expired rows, unless `sweep_interval=0s`.
    fn start_sweeper(&self) {
        let Some(interval) = self.config.sweep_interval else {
            return;
        };
        let mut sweeps = vec![
            self.sql.sweep.clone(),
            self.sql.sweep_waiters.clone(),
            self.ksql.sweep.clone(),
        ];
        sweeps.extend(self.sql.sweep_live.clone());
        crate::sweeper::spawn(
            self.db.clone(),
            sweeps,
            interval,
            self.config.sweep_batch,
            self.stop.clone(),
        );
    }

    /// Starts the task that renews the leases of this backend's places in
    /// line.
    fn start_renewer(&self) {
        let renewal = crate::wait::places::Renewal {
            db: self.line_db.clone(),
            sql: self.sql.clone(),
            places: self.places.clone(),
            waiters: self.waiters.clone(),
        };
        crate::wait::places::spawn_renewer(renewal, self.config.queue_lease, self.stop.clone());
    }

    /// Postgres: the `LISTEN` connection that wakes this process's waiters
    /// on releases elsewhere, and the wait-list connection that tells
    /// releasers somebody waits (and carries the liveness key).
    #[cfg(feature = "postgres")]
    fn start_wake_ups(&self) -> Result<(), LockError> {
        use std::str::FromStr;
        let options = sqlx::postgres::PgConnectOptions::from_str(&self.config.database)
            .map_err(|e| backend_error(self.kind, "connect", None, e))?
            .application_name("lockkit-listener");
        self.waiters
            .listen_pg(options.clone(), self.config.connect_timeout, self.sql.channel());
        let (Some(join), Some(leave)) = (&self.sql.wait_join, &self.sql.wait_leave) else {
            return Ok(());
        };
        let statements = crate::wait::waitlist::Statements {
            join: join.clone(),
            leave: leave.clone(),
            live: self.sql.live_take.clone(),
            key: self.live.key(),
            held: self.live.held_flag(),
        };
        let list = crate::wait::waitlist::WaitList::spawn(
            options.application_name("lockkit-waitlist"),
            self.config.connect_timeout,
            statements,
            self.stop.clone(),
        );
        let _ = self.wait_list.set(list);
        Ok(())
    }
}

/// SQLite creates a missing database file but not its directory; say so
/// instead of the driver's "unable to open database file".
fn check_sqlite_dir(database: &str) -> Result<(), LockError> {
    if database == ":memory:" {
        return Ok(());
    }
    let path = std::path::Path::new(database);
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    let bad = |why: &str| LockError::config("url path", format!("{database:?}: {why}"));
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(bad(&format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(bad(&format!(
            "the directory {} does not exist (SQLite creates the file, not its directory)",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(bad(&format!("a part of {} is not a directory", dir.display())))
        }
        Err(e) => Err(bad(&format!("cannot use the directory {}: {e}", dir.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The session mode is another crate's backend: this one refuses its
    /// configuration before opening anything, rather than serving it as a
    /// table.
    #[tokio::test]
    async fn a_session_mode_config_is_refused_before_connecting() {
        let mut config = SqlConfig::new(Dialect::Postgres, "postgres://nobody@127.0.0.1:1/none");
        config.mode = Mode::Session;
        let e = SqlBackend::connect(config).await.expect_err("not this crate's mode");
        assert!(
            matches!(&e, LockError::InvalidConfig { part, reason } if part == "query parameter mode" && reason.contains("lockkit_sql_session")),
            "{e:?}"
        );
        let mut url = lockkit_core::raw::ConnectUrl::parse("postgres://nobody@127.0.0.1:1/none?mode=session").unwrap();
        let e = crate::connect(&mut url).await.expect_err("not this crate's mode");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{e:?}");
    }
}
