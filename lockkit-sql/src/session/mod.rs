//! The session-lock mode of the SQL backend (`?mode=session`):
//! [`SessionBackend`], holds that live on server connections — MariaDB
//! `GET_LOCK`, Postgres advisory locks — instead of rows of the lock table.
//!
//! # Why
//!
//! Every table write is a flushed commit; a session lock writes nothing.
//! On MariaDB 10.11 one client did 460–590 acquire+release cycles/s on the
//! table and 3,900 with `GET_LOCK` (issue 18). This mode keeps lockkit's
//! contract where it can at the cost of a round trip per acquisition and
//! release, like the raw functions.
//!
//! # How
//!
//! - **A hold is a server lock on a connection.** One *primary*
//!   connection per backend takes every try (`SELECT GET_LOCK(key, 0),
//!   NEXTVAL(seq)` / `SELECT pg_try_advisory_lock(key), nextval(seq)`: the
//!   lock and a token in one statement) and carries the holds it got; many
//!   holds share it. A release is one statement (`RELEASE_LOCK` /
//!   `pg_advisory_unlock`) on the hold's connection. Keys: see the `key`
//!   module (hashed names; a collision makes two names share one lock,
//!   never breaks exclusion).
//! - **Waiting is the server's, once per name and backend.** The tasks of
//!   a backend (all its clones, and every `LockClient` made from it with
//!   `with_new_owner`) that wait for one name stand in an in-process line
//!   behind one server-side wait for it, which a task of the backend runs on
//!   a *spare* connection (a connection blocked in a wait can do nothing
//!   else): `GET_LOCK(key, seconds)` (fractional), or `pg_advisory_lock`
//!   under a Postgres `lock_timeout` set in the same statement, bounded by
//!   the latest wait bound in line. A grant goes to the first task in line
//!   (the grant's connection then carries that hold, and is a spare again
//!   when its last hold is released); the backend then queues again, at the
//!   end of the server's queue, for the next task. Details in the `wait`
//!   module.
//! - **Order.** Within a backend, tasks are served in the order they began
//!   waiting (a fair `lock` does not try ahead of tasks already in line);
//!   when an owner is granted the name, its other tasks in line re-enter
//!   its hold at once. Across backends and processes the server's FIFO
//!   queue holds one wait per backend and name, so waiting backends take
//!   turns, one grant each, in the order their waits queued.
//! - **Connections.** A backend has at most `1 + W + H` server connections
//!   in use, however many tasks wait: the primary connection, one per name
//!   it waits for (`W`), and one per name it holds since a wait granted it
//!   (`H`; a connection whose last hold is being released is taken by the
//!   next wait when the server's answer comes, rather than a new one
//!   opened). A crowd of any size on one name uses 3 at a time; a wait
//!   that finds no spare and no connection coming back (a holder that has
//!   not begun its release yet) opens one more. Connections without holds
//!   are kept for later waits, at most `max_connections` (default 10), and
//!   ending an abandoned wait uses one of them (or opens one): a client has
//!   at most `1 + W + H + max_connections` open.
//! - **Cancellation.** A task that leaves the line (its `lock` dropped, or
//!   its own wait bound passed) just leaves; the server-side wait goes on
//!   for the others. When the last task leaves, the wait is ended from
//!   another connection (`KILL <id>` / `pg_terminate_backend(pid)`, and its
//!   connection dropped): no wait stays queued and no lock is granted later
//!   to nobody. A grant whose task left before taking it goes to the next
//!   task in line, or is released. A try whose caller left is read to the
//!   end and released in the background (`lockkit_core::detach`).
//! - **A waiter that dies** (its process killed) leaves the server's queue
//!   with its connection: the server drops the wait, or, if the grant comes
//!   first, fails to send it and frees the lock with the connection. The
//!   next waiter is not held up (a few milliseconds measured on both
//!   databases).
//! - **The lease is the connection** ([`LeaseKind::Session`], like a
//!   ZooKeeper session): it lasts until released or until the connection
//!   is lost. One task per backend pings every connection that carries
//!   holds every `ping_interval` (default 1 s); a failed or unanswered ping,
//!   or a failed statement, drops the connection and fires the lost signal
//!   of every hold on it. A connection killed server-side frees its locks
//!   at once, but its holder learns of it only at the next ping: for up to
//!   `ping_interval` another owner can hold the name while the old
//!   holder's lost signal has not fired yet (the fencing token orders
//!   them). A paused holder process keeps its locks (the server does not
//!   end an idle connection before `wait_timeout` / TCP keepalive).
//! - **Re-entry and attempts are counted here**, not on the server: one
//!   server lock per held name, and this backend's table of holds (owner,
//!   token, one attempt id per share) answers re-entry without a round
//!   trip and makes repeated attempts and releases count once. Another
//!   owner of the same backend gets `Busy` at once, or waits on the server
//!   like anybody else.
//! - **Fencing tokens** come from a sequence `<table>_session_seq`, drawn in
//!   the acquiring statement after the lock was decided (a token drawn for
//!   a refused try is skipped). MariaDB: `CREATE SEQUENCE … CACHE 1000`,
//!   whose cache is shared by all connections, so tokens grow across
//!   connections and processes and the sequence row is written once per
//!   1000 tokens; after a server crash the sequence resumes after the
//!   cached range, so tokens keep growing (declared:
//!   [`Capabilities::durable_tokens`]). Postgres: a sequence with `CACHE
//!   1` — a Postgres sequence caches *per session*, so a cache would hand
//!   out values out of order across connections. `nextval` writes no
//!   flushed commit (it logs 32 values ahead), so after a Postgres *crash*
//!   a token drawn in the last moments may be handed out again; tokens
//!   grow across clean restarts and client restarts. Not declared durable
//!   on Postgres for that reason. MySQL (not MariaDB) has no sequences:
//!   connecting fails with a configuration error.
//!
//! # What it gives up against the table
//!
//! - Holds do not survive their connection: a database restart, a
//!   failover, a network cut or a `KILL` ends them (the lost signal fires).
//!   There is no ttl: a hold lasts until released or lost; `extend` only
//!   checks that it is still held.
//! - A hold's owner, count and token are known only to the backend that
//!   holds it. [`LockBackend::inspect`] of a name held elsewhere says only
//!   that it is held (`IS_USED_LOCK` / `pg_locks`): owner `""`, count 0,
//!   token 0. Two processes configured with the same owner id do not share
//!   a hold (contract point 2's shared count): the second waits. Not
//!   declared: [`Capabilities::shared_holds`].
//! - No `list` or `force_release` (enumerating user locks needs
//!   `performance_schema` / `metadata_lock_info` on MariaDB); no
//!   semaphores or read-write locks.
//! - `waiting` (and so [`Capabilities::fair`]) on Postgres only, counted in
//!   `pg_locks`: it counts waiting backends (each stands in the queue once
//!   per name, however many of its tasks wait), not tasks. MariaDB cannot
//!   count waiters without `performance_schema` (off by default), so
//!   fairness is not declared there although its queue is FIFO.
//!
//! # Privileges
//!
//! `GET_LOCK` and advisory locks need none. The sequence is created on
//! first connect if missing (`?create_table=false` only checks it): the
//! creating user needs `CREATE` (MariaDB) / `CREATE` on the schema
//! (Postgres). Afterwards a least-privilege user needs `SELECT, INSERT` on
//! the sequence (MariaDB: `NEXTVAL` is an insert) / `USAGE` on it
//! (Postgres). Ending an abandoned wait kills one of the user's own
//! connections, which needs no privilege on either server.

