//! [`SqlBackend`]: the [`LockBackend`] over a lock table, the same logic for
//! every database; the SQL text comes from `sql.rs`.
//!
//! # How a lock is taken
//!
//! One **claim** inserts the row, takes over an expired row or re-enters
//! one's own (count + 1, lease never shortened), and reports the hold count,
//! token and remaining lease — or the holder's remaining lease when busy.
//!
//! A new hold's fencing token comes from a durable counter (a Postgres
//! sequence; `<table>_tokens` rows on MySQL and SQLite), and *when* it is
//! drawn is what makes tokens strictly grow per name: it must be drawn while
//! the name is held against every other acquirer, through the commit. A value
//! drawn before the row is reached could be overtaken by another client's
//! whole acquire + release in between. So each dialect draws under a lock on
//! the name that lasts to the commit:
//!
//! - **MySQL**: claim, draw (from one of 64 counter rows, by the name's
//!   hash) and stamp run as one transaction, sent as one multi-statement
//!   round trip; the claim's row lock on the name comes first.
//! - **Postgres**: one statement; it takes a transaction-scoped advisory lock
//!   on the name before `nextval`.
//! - **SQLite**: one statement; SQLite runs one writer at a time, and a
//!   trigger moves the counter as the token is written.
//!
//! Release deletes the row (last hold) or decrements it, only where name,
//! owner and token match and the lease runs; extend moves the expiry out,
//! never in, under the same condition.
//!
//! # The fair line
//!
//! A fair acquisition that finds the name busy joins the name's line in
//! `<table>_waiters` (idempotent by its attempt id), marking the name's row
//! `queued` in the same transaction (a free row if there is none), and from
//! then on claims with [`Statements::claim_fair`]: it takes a free or
//! expired name only as the oldest live waiter, and the claim that gives it
//! the name deletes its row (Postgres: a CTE of the same statement; MySQL: a
//! statement of the same transaction; SQLite: a trigger). A release of a
//! marked row leaves the row (free, expired, no owner) instead of deleting
//! it, and the sweeper spares it while a live waiter is in line: so a name
//! with no row, or an unmarked one, has nobody waiting, and an uncontended
//! claim takes it without reading the line (MySQL's batch does not even
//! name the waiter table then). A take clears the mark when nobody else
//! waits; a fair claim that finds the name held marks it again (Postgres,
//! MySQL), so a mark that a statement with an older snapshot lost costs at
//! most one overtaking. A fair `try_lock` claims the same way without a
//! row, so it takes a free name only when nobody waits.
//!
//! [`Statements::claim_fair`]: crate::sql::Statements
//!
//! # Attempts
//!
//! The row's `attempts` column holds the attempt id of every share of the
//! hold (space-separated; `hold_count` is their number). A claim whose
//! attempt is already there is a repeat — lockkit's retry after a lost
//! connection, whose first try committed unseen — and changes nothing; a
//! release takes out exactly its attempt's share, and a repeated release
//! finds it gone and changes nothing. So every statement that changes a
//! hold can be sent again after a lost connection, and is.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, ReleaseOutcome, TryAcquire,
};
use lockkit_core::backoff::Backoff;
use lockkit_core::name::check_attempt_id;
use lockkit_core::url::ConnectUrl;
use lockkit_core::{LockError, detach, lease, ttl_millis};
use tokio_util::sync::CancellationToken;

use crate::config::{Dialect, SqlConfig};
use crate::conn::sent;
use crate::conn::{Arg, Col, Db, Val};
use crate::error::{Class, backend_error, classify, schema_error};
#[cfg(feature = "mysql")]
use crate::sql::mysql_inline;
use crate::sql::{ClaimShape, Statements};
use crate::wait::listener::{InLine, Waiters};
use crate::wait::queue::{Place, Places};

/// Connects to the database a `mysql://`, `mariadb://`, `postgres://` or
/// `sqlite://` URL names, taking this backend's query parameters from it
/// (see [`SqlConfig`]); creates or checks the lock table and starts the
/// sweeper. A query parameter left over is refused with
/// [`ConnectUrl::finish`] before any connection is tried.
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = SqlConfig::from_url(url)?;
    url.finish()?;
    Ok(Arc::new(SqlBackend::connect(config).await?))
}

/// A lock table in MySQL/MariaDB, Postgres or SQLite.
///
/// Cheap to clone (clones share the pool). The sweeper and the Postgres
/// listener stop when the last clone is dropped.
#[derive(Clone)]
pub struct SqlBackend {
    inner: Arc<Inner>,
}

struct Inner {
    kind: &'static str,
    config: SqlConfig,
    db: Db,
    /// The fair line's statements (see [`Db::open_line`]).
    line_db: Db,
    sql: Statements,
    waiters: Arc<Waiters>,
    /// The places this backend's fair waiters hold in line (renewed by the
    /// task in `queue.rs`).
    places: Arc<Places>,
    /// Postgres: this backend's places on the wait lists of names.
    #[cfg(feature = "postgres")]
    wait_list: std::sync::OnceLock<crate::wait::waitlist::WaitList>,
    stop: CancellationToken,
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

/// What a claim found.
enum Claim {
    /// Another owner holds the name for this long (if known); `head`: the
    /// attempt is first in line (or, unfair, any attempt), so it is the one
    /// to try again when the name comes free.
    Busy { retry_in: Option<Duration>, head: bool },
    /// We hold it `count` times under `token`, for `remaining`.
    Held {
        count: u32,
        token: u64,
        remaining: Duration,
    },
}

/// How many times a statement that certainly did not take effect (deadlock,
/// lock wait timeout, busy database) is tried before the error is returned
/// (as retryable), and for how long at most: a SQLite writer already waits
/// out its busy timeout inside each try.
const TRANSIENT_TRIES: u32 = 30;
const TRANSIENT_BUDGET: Duration = Duration::from_secs(2);

/// Holds per `extend_many` statement.
const EXTEND_CHUNK: usize = 256;

/// How often a release looks again when the hold changed under it.
const RELEASE_ROUNDS: u32 = 5;

/// The longest a fair waiter that is not first in line sleeps without being
/// woken (its place's renewal wakes it every third of the queue lease).
const IDLE: Duration = Duration::from_secs(3600);

/// Without a push from the server (MySQL, SQLite), how often the first
/// waiter of each process looks whether the line moved in another process
/// (at most `max_backoff`): it becomes the head when the waiter before it
/// takes the name, and nobody tells it. One read per process and waited
/// name every 10 ms; a hand-off across processes then costs ~5 ms more
/// than a poll of the head (measured on `lockkit demo`, SQLite, 4
/// processes: looking every 250 ms made 9–12 hand-offs/s).
const LOOK: Duration = Duration::from_millis(10);

/// A fair acquisition's place in line: its row in `<table>_waiters`, its
/// place in this process's line and in the renewal set. Dropped without
/// [`served`](Self::served) or [`leave`](Self::leave) — the `lock` future
/// was cancelled — it deletes the row in the background.
struct Queued {
    inner: Arc<Inner>,
    attempt: String,
    line: InLine,
    place: Arc<Place>,
    /// Served (the claim took the row out) or left: nothing to delete.
    done: bool,
}

impl Queued {
    /// The claim that gave the name took the row out.
    fn served(mut self) {
        self.done = true;
        self.line.served();
    }

