//! [`SessionBackend`]'s [`LockBackend`] implementation, with the looks it
//! runs on the primary connection, and [`SessionBackend::connect`], which
//! opens the primary connection, checks the token sequence and starts the
//! ping task.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::raw::{
    AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, TryAcquire, check_attempt_id,
};
use lockkit_core::{Capabilities, LeaseKind, LockError, LockInfo, LockKind};
use tokio_util::sync::CancellationToken;

use crate::conn::driver::Conn;
use crate::conn::sessions::Session;
use crate::handle::{Inner, SessionBackend};
use crate::sql::SessionSql;
use crate::{pinger, wait};
use lockkit_sql::raw::{Class, backend_error, classify, resolve_pooler};
use lockkit_sql::{Dialect, SqlConfig};

impl SessionBackend {
    /// Connects: probes for a connection pooler that shares server
    /// sessions (Postgres, `?pooler=`), opens the primary connection, draws
    /// a token to check the sequence (creating it first if that fails and
    /// `create_table` allows), and starts the ping task. Fails with a
    /// configuration error on SQLite, on MySQL without sequences, behind a
    /// transaction or statement pooler (naming its pool mode), and when the
    /// sequence is missing or not usable by this user.
    pub async fn connect(config: SqlConfig) -> Result<Self, LockError> {
        let kind = config.dialect.name();
        if config.dialect == Dialect::Sqlite {
            return Err(LockError::config(
                "query parameter mode",
                "SQLite has no session locks: mode=session needs mysql://, mariadb:// or postgres://",
            ));
        }
        // Before anything is locked: a pooler that shares server sessions
        // would share the locks (see `pooler.rs`).
        let pooler = resolve_pooler(&config).await.map_err(|e| match e {
            sqlx::Error::Configuration(e) => LockError::config("url", e.to_string()),
            e => backend_error(kind, "connect", None, e),
        })?;
        if pooler.shares_sessions() {
            return Err(crate::pooler::refused(Some(pooler)));
        }
        let sql = SessionSql::new(config.dialect, &config.table);
        let mut conn = Conn::open(&config).await.map_err(|e| match e {
            sqlx::Error::Configuration(e) => LockError::config("url", e.to_string()),
            e => backend_error(kind, "connect", None, e),
        })?;
        prepare_sequence(&mut conn, &sql, &config).await?;
        let id = conn
            .id(&sql)
            .await
            .map_err(|e| backend_error(kind, "connect", None, e))?;
        let inner = Arc::new_cyclic(|weak| Inner {
            kind,
            sql,
            holds: std::sync::Mutex::default(),
            primary: tokio::sync::Mutex::new(Some(Session::new(conn, id, true))),
            carriers: std::sync::Mutex::default(),
            spares: std::sync::Mutex::default(),
            returning: std::sync::atomic::AtomicUsize::new(0),
            spare_back: tokio::sync::Notify::new(),
            lines: wait::lines(weak.clone()),
            busy: std::sync::Mutex::default(),
            stop: CancellationToken::new(),
            config,
        });
        pinger::spawn(&inner);
        Ok(SessionBackend { inner })
    }
}

/// Creates the sequence if missing and allowed, and draws a token from it:
/// a missing sequence, missing rights or a server without sequences is a
/// configuration error that says what to do.
async fn prepare_sequence(conn: &mut Conn, sql: &SessionSql, config: &SqlConfig) -> Result<(), LockError> {
    // The sequence is created only when drawing from it fails: on MariaDB
    // `CREATE SEQUENCE IF NOT EXISTS` of an existing sequence waits for an
    // exclusive metadata lock, which every wait in progress (its statement
    // draws the token) holds off, and which, queued, holds off every token
    // draw after it: a client connecting while another waits would stall
    // every acquisition until that wait ended.
    let mut drawn = conn.next_token(sql).await;
    if config.create_table && matches!(&drawn, Err(e) if classify(e) == Class::Permanent) {
        // A user without CREATE may still use an existing sequence.
        if let Err(e) = conn.execute(&sql.create_seq).await {
            tracing::debug!(sequence = %sql.seq, error = %e, "creating the token sequence failed; checking it");
        }
        drawn = conn.next_token(sql).await;
    }
    match drawn {
        Ok(_) => Ok(()),
        Err(e) if classify(&e) == Class::Permanent => {
            let mariadb = if config.dialect == Dialect::Mysql {
                " (mode=session needs MariaDB 10.3 or later: MySQL has no sequences)"
            } else {
                ""
            };
            Err(LockError::config(
                "query parameter mode",
                format!(
                    "the token sequence {:?} cannot be used: {e}{mariadb}; create it as its owner \
                     (connect once with create_table=true) and grant this user {}",
                    sql.seq,
                    match config.dialect {
                        Dialect::Postgres => "USAGE on it",
                        _ => "SELECT, INSERT on it",
                    }
                ),
            ))
        }
        Err(e) => Err(backend_error(config.dialect.name(), "connect", None, e)),
    }
}

#[async_trait]
impl LockBackend for SessionBackend {
    fn name(&self) -> &'static str {
        self.inner.kind
    }

    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::session_leases().with_idempotent_attempts();
        debug_assert_eq!(caps.leases, LeaseKind::Session);
        match self.inner.config.dialect {
            Dialect::Postgres => caps.with_fair(),
            _ => caps.with_durable_tokens(),
        }
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        check_attempt_id(req.attempt)?;
        self.attempt(req).await
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        check_attempt_id(req.attempt)?;
        self.acquire_waiting(req, wait).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        check_attempt_id(attempt)?;
        if hold.kind != LockKind::Mutex {
            return Ok(ReleaseOutcome::NotHeld);
        }
        self.release_hold(hold, attempt).await
    }

    /// A session lease has no ttl: extending checks that the hold stands.
    async fn extend(&self, hold: &Hold, _ttl: Duration) -> Result<ExtendOutcome, LockError> {
        Ok(if self.inner.holds_now(&hold.name, &hold.owner, hold.token) {
            ExtendOutcome::Extended { valid_until: None }
        } else {
            ExtendOutcome::NotHeld
        })
    }

    /// This backend's own hold in full; a hold by any other connection as
    /// owner `""`, count 0, token 0 (the server knows only that it is held).
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.inner.waiting(name).await
    }
}
