//! The SQL backend of lockkit: a unique-key lock table with a timeout
//! sweeper, over sqlx, for MySQL/MariaDB, PostgreSQL and SQLite.
//!
//! Most applications use it through `lockkit::connect` with a
//! `mysql://`, `mariadb://`, `postgres://` or `sqlite://` URL (cargo
//! features `mysql`, `postgres`, `sqlite` of `lockkit`):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockkit_core::LockError> {
//! # #[cfg(feature = "sqlite")] {
//! use lockkit_core::raw::{BackendSchemes, ConnectUrl};
//! use lockkit_core::{LockClient, LockOptions};
//!
//! let mut url = ConnectUrl::parse("sqlite::memory:?table=locks&sweep_interval=5s")?;
//! let backend = lockkit_sql::connect(&mut url).await?;
//! url.finish()?; // no unknown parameters left
//! let locks = LockClient::from_arc(backend, LockOptions::new())?;
//! let guard = locks.lock("order:42").await?;
//! assert!(guard.fencing_token() > 0);
//! guard.unlock().await?;
//! # }
//! # Ok(()) }
//! ```
//!
//! # The table
//!
//! One row per held name (the classic lock table, made robust): the name
//! as exact bytes (`VARBINARY`/`BYTEA`/`BLOB`, so `"A"` and `"a"`, NUL
//! bytes, quotes and emoji are all distinct names), the owner id, the hold
//! count (reentrancy by owner, shared by every process using that owner), the
//! fencing token, the expiry and acquisition time **by the database's
//! clock**, and an optional memo (`?memo=`). It is created on first use
//! (`CREATE TABLE IF NOT EXISTS`, name set by `?table=`, default
//! `lockkit_locks`) or checked if it exists; see [`SqlBackend::migrate`].
//!
//! # Session-lock mode
//!
//! `?mode=session` (MySQL/MariaDB, Postgres) keeps holds as server session
//! locks — `GET_LOCK`, advisory locks — on the backend's connections
//! instead of table rows: no write per acquisition, the lease is the
//! connection. It is a backend of its own, in the `lockkit-sql-session`
//! crate (the `lockkit` facade's `mysql` and `postgres` features bring it,
//! and `lockkit::connect` picks it for `mode=session`); it shares this
//! crate's [`SqlConfig`] and the error classes in [`raw`]. This crate's
//! [`connect`] refuses `mode=session`.
//!
//! # Semaphores and read-write locks
//!
//! [`LockKind::Permit`](lockkit_core::LockKind) and the read and write holds
//! of a read-write lock live in two companion tables, created beside the
//! others (the mutex's table and statements are not touched):
//! `<table>_kinds`, one row per name of a kind family (1: semaphores, 2:
//! read-write locks) with the semaphore's
//! permit count, the name's token counter and its last write token; and
//! `<table>_holds`, one row per hold (a permit, a reader's hold, the
//! writer's hold: owner, token, shares in `attempts`, expiry by the
//! database's clock) and per place in the name's line (`queued`). Every
//! attempt is one transaction under a lock on the name's `<table>_kinds`
//! row, which reads the name's holds and line and decides by the memory
//! backend's rules; see the `kinds` module. A name's `<table>_kinds` row
//! stays when its holds are gone: it keeps the name's token counter (tokens
//! strictly grow per name) and the last write token that readers carry.
//! Their waiters stand in the mutex's line (see Waiting), so they wait, are
//! woken and are skipped when dead exactly as a mutex's are: a permit goes
//! to the first in line, a read hold to any reader with no writer waiting
//! ahead of it; a release wakes the first waiter of the name in each
//! process, and a grant that leaves room (a permit left, a reader in)
//! wakes the next — one waiter per permit, not the line. Releases take no
//! lock on the name (a share is taken out in place), so they never wait
//! for a claim. The sweeper deletes expired rows of `<table>_holds`.
//!
//! One name is one lock whatever the kind: while a name has holds of a
//! semaphore or a read-write lock, the lock table has a guard row for it
//! (owner `0xFF` and the family: not an owner id), which the mutex's
//! statements see as another owner's hold and the other family's claims as
//! busy. A claim takes it in its transaction; the last release frees it
//! under the name's `<table>_kinds` row lock; the watchdog's batch extends
//! it with the holds. `inspect` and `list` show the kind's first hold in
//! its place, and `force_release` (the mutex's override) spares it. A
//! waiter kept out by another kind is woken by a release in its process;
//! in another process the head of its line looks again within
//! `max_backoff`.
//!
//! # Fencing tokens
//!
//! Tokens come from a durable counter, drawn while the name is locked
//! against other acquirers through the commit (see [`SqlBackend`] for why
//! that matters): a sequence on Postgres (after a transaction advisory lock
//! on the name); on MariaDB a sequence `<table>_token_seq` (`CACHE 1000`:
//! its row is written once per 1000 tokens), drawn by the acquiring
//! transaction once its claim holds the name's row; and on MySQL, which has
//! no sequences, a companion table `<table>_tokens` with one counter row per
//! bucket of names (64 buckets, so acquisitions of unrelated names rarely
//! meet on one counter row, and a counter row is locked only for the short
//! acquiring transaction, never across a network round trip). A MariaDB
//! table made by a lockkit before the sequence keeps its counter rows (an
//! older client may still draw from them), and a new table's
//! `<table>_tokens` takes no rows, so an older lockkit fails there instead
//! of drawing tokens of its own.
//! SQLite runs one writer at a time, so its claim reads `<table>_tokens` in
//! the same statement and a trigger moves the counter. Tokens strictly grow
//! per name, also across restarts and deleted rows. SQLite files are opened
//! in WAL mode with `synchronous=FULL`, so a token survives a power loss too,
//! not only a process crash.
//!
//! # Waiting
//!
//! **Fair by default** ([the contract](lockkit_core::contract#fair-by-default)): waiters are served in the order
//! they began waiting. A busy `lock` takes a place in the name's line, a row
//! in the companion table `<table>_waiters` (name, owner, attempt id, an
//! increasing `id` for the order, and a lease by the database's clock). The
//! claim then takes a free or expired name only for the oldest live waiter
//! (or when nobody waits), and deletes that waiter's row in the same
//! statement or transaction; re-entry by the holder is always immediate.
//! Joining also marks the name's row (`queued`, a free row if there is
//! none), and the release of a marked row leaves it free instead of
//! deleting it: a claim that finds no row or no mark knows that nobody
//! waits, so a fair acquisition costs nothing more than an unfair one until
//! somebody does. A
//! fair `try_lock` never queues and gets nothing while somebody waits, so a
//! client that just released cannot overtake the line. With `fair=false`
//! (URL or `LockOptions::fair`) an acquisition takes any free name, as
//! before, and joins no line.
//!
//! The line cannot jam: each place is a lease (`?queue_lease=`, default
//! 5 s) that one task per backend renews for all of its waiters in one
//! statement, every third of the lease; a waiter that gives up (its wait
//! ran out, an error, its future dropped) deletes its row at once (in the
//! background when dropped). The sweeper deletes expired places.
//!
//! **A waiter whose process died** is skipped at once where the server
//! can tell: each place names its backend's liveness key, which MySQL and
//! MariaDB hold as a `GET_LOCK` on a connection of the backend's own (one
//! more connection per backend that waits) and Postgres as an advisory
//! lock on the wait-list connection; when the process dies its
//! connections close, the server frees the key, and the next claim passes
//! the dead place by. SQLite has no server: the key is a row of
//! `<table>_live` with a short lease (`?live_lease=`, default 400 ms) that
//! the backend renews with one statement every quarter of it while it
//! waits, so a dead waiter costs the next at most `live_lease`. A live
//! process whose key lapses — its carrying connection lost, or on SQLite
//! its renewals stalled longer than `live_lease` — is passed over while it
//! does and keeps its places: its turn comes back with the key. A claim
//! grants only the live head of the line, so nobody is granted out of turn
//! or twice. Places without a key (an older lockkit's) live by their lease
//! alone.
//!
//! Only the head of the line tries again on its own, with jittered
//! exponential backoff never longer than the holder's remaining lease or
//! the caller's deadline. A release wakes the first waiter of the name in
//! this process (all backends of a process on one table share their
//! waiters), so hand-offs within a process are immediate. On Postgres, a
//! release that somebody waits for `NOTIFY`s the table's channel and one
//! `LISTEN` connection per backend wakes the first waiter of each process
//! (waiters say that they wait with a shared advisory lock on the name,
//! held by one wait-list connection per backend; a release that can take
//! that key exclusively skips the `NOTIFY`, which would otherwise serialize
//! the commits of all releases). Every other waiter sleeps until the waiter
//! ahead of it in its process is served or leaves, or its place is renewed
//! (the first waiter of each name then looks whether the line moved). Each
//! attempt runs detached, so a cancelled `lock` leaves no hold behind.
//!
//! Joining the line, leaving it and renewing places do not wait for the
//! disk: on Postgres those statements turn `synchronous_commit` off for
//! their own transaction, on SQLite they run on connections with
//! `synchronous=NORMAL` (MySQL has no per-session setting and flushes them
//! like any commit). A place is a lease, and a waiter whose row a crash
//! lost joins again; so a hand-off pays two flushes, the release's and the
//! next holder's claim's. On SQLite, the statements of all backends of a
//! process on one file take turns in the order they come instead of
//! meeting in SQLite's busy handler, which sleeps milliseconds between
//! looks.