    /// Gave up (wait bound, error): the row goes now, then the next in this
    /// process's line is woken (as the place is dropped) if this was first.
    async fn leave(mut self) {
        self.done = true;
        if let Err(e) = self.inner.leave(&self.attempt).await {
            tracing::debug!(backend = self.inner.kind, error = %e,
                "leaving the line failed; the place ends with its lease");
        }
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.inner.places.remove(&self.attempt);
        if self.done {
            return;
        }
        // Cancelled: leave in the background, if a runtime still runs.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (inner, attempt) = (self.inner.clone(), std::mem::take(&mut self.attempt));
            handle.spawn(async move {
                if let Err(e) = inner.leave(&attempt).await {
                    tracing::debug!(backend = inner.kind, error = %e,
                        "leaving the line of a cancelled lock failed; the place ends with its lease");
                }
            });
        }
    }
}

fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn from_us(v: i64) -> Duration {
    Duration::from_micros(v.max(0) as u64)
}

fn text(v: Val) -> String {
    String::from_utf8(v.into_bytes()).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

/// FNV-1a: a stable hash of a name, for its token counter bucket.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn bucket(name: &str, buckets: u64) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % buckets.max(1)) as i64
}

/// The smallest byte string above every name that starts with `prefix`
/// (UTF-8 never contains 0xFF).
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF]
}

impl SqlBackend {
    /// Opens the pool, creates or checks the tables ([`migrate`](Self::migrate)),
    /// and starts the sweeper (and on Postgres the release listener).
    pub async fn connect(config: SqlConfig) -> Result<Self, LockError> {
        let kind = config.dialect.kind();
        if config.dialect == Dialect::Sqlite {
            check_sqlite_dir(&config.database)?;
        }
        let opened = Db::open(&config).and_then(|db| {
            let line_db = db.open_line(&config)?;
            Ok((db, line_db))
        });
        let (db, line_db) = opened.map_err(|e| match e {
            sqlx::Error::Configuration(e) => LockError::config("url", e.to_string()),
            e => backend_error(kind, "connect", None, e),
        })?;
        // Backends of this process on one database and table share their
        // waiters, so a release wakes the next in line whichever backend
        // it waits on.
        let shared_key =
            (config.database != ":memory:").then(|| format!("{}\0{}\0{}", kind, config.database, config.table));
        let backend = SqlBackend {
            inner: Arc::new(Inner {
                kind,
                sql: Statements::new(config.dialect, &config.table),
                db,
                line_db,
                waiters: Waiters::shared(shared_key),
                places: Arc::default(),
                #[cfg(feature = "postgres")]
                wait_list: std::sync::OnceLock::new(),
                stop: CancellationToken::new(),
                config,
            }),
        };
        // A direct connection first: the pool would report a refused
        // connection or a bad password only as a timeout, this says why.
        Db::probe(&backend.inner.config)
            .await
            .map_err(|e| backend_error(kind, "connect", None, e))?;
        backend.migrate().await?;
        let inner = &backend.inner;
        if let Some(interval) = inner.config.sweep_interval {
            crate::sweeper::spawn(
                inner.db.clone(),
                vec![inner.sql.sweep.clone(), inner.sql.sweep_waiters.clone()],
                interval,
                inner.config.sweep_batch,
                inner.stop.clone(),
            );
        }
        crate::wait::queue::spawn_renewer(
            inner.line_db.clone(),
            inner.sql.clone(),
            inner.places.clone(),
            inner.config.queue_lease,
            inner.stop.clone(),
        );
        #[cfg(feature = "postgres")]
        if inner.config.dialect == Dialect::Postgres {
            use std::str::FromStr;
            let options = sqlx::postgres::PgConnectOptions::from_str(&inner.config.database)
                .map_err(|e| backend_error(kind, "connect", None, e))?
                .application_name("lockkit-listener");
            inner
                .waiters
                .listen_pg(options.clone(), inner.config.connect_timeout, inner.sql.channel());
            if let (Some(join), Some(leave)) = (&inner.sql.wait_join, &inner.sql.wait_leave) {
                let list = crate::wait::waitlist::WaitList::spawn(
                    options.application_name("lockkit-waitlist"),
                    inner.config.connect_timeout,
                    join.clone(),
                    leave.clone(),
                    inner.stop.clone(),
                );
                let _ = inner.wait_list.set(list);
            }
        }
        Ok(backend)
    }