mod acquire;
mod carrier;
mod conn;
mod holds;
mod key;
mod pinger;
mod release;
mod sql;
mod wait;

pub use key::server_key;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::LockError;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LeaseKind, LockBackend, LockInfo, LockKind,
    ReleaseOutcome, TryAcquire,
};
use lockkit_core::name::check_attempt_id;
use tokio_util::sync::CancellationToken;

use self::carrier::{Session, Spare};
use self::conn::Conn;
use self::holds::Entry;
use self::key::Key;
use self::sql::SessionSql;
use self::wait::WaitLines;
use crate::config::{Dialect, SqlConfig};
use crate::error::{Class, backend_error, classify};

/// The SQL backend in session mode (`?mode=session` on a `mysql://`,
/// `mariadb://` or `postgres://` URL): holds are MariaDB `GET_LOCK` locks
/// or Postgres advisory locks on this backend's connections. See the
/// [module documentation](self) for how, and for what it gives up against
/// the lock table ([`SqlBackend`](crate::SqlBackend)).
///
/// Cheap to clone (clones share connections and holds). The ping task
/// stops, and the connections close (freeing their locks), when the last
/// clone is dropped.
#[derive(Clone)]
pub struct SessionBackend {
    inner: Arc<Inner>,
}

/// What the clones of a [`SessionBackend`] share.
pub(crate) struct Inner {
    kind: &'static str,
    config: SqlConfig,
    sql: SessionSql,
    /// The holds of this backend, by name.
    holds: std::sync::Mutex<HashMap<String, Entry>>,
    /// The connection tries run on (opened again when lost).
    primary: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Connections that carry holds granted by a wait.
    carriers: std::sync::Mutex<Vec<Arc<Session>>>,
    /// Connections without holds, for waits.
    spares: std::sync::Mutex<Vec<Spare>>,
    /// Connections whose last hold is being released: spares again once
    /// the server answers.
    returning: std::sync::atomic::AtomicUsize,
    /// Rung when a connection was put back with the spares, or a returning
    /// one was not.
    spare_back: tokio::sync::Notify,
    /// The tasks waiting for each name, in line behind the one
    /// server-side wait for it.
    lines: WaitLines,
    /// Names a try of this backend found busy, and when (see `BUSY_FOR`
    /// in `acquire.rs`).
    busy: std::sync::Mutex<HashMap<String, tokio::time::Instant>>,
    stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for SessionBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl SessionBackend {
    /// Connects: opens the primary connection, draws a token to check the
    /// sequence (creating it first if that fails and `create_table`
    /// allows), and starts the ping task. Fails with a configuration
    /// error on SQLite, on MySQL without sequences, and when the sequence
    /// is missing or not usable by this user.
    pub async fn connect(config: SqlConfig) -> Result<Self, LockError> {
        let kind = config.dialect.kind();
        if config.dialect == Dialect::Sqlite {
            return Err(LockError::config(
                "query parameter mode",
                "SQLite has no session locks: mode=session needs mysql://, mariadb:// or postgres://",
            ));
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

    /// The settings this backend runs with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    fn check_kind(&self, kind: LockKind) -> Result<(), LockError> {
        match kind {
            LockKind::Mutex => Ok(()),
            other => Err(LockError::Unsupported {
                backend: self.inner.kind,
                operation: other.family(),
            }),
        }
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
        Err(e) => Err(backend_error(config.dialect.kind(), "connect", None, e)),
    }
}

impl Inner {
    /// A statement on `session` failed: unless the error is the
    /// statement's own (permanent), the connection is dropped and its holds
    /// are lost.
    fn statement_failed(&self, session: &Arc<Session>, conn: &mut Option<Conn>, e: &sqlx::Error) {
        if classify(e) != Class::Permanent {
            *conn = None;
            self.forget_session(session);
        }
    }

    fn lost_error(&self, operation: &'static str, name: &str, session: &Session) -> LockError {
        LockError::backend(
            self.kind,
            operation,
            Some(name),
            true,
            std::io::Error::other(format!("connection {} was lost", session.id)),
        )
    }
}

#[async_trait]
impl LockBackend for SessionBackend {
    fn kind(&self) -> &'static str {
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
        if let Some(info) = self.inner.local_info(name) {
            return Ok(Some(info));
        }
        let held = self
            .inner
            .on_primary("inspect", name, |conn, sql, key| Box::pin(conn.held(sql, key)))
            .await?;
        Ok(held.then(|| LockInfo {
            name: name.to_owned(),
            owner: String::new(),
            hold_count: 0,
            token: 0,
            remaining: None,
        }))
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let n = self
            .inner
            .on_primary("waiting", name, |conn, sql, key| Box::pin(conn.waiting(sql, key)))
            .await?;
        n.ok_or(LockError::Unsupported {
            backend: self.inner.kind,
            operation: "waiting",
        })
    }
}

type ConnFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

impl Inner {
    /// Runs a look (no hold taken) on the primary connection.
    async fn on_primary<T>(
        &self,
        operation: &'static str,
        name: &str,
        run: impl for<'a> FnOnce(&'a mut Conn, &'a SessionSql, &'a Key) -> ConnFuture<'a, T>,
    ) -> Result<T, LockError> {
        let key = Key::of(self.config.dialect, name);
        let session = self.primary().await?;
        let mut guard = session.conn.lock().await;
        let Some(conn) = guard.as_mut() else {
            return Err(self.lost_error(operation, name, &session));
        };
        match run(conn, &self.sql, &key).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.statement_failed(&session, &mut guard, &e);
                Err(backend_error(self.kind, operation, Some(name), e))
            }
        }
    }
}