//! # Failures
//!
//! A statement that failed in a way that certainly did not take effect
//! (deadlock, lock wait timeout, busy database) is tried again at once, for
//! up to two seconds. So is a statement whose connection was lost
//! mid-way — it may or may not have run — because every statement that
//! changes a hold is idempotent by its attempt id: the row's `attempts`
//! column keeps one id per share of the hold (`hold_count` is their
//! number), so a claim that committed unseen and is sent again is
//! recognised and counted once, and a release takes out only its own share
//! (a repeat finds it gone and changes nothing; a release whose try may
//! have deleted the row unseen reports the hold released). A pooled
//! connection that died with a database restart therefore fails neither
//! `lock` nor `unlock`; when the retries run out, `lock` reports a
//! retryable error, or while waiting tries again with the same attempt id.
//!
//! A table made by a lockkit without the `attempts` or the `queued` column
//! gets it on the first connect that may create tables (`ALTER TABLE … ADD
//! COLUMN`, the only change lockkit makes to an existing table); with
//! `create_table=false` the connect fails and names the statement to run.
//! Upgrade every process that uses one table together: rows written by the
//! older version carry no attempt ids, and their holds end with their lease;
//! an older waiter does not mark the name, so a newer client may overtake it.
//!
//! # Sweeper
//!
//! A background task deletes expired rows in batches (`?sweep_interval=`,
//! default 15 s; `?sweep_batch=`, default 100). Expired rows are free anyway
//! (acquirers take them over); the sweeper keeps the table small. It spares
//! the free row of a name whose line has a live waiter.
//!
//! # Limits
//!
//! - TLS to the database is not compiled in (no sqlx TLS feature): use a
//!   loopback or otherwise trusted network.
//! - MySQL and SQLite cannot push a release to waiters in other processes:
//!   the head of the line retries on its backoff (`max_backoff`), and the
//!   first waiter of each process looks every `max_backoff` whether it has
//!   become the head, so a hand-off between processes can take up to about
//!   twice `max_backoff` (250 ms by default). Waiters in the same process
//!   are woken by the release itself. The order stays fair either way.
//! - SQLite runs one writer at a time, and with `synchronous=FULL` each write
//!   waits for the disk: under heavy write contention a watchdog extension
//!   can wait its turn long enough to lose a very short lease (the lost
//!   signal fires, as it must). Prefer leases of a second or more there.
//! - MySQL sessions run at `READ COMMITTED` (so the sweeper's scan does not
//!   lock live rows); a server with `binlog_format=STATEMENT` refuses writes
//!   at that level: use `ROW` or `MIXED` (the defaults).
//!
//! # What durable tokens assume of the server
//!
//! [`Capabilities::durable_tokens`](lockkit_core::Capabilities) is `true`
//! for MySQL, Postgres and SQLite files: a token is handed out only after
//! the transaction that drew it committed. That is durable only if a
//! commit is:
//!
//! - **MySQL/MariaDB**: `innodb_flush_log_at_trx_commit=1` (the default).
//!   With `2` an operating-system crash, with `0` a server crash, can lose
//!   the last second of commits — the counter row (or the sequence's
//!   reservation) goes back, and a token
//!   already given to a holder (who may have written with it) is given
//!   again. With a replica taking over, only a semi-synchronous (or
//!   Galera) replica is sure to have the counter; an asynchronous one can
//!   be behind and repeat tokens. `sync_binlog=1` keeps the binary log in
//!   step for such replicas.
//! - **PostgreSQL**: `fsync=on` and `synchronous_commit` at `on` or above
//!   (the defaults). With `synchronous_commit=off` (for the server, the
//!   database or lockkit's user) a crash can lose recent commits and the
//!   sequence's last WAL record with them, so a token can repeat. A standby
//!   that takes over has every token only if it was a synchronous standby
//!   (`synchronous_standby_names`).
//! - **SQLite**: lockkit opens files in WAL mode with `synchronous=FULL`;
//!   another program that opens the file with `synchronous=OFF` may lose
//!   commits on power loss. `sqlite::memory:` is not durable (and says so).
//!
//! # Clocks
//!
//! Leases are measured by the **database's** clock (never the client's) and
//! each holder turns the remaining lease it was told into a deadline on its
//! own monotonic clock. So a client's wall-clock step changes nothing. A
//! step of the *database server's* wall clock does: forward by `d`, every
//! lease ends `d` early on the server while its holder still trusts it —
//! another owner can take the name over before the holder's lost signal
//! fires (fencing tokens still order them: the newcomer's token is
//! greater). Run the database host with a slewing time daemon (chrony,
//! `ntpd -x`) so corrections never step. A step back only lengthens
//! leases. A holder process suspended past its deadline (a pause, a VM
//! migration) finds its guard lost when it resumes; work it had in flight
//! is what fencing tokens exist for.
#![warn(missing_docs)]
// Without a driver feature the crate has no database to talk to.
#![cfg_attr(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")), allow(unused))]