    /// The settings this backend runs with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    /// Creates the lock table and its token counter if they are missing
    /// (unless `create_table=false`), then checks that the lock table has
    /// every column lockkit uses and that names compare as exact bytes.
    /// Never alters or drops an existing table. Run by
    /// [`connect`](Self::connect); safe to run again, also concurrently.
    pub async fn migrate(&self) -> Result<(), LockError> {
        let inner = &self.inner;
        let table = &inner.config.table;
        if inner.config.create_table {
            for (object, stmt) in &inner.sql.create {
                // Only what is missing: a least-privilege user (no CREATE)
                // can use tables an administrator created.
                // Retried while busy: processes opening a new SQLite file at
                // once can meet on its switch to WAL (SQLITE_BUSY at once,
                // without waiting for the busy timeout).
                let args = [Arg::Text(Some(object))];
                let found = inner
                    .retry("connect", None, || {
                        inner.db.fetch(&inner.sql.exists, &args, &[Col::Int])
                    })
                    .await?;
                if found.first().and_then(|r| r.first()).is_some_and(|v| v.int() > 0) {
                    continue;
                }
                // Concurrent CREATE ... IF NOT EXISTS can still collide on
                // Postgres (duplicate catalog rows): a second try sees the table.
                let mut tries = 0;
                loop {
                    match inner.db.exec(stmt, &[]).await {
                        Ok(_) => break,
                        Err(e) if tries < 5 && (is_duplicate(&e) || classify(&e) == Class::Transient) => {
                            tries += 1;
                            tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                        }
                        Err(e) if is_permission_denied(&e) => {
                            let source = MissingObject {
                                object: object.clone(),
                                cause: e,
                            };
                            return Err(LockError::backend(inner.kind, "create table", None, false, source));
                        }
                        Err(e) => return Err(backend_error(inner.kind, "create table", None, e)),
                    }
                }
            }
        }
        let args = [Arg::Text(Some(table))];
        let rows = inner
            .retry("connect", None, || {
                inner.db.fetch(&inner.sql.columns, &args, &[Col::Text, Col::Text])
            })
            .await?;
        if rows.is_empty() {
            let why = if inner.config.create_table {
                "was not found after CREATE TABLE IF NOT EXISTS (is it visible to this user and schema?)"
            } else {
                "does not exist (and create_table=false)"
            };
            return Err(schema_error(table, why.to_owned()));
        }
        let columns: Vec<(String, String)> = rows
            .into_iter()
            .map(|mut r| {
                let ty = text(r.pop().unwrap_or(Val::Int(0)));
                (
                    text(r.pop().unwrap_or(Val::Int(0))).to_ascii_lowercase(),
                    ty.to_ascii_lowercase(),
                )
            })
            .collect();
        let missing: Vec<&str> = [
            "name",
            "owner",
            "hold_count",
            "token",
            "expires_at",
            "acquired_at",
            "memo",
        ]
        .into_iter()
        .filter(|c| !columns.iter().any(|(name, _)| name == c))
        .collect();
        if !missing.is_empty() {
            return Err(schema_error(
                table,
                format!(
                    "exists but is not a lockkit lock table: missing columns {}",
                    missing.join(", ")
                ),
            ));
        }
        for (column, ddl) in &inner.sql.added_columns {
            if !columns.iter().any(|(name, _)| name == column) {
                self.add_column(column, ddl).await?;
            }
        }
        self.check_waiters_table().await?;
        if !inner.sql.name_types.is_empty()
            && let Some((_, ty)) = columns.iter().find(|(name, _)| name == "name")
            && !inner.sql.name_types.contains(&ty.as_str())
        {
            return Err(schema_error(
                table,
                format!(
                    "has a `name` column of type {ty}; lockkit needs {} so names compare as exact bytes",
                    inner.sql.name_types.join(" or ")
                ),
            ));
        }
        for stmt in &inner.sql.prepare {
            inner.retry("create table", None, || inner.db.exec(stmt, &[])).await?;
        }
        Ok(())
    }

    /// Adds a column that a lock table made by an older lockkit lacks
    /// (`attempts`, `queued`: the only change `migrate` makes to an
    /// existing table; its rows keep their holds, which end with their
    /// lease). A client that finds it added meanwhile by another is content.
    async fn add_column(&self, column: &str, ddl: &Arc<str>) -> Result<(), LockError> {
        let inner = &self.inner;
        let table = &inner.config.table;
        let refused = |why: String| {
            schema_error(
                table,
                format!("has no `{column}` column (made by an older lockkit) and {why}; add it with: {ddl}"),
            )
        };
        if !inner.config.create_table {
            return Err(refused("create_table=false".to_owned()));
        }
        match inner.db.exec(ddl, &[]).await {
            Ok(_) => Ok(()),
            Err(e) => {
                let args = [Arg::Text(Some(table))];
                let columns = inner
                    .retry("connect", None, || {
                        inner.db.fetch(&inner.sql.columns, &args, &[Col::Text, Col::Text])
                    })
                    .await?;
                if columns
                    .into_iter()
                    .any(|mut r| text(r.swap_remove(0)).eq_ignore_ascii_case(column))
                {
                    return Ok(());
                }
                Err(refused(format!("adding it failed: {e}")))
            }
        }
    }