mod acquire;
mod backend;
mod claim;
mod config;
mod conn;
mod error;
mod extend;
mod handle;
mod inspect;
mod kinds;
mod layout;
pub mod raw;
mod release;
mod retry;
mod shared;
mod sql;
mod sweeper;
#[cfg(feature = "mysql")]
mod token_source;
mod value;
mod wait;

use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::{BackendSchemes, ConnectUrl, LockBackend};

pub use config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_LIVE_LEASE, DEFAULT_MAX_CONNECTIONS, DEFAULT_PING_INTERVAL, DEFAULT_QUEUE_LEASE,
    DEFAULT_SWEEP_BATCH, DEFAULT_SWEEP_INTERVAL, DEFAULT_TABLE, Dialect, MAX_TABLE_LEN, Mode, Pooler, SqlConfig,
    validate_table,
};
pub use handle::SqlBackend;

/// SQLite's schemes (see [`connect`]).
#[cfg(feature = "sqlite")]
pub const SQLITE_SCHEMES: BackendSchemes = BackendSchemes {
    names: &["sqlite"],
    connect: |url| Box::pin(connect(url)),
};

/// MySQL's and MariaDB's schemes (see [`connect`]).
#[cfg(feature = "mysql")]
pub const MYSQL_SCHEMES: BackendSchemes = BackendSchemes {
    names: &["mysql", "mariadb"],
    connect: |url| Box::pin(connect(url)),
};

/// Postgres's schemes (see [`connect`]).
#[cfg(feature = "postgres")]
pub const POSTGRES_SCHEMES: BackendSchemes = BackendSchemes {
    names: &["postgres", "postgresql"],
    connect: |url| Box::pin(connect(url)),
};

/// Connects to the database a `mysql://`, `mariadb://`, `postgres://` or
/// `sqlite://` URL names, taking this backend's query parameters from it
/// (see [`SqlConfig`]); creates or checks the lock table and starts the
/// sweeper. A query parameter left over is refused with
/// [`ConnectUrl::finish`] before any connection is tried.
///
/// Errors: [`LockError::InvalidConfig`] for `mode=session`, which the
/// `lockkit-sql-session` crate serves (see the crate docs).
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = SqlConfig::from_url(url)?;
    url.finish()?;
    Ok(Arc::new(SqlBackend::connect(config).await?))
}