    /// A fair `lock` (contract point 12): one attempt; if the name is busy,
    /// a place at the back of the name's line (`<table>_waiters`), then
    /// attempts that take the name only when this one heads the line. Only
    /// the head tries again on its backoff (bounded by the holder's lease);
    /// the others sleep until a release wakes the first waiter of this
    /// process (a local release, or on Postgres any release, through the
    /// listener), the waiter ahead of them in this process leaves, or their
    /// place is renewed (every third of the queue lease: the line may have
    /// moved in another process, or a waiter ahead died). A waiter ahead
    /// that is served (took the name, which is held then) only makes the
    /// next one the first of this process, without a try. On MySQL and
    /// SQLite, which cannot push a release to another process, the first
    /// waiter of each process also looks every [`LOOK`].
    async fn acquire_fair(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let inner = &self.inner;
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let door = inner.waiters.door(req.name.as_bytes());
        let passing = match deadline {
            Some(d) => match tokio::time::timeout_at(d, door.pass()).await {
                Ok(passing) => passing,
                Err(_) => return Ok(None),
            },
            None => door.pass().await,
        };
        // With waiters of this process in the name's line, a first attempt
        // outside the line cannot take it (they are ahead; a re-entry is
        // taken by the attempt in line as well): straight into the line.
        if !inner.waiters.has_line(req.name.as_bytes()) {
            match self.detached_attempt(req, false).await {
                Ok((TryAcquire::Acquired(lease), _)) => return Ok(Some(lease)),
                // Busy, or a retryable failure: tried again in line.
                Ok(_) => {}
                Err(e) if e.is_retryable() => {}
                Err(e) => return Err(e),
            }
        }
        // Postgres: releases notify only names somebody has listed (see
        // `waitlist.rs`); list it before the first attempt in line.
        #[cfg(feature = "postgres")]
        let _listed = match inner.wait_list.get() {
            Some(list) => {
                let (joined, confirmed) = list.join(req.name.as_bytes());
                match deadline {
                    Some(d) => {
                        let _ = tokio::time::timeout_at(d, confirmed).await;
                    }
                    None => {
                        let _ = confirmed.await;
                    }
                }
                Some(joined)
            }
            None => None,
        };
        // Whether releases in other processes wake this process's waiters.
        #[cfg(feature = "postgres")]
        let push = _listed.is_some();
        #[cfg(not(feature = "postgres"))]
        let push = false;
        let mut queued = self.join_line(req).await?;
        drop(passing);
        let mut backoff = Backoff::new(Duration::from_millis(2), inner.config.max_backoff);
        let mut last_error: Option<LockError> = None;
        // Woken only because the waiter before it in this process took the
        // name: the name is held, so wait on as the first without a try.
        // Likewise when it joined behind waiters of this process: the name
        // is theirs first, and the first of them wakes it on leaving.
        let mut moved_up = !queued.line.is_first();
        loop {
            if queued.place.rejoin.swap(false, std::sync::atomic::Ordering::Relaxed) {
                // The row went (its lease ran out while this task stalled):
                // join again, at the back.
                match inner.join(req.name, req.owner, req.attempt).await {
                    Ok(id) => queued.line.move_to(id),
                    Err(e) => tracing::debug!(error = %e, "lockkit could not rejoin the line; retrying"),
                }
            }
            // Listen before trying, so a wake-up during the attempt is kept.
            let notify = queued.line.notify_arc();
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (retry_in, head) = if std::mem::take(&mut moved_up) {
                (None, false)
            } else {
                match self.detached_attempt(req, true).await {
                    Ok((TryAcquire::Acquired(lease), _)) => {
                        queued.served();
                        return Ok(Some(lease));
                    }
                    Ok((TryAcquire::Busy { retry_in }, head)) => {
                        last_error = None;
                        (retry_in, head)
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "lock attempt failed; retrying");
                        last_error = Some(e);
                        (None, true)
                    }
                    Err(e) => {
                        queued.leave().await;
                        return Err(e);
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                queued.leave().await;
                return match last_error {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            let delay = if head {
                lockkit_core::backoff::bounded_delay(&mut backoff, retry_in, deadline, now)
            } else {
                backoff.reset();
                // Without a push from the server (MySQL, SQLite), the head
                // of the line changing in another process is learnt by
                // looking: the first waiter of this process looks every
                // `max_backoff`, the others wait for their turn here.
                let idle = if !push && queued.line.is_first() {
                    LOOK.min(inner.config.max_backoff)
                } else {
                    IDLE
                };
                deadline.map_or(idle, |d| d.saturating_duration_since(now).min(idle))
            };
            tokio::select! {
                _ = notified => moved_up = queued.line.take_moved_up(),
                _ = tokio::time::sleep(delay) => {
                    queued.line.take_moved_up();
                }
            }
        }
    }

    /// Joins the name's line: a row in `<table>_waiters` (idempotent by the
    /// attempt id) and the matching place in this process's line. Run
    /// detached: a caller cancelled mid-way leaves no row behind.
    async fn join_line(&self, req: &AcquireRequest<'_>) -> Result<Queued, LockError> {
        let inner = self.inner.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let work = {
            let (inner, name, attempt) = (inner.clone(), name.clone(), attempt.clone());
            async move { inner.join(&name, &owner, &attempt).await }
        };
        let orphan = {
            let (inner, attempt) = (inner.clone(), attempt.clone());
            move |_| async move {
                let _ = inner.leave(&attempt).await;
            }
        };
        let id = detach(inner.kind, work, orphan).await??;
        let line = inner.waiters.line_up(name.as_bytes(), id);
        let place = Arc::new(Place {
            rejoin: Default::default(),
            notify: line.notify_arc(),
        });
        inner.places.insert(&attempt, place.clone());
        Ok(Queued {
            inner,
            attempt,
            line,
            place,
            done: false,
        })
    }

    /// Checks that the waiter table (`<table>_waiters`, the fair line) is
    /// there: `migrate` created it with the other tables unless
    /// `create_table=false`, or a user without CREATE rights connects to
    /// tables an older lockkit made; the error then names the statement to
    /// run.
    async fn check_waiters_table(&self) -> Result<(), LockError> {
        let inner = &self.inner;
        let waiters = inner.sql.waiters_table();
        let args = [Arg::Text(Some(&waiters))];
        let found = inner
            .retry("connect", None, || {
                inner.db.fetch(&inner.sql.exists, &args, &[Col::Int])
            })
            .await?;
        if found.first().and_then(|r| r.first()).is_some_and(|v| v.int() > 0) {
            return Ok(());
        }
        let why = if inner.config.create_table {
            "was not found after CREATE TABLE IF NOT EXISTS (is it visible to this user and schema?)"
        } else {
            "does not exist (made by an older lockkit, and create_table=false)"
        };
        let create = inner.sql.create_waiters().map_or("", |c| c);
        Err(schema_error(
            &inner.config.table,
            format!("has no waiter table {waiters:?} (fair queues need it): it {why}; create it with: {create}"),
        ))
    }

    /// One attempt, on its own task so a cancelled caller leaves no hold.
    /// `queued`: the attempt has a row in the fair line (taken out by the
    /// claim that gives it the name). Says whether the attempt is the one
    /// to try again when the name comes free (see [`Claim::Busy`]).
    fn detached_attempt(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> impl Future<Output = Result<(TryAcquire, bool), LockError>> + use<> {
        let inner = self.inner.clone();
        let (name, owner, ttl, fair) = (req.name.to_owned(), req.owner.to_owned(), req.ttl, req.fair);
        let attempt = req.attempt.to_owned();
        async move {
            let kind = inner.kind;
            check_attempt_id(&attempt)?;
            let work_inner = inner.clone();
            let (work_name, work_owner, work_attempt) = (name.clone(), owner.clone(), attempt.clone());
            let work = async move {
                work_inner
                    .attempt(&work_name, &work_owner, ttl, &work_attempt, fair, queued)
                    .await
            };
            let orphan = move |result: Result<(TryAcquire, bool), LockError>| async move {
                if let Ok((TryAcquire::Acquired(lease), _)) = result {
                    let hold = Hold {
                        name,
                        owner,
                        token: lease.token,
                    };
                    // Only this attempt's share: a re-entry's orphan leaves
                    // the holds it re-entered as they were.
                    if let Err(e) = inner.release(&hold, &attempt).await {
                        tracing::warn!(backend = inner.kind, lock = %hold.name, error = %e,
                            "releasing the hold of a cancelled acquisition failed; it ends with its lease");
                    }
                }
            };
            detach(kind, work, orphan).await?
        }
    }
}

/// A table (or sequence) lockkit needs is missing and this database user may
/// not create it.
#[derive(Debug)]
struct MissingObject {
    object: String,
    cause: sqlx::Error,
}

impl fmt::Display for MissingObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} does not exist (or this user has no rights on it) and this database user may not create it \
             (connect once as a user with CREATE rights, e.g. the table's owner, or grant CREATE)",
            self.object
        )
    }
}

impl std::error::Error for MissingObject {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            sqlx::Error::Database(db) => Some(db.as_ref()),
            other => Some(other),
        }
    }
}

/// The database refused a statement for lack of a privilege: MySQL's
/// table/database/specific access denied (1142, 1044, 1227), Postgres's
/// `insufficient_privilege` (42501).
fn is_permission_denied(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(my.number(), 1142 | 1044 | 1227);
    }
    db.code().as_deref() == Some("42501")
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

fn is_duplicate(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("23505" | "42P07" | "42710")),
        _ => false,
    }
}

impl Inner {
    /// Runs `op`, retrying it while it fails in a way that certainly did not
    /// take effect (deadlock, lock wait timeout, busy database).
    async fn retry<T, F, Fut>(&self, operation: &'static str, name: Option<&str>, op: F) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        Ok(self.retry_if(operation, name, false, op).await?.0)
    }

    /// [`retry`](Self::retry); with `idempotent`, also after a failure that
    /// may have taken effect (a connection lost mid-statement, e.g. a pooled
    /// connection the server closed when it restarted) — for statements that
    /// do nothing the second time. Says whether such a failure happened.
    async fn retry_if<T, F, Fut>(
        &self,
        operation: &'static str,
        name: Option<&str>,
        idempotent: bool,
        mut op: F,
    ) -> Result<(T, bool), LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        let mut backoff = Backoff::new(Duration::from_millis(1), Duration::from_millis(50));
        let started = Instant::now();
        let mut tries = 0;
        let mut unsure = false;
        loop {
            let e = match op().await {
                Ok(v) => return Ok((v, unsure)),
                Err(e) => e,
            };
            let class = classify(&e);
            let again = class == Class::Transient || idempotent && class == Class::Retryable;
            if !again || tries + 1 >= TRANSIENT_TRIES || started.elapsed() >= TRANSIENT_BUDGET {
                return Err(backend_error(self.kind, operation, name, e));
            }
            tries += 1;
            unsure |= class == Class::Retryable;
            tracing::debug!(backend = self.kind, operation, error = %e, "transient failure; retrying");
            tokio::time::sleep(backoff.next_delay()).await;
        }
    }

    /// Runs `op` like [`retry_if`](Self::retry_if) with `idempotent`: for
    /// statements that record or check the attempt id, so that a second
    /// run after a lost connection changes nothing the first did.
    async fn retry_idempotent<T, F, Fut>(
        &self,
        operation: &'static str,
        name: Option<&str>,
        op: F,
    ) -> Result<T, LockError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, sqlx::Error>>,
    {
        Ok(self.retry_if(operation, name, true, op).await?.0)
    }

    /// One claim (see [`Statements::claim`] and [`Statements::claim_fair`]).
    async fn claim(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        attempt: &str,
        fair: bool,
        queued: bool,
    ) -> Result<Claim, LockError> {
        let sql = &self.sql;
        let memo = self.config.memo.as_deref();
        let args = [
            Arg::Bytes(name.as_bytes()),
            Arg::Bytes(owner.as_bytes()),
            Arg::Int(us(ttl)),
            Arg::Text(memo),
            Arg::Text(Some(attempt)),
        ];
        let op = "acquire";
        let n = Some(name);
        let statement = match &sql.claim_fair_contended {
            Some(contended) if fair && (queued || self.waiters.has_line(name.as_bytes())) => contended,
            _ if fair => &sql.claim_fair,
            _ => &sql.claim,
        };
        Ok(match sql.claim_shape {
            #[cfg(feature = "mysql")]
            ClaimShape::Batch => {
                let buckets = sql.buckets;
                let cols: &[Col] = &[Col::Int, Col::Int, Col::Int];
                // The fair batch reads the line only for an attempt in it,
                // or when the name is free but marked (see
                // `mysql_claim_batch_fair`).
                let run = |line: bool| {
                    self.retry_idempotent(op, n, move || {
                        let (name, owner, bucket) = (name.as_bytes(), owner.as_bytes(), bucket(name, buckets));
                        let batch = if fair {
                            sql.mysql_claim_batch_fair(name, owner, us(ttl), memo, attempt, bucket, line, queued)
                        } else {
                            sql.mysql_claim_batch(name, owner, us(ttl), memo, attempt, bucket)
                        };
                        self.db.mysql_batch(batch, cols)
                    })
                };
                let (mut done, mut rows) = run(queued).await?;
                // The claim is the statement after BEGIN.
                if fair && !queued && rows.is_empty() && done.get(1).is_some_and(|c| c.rows > 0 && c.last_id == 1) {
                    (done, rows) = run(true).await?;
                }
                match (rows.first().map(Vec::as_slice), done.get(1)) {
                    // Ours: fresh, taken over or re-entered, stamped in the batch.
                    (Some([c, t, r]), _) => Claim::Held {
                        count: count(c.int()),
                        token: t.int() as u64,
                        remaining: from_us(r.int()),
                    },
                    // The fair claim left the name to another (maybe marking
                    // its row): twice the remaining lease, plus whether the
                    // attempt heads the line.
                    (_, Some(claim)) if fair && claim.rows > 0 && claim.last_id > 0 => Claim::Busy {
                        retry_in: Some(Duration::from_micros(claim.last_id / 2)),
                        head: claim.last_id % 2 == 1,
                    },
                    // The claim left the holder's row unchanged: its remaining lease.
                    (_, Some(claim)) if claim.rows == 1 && claim.last_id > 0 => Claim::Busy {
                        retry_in: Some(Duration::from_micros(claim.last_id)),
                        head: true,
                    },
                    _ => Claim::Busy {
                        retry_in: None,
                        head: !fair,
                    },
                }
            }
            #[cfg(not(feature = "mysql"))]
            ClaimShape::Batch => {
                let _ = (queued, statement);
                Claim::Busy {
                    retry_in: None,
                    head: true,
                }
            }
            ClaimShape::Rows => {
                // The fair claim adds a fifth column: whether the attempt
                // heads the line.
                let cols = [Col::Int, Col::Int, Col::Int, Col::Int, Col::Int];
                let cols = if fair { &cols[..] } else { &cols[..4] };
                let row = self
                    .retry_idempotent(op, n, || self.db.fetch_one(statement, &args, cols))
                    .await?;
                match row.as_deref() {
                    Some([acquired, c, t, r, ..]) if acquired.int() == 1 => Claim::Held {
                        count: count(c.int()),
                        token: t.int() as u64,
                        remaining: from_us(r.int()),
                    },
                    Some([_, _, _, r, rest @ ..]) => Claim::Busy {
                        retry_in: Some(from_us(r.int())),
                        head: rest.first().is_none_or(|h| h.int() != 0),
                    },
                    // Free, but another waiter is first in line (fair), or
                    // the holder's row went meanwhile.
                    _ => Claim::Busy {
                        retry_in: None,
                        head: !fair,
                    },
                }
            }
            ClaimShape::RowsOrHolder => {
                let cols = [Col::Int, Col::Int, Col::Int];
                let row = self
                    .retry_idempotent(op, n, || self.db.fetch_one(statement, &args, &cols))
                    .await?;
                match row.as_deref() {
                    Some([c, t, r]) => Claim::Held {
                        count: count(c.int()),
                        token: t.int() as u64,
                        remaining: from_us(r.int()),
                    },
                    _ if fair => {
                        let args = [Arg::Bytes(name.as_bytes()), Arg::Text(Some(attempt))];
                        let row = self
                            .retry(op, n, || {
                                self.db.fetch_one(&sql.holder_fair, &args, &[Col::Int, Col::Int])
                            })
                            .await?;
                        match row.as_deref() {
                            Some([r, head]) => Claim::Busy {
                                retry_in: (r.int() >= 0).then(|| from_us(r.int())),
                                head: head.int() != 0,
                            },
                            _ => Claim::Busy {
                                retry_in: None,
                                head: false,
                            },
                        }
                    }
                    _ => {
                        let args = [Arg::Bytes(name.as_bytes())];
                        let row = self
                            .retry(op, n, || self.db.fetch_one(&sql.holder, &args, &[Col::Int]))
                            .await?;
                        Claim::Busy {
                            retry_in: row.map(|r| from_us(r[0].int())),
                            head: true,
                        }
                    }
                }
            }
        })
    }

    /// One acquisition attempt: one claim. Also says whether the attempt is
    /// the one to try again when the name comes free (see [`Claim::Busy`]).
    async fn attempt(
        &self,
        name: &str,
        owner: &str,
        ttl: Duration,
        attempt: &str,
        fair: bool,
        queued: bool,
    ) -> Result<(TryAcquire, bool), LockError> {
        let ttl = Duration::from_millis(ttl_millis(ttl));
        let called = Instant::now();
        let (claimed, sent) = sent::timed(self.claim(name, owner, ttl, attempt, fair, queued)).await;
        let sent_at = sent.unwrap_or(called);
        Ok(match claimed? {
            Claim::Held {
                count,
                token,
                remaining,
            } if token > 0 => (
                TryAcquire::Acquired(Lease {
                    token,
                    hold_count: count,
                    valid_until: Some(lease::valid_until(sent_at, remaining)),
                    lost: None,
                    session_deadline: None,
                }),
                true,
            ),
            // Every claim stamps its hold in the same transaction; a row
            // without a token is not a hold this version of lockkit made.
            Claim::Held { .. } => (TryAcquire::Busy { retry_in: None }, true),
            Claim::Busy { retry_in, head } => (TryAcquire::Busy { retry_in }, head),
        })
    }

    /// Puts `attempt` in the line for `name` (or renews its place): its
    /// row's id, the place in line.
    async fn join(&self, name: &str, owner: &str, attempt: &str) -> Result<i64, LockError> {
        let lease = us(self.config.queue_lease);
        let args = [
            Arg::Bytes(name.as_bytes()),
            Arg::Bytes(owner.as_bytes()),
            Arg::Text(Some(attempt)),
            Arg::Int(lease),
        ];
        let n = Some(name);
        #[cfg(feature = "mysql")]
        if self.config.dialect == Dialect::Mysql {
            let (done, _) = self
                .retry_idempotent("acquire", n, || {
                    let batch = self
                        .sql
                        .mysql_join_batch(name.as_bytes(), owner.as_bytes(), attempt, lease);
                    self.db.mysql_batch(batch, &[])
                })
                .await?;
            // BEGIN, the waiter row, COMMIT, the mark.
            let id = done.get(1).map_or(u64::MAX, |d| d.last_id);
            return Ok(i64::try_from(id).unwrap_or(i64::MAX));
        }
        let row = self
            .retry_idempotent("acquire", n, || {
                self.line_db.fetch_one(&self.sql.join, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(i64::MAX, |r| r[0].int()))
    }

    /// Takes `attempt` out of its line (idempotent).
    async fn leave(&self, attempt: &str) -> Result<(), LockError> {
        let args = [Arg::Text(Some(attempt))];
        self.retry_idempotent("acquire", None, || self.line_db.exec(&self.sql.leave, &args))
            .await
            .map(drop)
    }

    /// The arguments of a delete statement (see [`delete`](Self::delete)):
    /// the hold's, then the attempt if given; use the first `len`.
    fn delete_args<'a>(hold: &'a Hold, attempt: Option<&'a str>) -> ([Arg<'a>; 4], usize) {
        let [a, b, c] = Self::hold_args(hold);
        ([a, b, c, Arg::Text(attempt)], if attempt.is_some() { 4 } else { 3 })
    }

    fn hold_args<'a>(hold: &'a Hold) -> [Arg<'a>; 3] {
        [
            Arg::Bytes(hold.name.as_bytes()),
            Arg::Bytes(hold.owner.as_bytes()),
            Arg::Int(hold.token as i64),
        ]
    }

    /// Deletes a hold (`sql` takes the hold's name, owner and token, and
    /// `attempt` after them if given) — or, when it deleted nothing and
    /// `queued` is given, frees a hold's row that the line waits on (see
    /// [`Statements::release_last`]); tried again after a lost connection,
    /// as both are idempotent. Returns whether the hold went, and whether
    /// an earlier try may have removed it unseen.
    async fn delete(
        &self,
        operation: &'static str,
        (sql, queued): (&Arc<str>, Option<&Arc<str>>),
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        #[cfg(feature = "mysql")]
        if let Some(queued) = queued
            && self.config.dialect == Dialect::Mysql
            && self.waiters.has_line(hold.name.as_bytes())
        {
            return self.delete_batched(operation, (sql, queued), hold, attempt).await;
        }
        let (gone, unsure) = self.delete_once(operation, sql, hold, attempt).await?;
        match queued {
            Some(queued) if !gone => {
                let (freed, lost) = self.delete_once(operation, queued, hold, attempt).await?;
                Ok((freed, unsure || lost))
            }
            _ => Ok((gone, unsure)),
        }
    }

    /// MySQL, when this process has waiters in the name's line (so the row
    /// is most likely marked): both statements of [`delete`](Self::delete)
    /// in one round trip, each its own autocommit — the update finds no row
    /// after a delete that took it.
    #[cfg(feature = "mysql")]
    async fn delete_batched(
        &self,
        operation: &'static str,
        (sql, queued): (&Arc<str>, &Arc<str>),
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        let (all, len) = Self::delete_args(hold, attempt);
        let args = &all[..len];
        let batch = format!("{}; {}", mysql_inline(sql, args), mysql_inline(queued, args));
        let n = Some(hold.name.as_str());
        let ((done, _), unsure) = self
            .retry_if(operation, n, true, || self.db.mysql_batch(batch.clone(), &[]))
            .await?;
        let gone = done.iter().any(|d| d.rows > 0);
        if gone {
            self.waiters.released(hold.name.as_bytes(), hold.token as i64);
        }
        Ok((gone, unsure))
    }

    /// One statement of [`delete`](Self::delete).
    async fn delete_once(
        &self,
        operation: &'static str,
        sql: &Arc<str>,
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        let (all, len) = Self::delete_args(hold, attempt);
        let args = &all[..len];
        let n = Some(hold.name.as_str());
        let (deleted, unsure) = if self.sql.deletes_return_rows {
            let (rows, unsure) = self
                .retry_if(operation, n, true, || self.db.fetch(sql, args, &[Col::Int]))
                .await?;
            (rows.len() as u64, unsure)
        } else {
            let (done, unsure) = self.retry_if(operation, n, true, || self.db.exec(sql, args)).await?;
            (done.rows, unsure)
        };
        if deleted > 0 {
            self.waiters.released(hold.name.as_bytes(), hold.token as i64);
        }
        Ok((deleted > 0, unsure))
    }

    /// Takes `attempt`'s share out of `hold`: deletes the row if it was the
    /// last share, else removes the id; if neither applied, the share was
    /// already gone (a repeated release: the holds left are reported again)
    /// or the hold is. Every statement is idempotent by the attempt id, so
    /// each is tried again after a lost connection; a lost try that may
    /// have deleted the row makes a hold found gone afterwards "released".
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let n = Some(hold.name.as_str());
        let [name, owner, token] = Self::hold_args(hold);
        let share_args = [Arg::Text(Some(attempt)), name, owner, token];
        let mut unsure = false;
        // More than one round only when the hold changed between the
        // statements (a twin owner's release of another share).
        for _ in 0..RELEASE_ROUNDS {
            let (deleted, lost) = self
                .delete(
                    "release",
                    (&self.sql.release_last, self.sql.release_last_queued.as_ref()),
                    hold,
                    Some(attempt),
                )
                .await?;
            unsure |= lost;
            if deleted {
                return Ok(ReleaseOutcome::Released { remaining: 0 });
            }
            let (remaining, lost) = if self.sql.updates_return_rows {
                let (row, lost) = self
                    .retry_if("release", n, true, || {
                        self.db.fetch_one(&self.sql.release_one, &share_args, &[Col::Int])
                    })
                    .await?;
                (row.map(|r| count(r[0].int())), lost)
            } else {
                let (done, lost) = self
                    .retry_if("release", n, true, || self.db.exec(&self.sql.release_one, &share_args))
                    .await?;
                ((done.rows == 1).then_some(done.last_id as u32), lost)
            };
            unsure |= lost;
            if let Some(remaining) = remaining {
                return Ok(ReleaseOutcome::Released { remaining });
            }
            let (row, lost) = self
                .retry_if("release", n, true, || {
                    self.db.fetch_one(&self.sql.share, &share_args, &[Col::Int, Col::Int])
                })
                .await?;
            unsure |= lost;
            match row.as_deref() {
                None if unsure => return Ok(ReleaseOutcome::Released { remaining: 0 }),
                None => return Ok(ReleaseOutcome::NotHeld),
                Some([c, has_share]) if has_share.int() == 0 => {
                    return Ok(ReleaseOutcome::Released {
                        remaining: count(c.int()),
                    });
                }
                _ => {}
            }
        }
        Err(LockError::backend(
            self.kind,
            "release",
            n,
            true,
            "the hold kept changing between the release's statements",
        ))
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let ttl = Duration::from_millis(ttl_millis(ttl));
        let [a, b, c] = Self::hold_args(hold);
        let args = [Arg::Int(us(ttl)), a, b, c];
        let n = Some(hold.name.as_str());
        let called = Instant::now();
        let (remaining, sent) = sent::timed(async {
            Ok::<_, LockError>(if self.sql.updates_return_rows {
                self.retry("extend", n, || self.db.fetch_one(&self.sql.extend, &args, &[Col::Int]))
                    .await?
                    .map(|r| from_us(r[0].int()))
            } else {
                let done = self
                    .retry("extend", n, || self.db.exec(&self.sql.extend, &args))
                    .await?;
                (done.rows == 1).then(|| Duration::from_micros(done.last_id))
            })
        })
        .await;
        let (remaining, sent_at) = (remaining?, sent.unwrap_or(called));
        Ok(match remaining {
            Some(r) => ExtendOutcome::Extended {
                valid_until: Some(lease::valid_until(sent_at, r)),
            },
            None => ExtendOutcome::NotHeld,
        })
    }

    /// Extends `holds` (one ttl) in one statement (MySQL: an update and a
    /// read-back); the remaining lease of each hold that is still ours.
    async fn extend_chunk(&self, ttl: Duration, holds: &[&Hold]) -> Result<Vec<Option<Duration>>, LockError> {
        let (update, select) = self.sql.extend_many(holds.len());
        let (update, select): (Arc<str>, Option<Arc<str>>) = (update.into(), select.map(Into::into));
        let mut triples = Vec::with_capacity(holds.len() * 3);
        for h in holds {
            triples.extend(Self::hold_args(h));
        }
        let mut args = vec![Arg::Int(us(ttl))];
        args.extend(triples.iter().copied());
        let cols = [Col::Bytes, Col::Bytes, Col::Int, Col::Int];
        let rows = match &select {
            #[cfg(feature = "postgres")]
            None if self.config.dialect == Dialect::Postgres => {
                let lists = || {
                    (
                        holds.iter().map(|h| h.name.as_bytes()).collect(),
                        holds.iter().map(|h| h.owner.as_bytes()).collect(),
                        holds.iter().map(|h| h.token as i64).collect(),
                    )
                };
                self.retry("extend", None, || {
                    self.db.pg_fetch_lists(&update, us(ttl), lists(), &cols)
                })
                .await?
            }
            None => {
                self.retry("extend", None, || self.db.fetch(&update, &args, &cols))
                    .await?
            }
            Some(select) => {
                self.retry("extend", None, || self.db.exec(&update, &args)).await?;
                self.retry("extend", None, || self.db.fetch(select, &triples, &cols))
                    .await?
            }
        };
        let found: Vec<(Vec<u8>, Vec<u8>, u64, Duration)> = rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let name = r.next().map(Val::into_bytes).unwrap_or_default();
                let owner = r.next().map(Val::into_bytes).unwrap_or_default();
                let token = r.next().map_or(0, |v| v.int() as u64);
                let remaining = from_us(r.next().map_or(0, |v| v.int()));
                (name, owner, token, remaining)
            })
            .collect();
        Ok(holds
            .iter()
            .map(|h| {
                found
                    .iter()
                    .find(|(n, o, t, _)| n == h.name.as_bytes() && o == h.owner.as_bytes() && *t == h.token)
                    .map(|f| f.3)
            })
            .collect())
    }

    fn info(name: String, owner: Val, hold_count: &Val, token: &Val, remaining: &Val) -> LockInfo {
        LockInfo {
            name,
            owner: text(owner),
            hold_count: count(hold_count.int()),
            token: token.int() as u64,
            remaining: Some(from_us(remaining.int())),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let args = [Arg::Bytes(name.as_bytes())];
        let cols = [Col::Bytes, Col::Int, Col::Int, Col::Int];
        let row = self
            .retry("inspect", Some(name), || {
                self.db.fetch_one(&self.sql.inspect, &args, &cols)
            })
            .await?;
        Ok(row.map(|mut r| {
            let owner = std::mem::replace(&mut r[0], Val::Int(0));
            Self::info(name.to_owned(), owner, &r[1], &r[2], &r[3])
        }))
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
        Capabilities::ttl(true, durable)
            .with_extend_batch_max(EXTEND_CHUNK)
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        // Fair, the claim refuses a free name while others wait in line.
        self.detached_attempt(req, false).await.map(|(r, _)| r)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        if req.fair {
            return self.acquire_fair(req, wait).await;
        }
        let subscription = self.inner.waiters.subscribe(req.name.as_bytes());
        let backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_backoff);
        let attempt = || {
            let attempt = self.detached_attempt(req, false);
            async move { attempt.await.map(|(r, _)| r) }
        };
        // Postgres: an uncontended acquisition costs one attempt; a busy one
        // joins the name's wait list before its next attempt, so that the
        // release it waits for notifies (see `waitlist.rs`).
        #[cfg(feature = "postgres")]
        let (wait, _joined) = match self.inner.wait_list.get() {
            Some(list) => {
                let started = tokio::time::Instant::now();
                if let Ok(TryAcquire::Acquired(lease)) = attempt().await {
                    return Ok(Some(lease));
                }
                let (joined, confirmed) = list.join(req.name.as_bytes());
                let left = wait.map(|w| w.saturating_sub(started.elapsed()));
                match left {
                    Some(left) => {
                        let _ = tokio::time::timeout(left, confirmed).await;
                    }
                    None => {
                        let _ = confirmed.await;
                    }
                }
                (wait.map(|w| w.saturating_sub(started.elapsed())), Some(joined))
            }
            None => (wait, None),
        };
        lockkit_core::backoff::acquire_with_backoff(wait, backoff, Some(subscription.notify()), attempt).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        check_attempt_id(attempt)?;
        self.inner.release(hold, attempt).await
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.inner.extend(hold, ttl).await
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let inner = &self.inner;
        let mut out: Vec<Option<Result<ExtendOutcome, LockError>>> = holds.iter().map(|_| None).collect();
        // Group by ttl (a client's holds usually share one), then chunk.
        let mut ttls: Vec<Duration> = holds
            .iter()
            .map(|(_, ttl)| Duration::from_millis(ttl_millis(*ttl)))
            .collect();
        ttls.sort();
        ttls.dedup();
        for ttl in ttls {
            let group: Vec<usize> = (0..holds.len())
                .filter(|&i| Duration::from_millis(ttl_millis(holds[i].1)) == ttl)
                .collect();
            for chunk in group.chunks(EXTEND_CHUNK) {
                let chunk_holds: Vec<&Hold> = chunk.iter().map(|&i| &holds[i].0).collect();
                let called = Instant::now();
                let (extended, sent) = sent::timed(inner.extend_chunk(ttl, &chunk_holds)).await;
                let sent_at = sent.unwrap_or(called);
                match extended {
                    Ok(remaining) => {
                        for (&i, r) in chunk.iter().zip(remaining) {
                            out[i] = Some(Ok(match r {
                                Some(r) => ExtendOutcome::Extended {
                                    valid_until: Some(lease::valid_until(sent_at, r)),
                                },
                                None => ExtendOutcome::NotHeld,
                            }));
                        }
                    }
                    Err(e) => {
                        let retryable = e.is_retryable();
                        let message = e.to_string();
                        for &i in chunk {
                            let name = Some(holds[i].0.name.as_str());
                            out[i] = Some(Err(LockError::backend(
                                inner.kind,
                                "extend",
                                name,
                                retryable,
                                message.clone(),
                            )));
                        }
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Ok(ExtendOutcome::NotHeld)))
            .collect()
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let inner = &self.inner;
        let args = [Arg::Bytes(name.as_bytes())];
        let row = inner
            .retry("waiting", Some(name), || {
                inner.db.fetch_one(&inner.sql.waiting, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(0, |r| usize::try_from(r[0].int()).unwrap_or(0)))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = &self.inner;
        let end = prefix_end(prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let args = [Arg::Bytes(prefix.as_bytes()), Arg::Bytes(&end), Arg::Int(limit)];
        let cols = [Col::Bytes, Col::Bytes, Col::Int, Col::Int, Col::Int];
        let rows = inner
            .retry("list", None, || inner.db.fetch(&inner.sql.list, &args, &cols))
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let name = text(r.next().unwrap_or(Val::Int(0)));
                let owner = r.next().unwrap_or(Val::Int(0));
                let rest: Vec<Val> = r.collect();
                Inner::info(name, owner, &rest[0], &rest[1], &rest[2])
            })
            .collect())
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        for _ in 0..5 {
            let Some(info) = inner.inspect(name).await? else {
                return Ok(None);
            };
            let hold = Hold {
                name: name.to_owned(),
                owner: info.owner.clone(),
                token: info.token,
            };
            // Idempotent: retried after a lost connection; a try that may
            // have deleted it unseen counts as deleted (it is gone either way).
            let (deleted, unsure) = inner
                .delete(
                    "force release",
                    (&inner.sql.delete_hold, inner.sql.delete_hold_queued.as_ref()),
                    &hold,
                    None,
                )
                .await?;
            if deleted || unsure {
                return Ok(Some(info));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The line by itself: a join repeated (a retry after a lost reply)
    /// keeps one place; only the head takes a free name, and its claim
    /// takes its place out; leaving twice is leaving once.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_line_counts_each_attempt_once() {
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Sqlite, ":memory:"))
            .await
            .unwrap();
        let inner = &backend.inner;
        let (first, second) = ("0123456789abcdef", "fedcba9876543210");
        let a = inner.join("n", "o1", first).await.unwrap();
        assert_eq!(inner.join("n", "o1", first).await.unwrap(), a, "the same place");
        assert_eq!(backend.waiting("n").await.unwrap(), 1);
        let b = inner.join("n", "o2", second).await.unwrap();
        assert!(b > a, "later joins stand behind");
        assert_eq!(backend.waiting("n").await.unwrap(), 2);
        let req = |owner, attempt| AcquireRequest {
            name: "n",
            owner,
            ttl: Duration::from_secs(30),
            attempt,
            fair: true,
        };
        let busy = backend.detached_attempt(&req("o2", second), true).await.unwrap();
        assert!(
            matches!(busy, (TryAcquire::Busy { .. }, false)),
            "the second in line may not take the free name"
        );
        let (taken, _) = backend.detached_attempt(&req("o1", first), true).await.unwrap();
        assert!(matches!(taken, TryAcquire::Acquired(_)), "the head takes it");
        assert_eq!(backend.waiting("n").await.unwrap(), 1, "the served place is gone");
        inner.leave(second).await.unwrap();
        inner.leave(second).await.unwrap();
        assert_eq!(backend.waiting("n").await.unwrap(), 0);
    }

    #[test]
    fn buckets_and_prefixes() {
        assert_eq!(bucket("order:42", 64), bucket("order:42", 64));
        assert!((0..64).contains(&bucket("x", 64)));
        assert_eq!(bucket("anything", 1), 0);
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
        assert_eq!(prefix_end(""), vec![0xFF]);
        assert_eq!(prefix_end("锁"), {
            let mut v = "锁".as_bytes().to_vec();
            *v.last_mut().unwrap() += 1;
            v
        });
    }
}
