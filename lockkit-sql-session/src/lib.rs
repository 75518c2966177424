//! lockkit's session-lock backend for MariaDB and PostgreSQL
//! (`mysql://`, `mariadb://` or `postgres://` URLs with `?mode=session`):
//! [`SessionBackend`]: holds that live on server connections — MariaDB
//! `GET_LOCK`, Postgres advisory locks — instead of rows of the lock table
//! of `lockkit-sql`, whose configuration ([`SqlConfig`]) it shares.
//! `lockkit::connect` picks it for `mode=session`; on its own:
//!
//! ```no_run
//! # async fn run() -> Result<(), lockkit_core::LockError> {
//! use lockkit_core::raw::ConnectUrl;
//! use lockkit_core::{LockClient, LockOptions};
//! use lockkit_sql::SqlConfig;
//! use lockkit_sql_session::SessionBackend;
//!
//! let mut url = ConnectUrl::parse("mariadb://app:secret@db:3306/app?mode=session")?;
//! let config = SqlConfig::from_url(&mut url)?;
//! url.finish()?; // no unknown parameters left
//! let locks = LockClient::new(SessionBackend::connect(config).await?, LockOptions::new())?;
//! let guard = locks.lock("order:42").await?;
//! assert!(guard.fencing_token() > 0);
//! guard.unlock().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Why
//!
//! Every table write is a flushed commit; a session lock writes nothing,
//! and is several times as fast (docs/session-mode.md has the
//! measurements). This mode keeps lockkit's
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
//!   `pg_advisory_unlock`) on the hold's connection. Keys: see the `layout`
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
//!   end and released in the background (`lockkit_core::raw::detach`).
//! - **A waiter that dies** (its process killed) leaves the server's queue
//!   with its connection: the server drops the wait, or, if the grant comes
//!   first, fails to send it and frees the lock with the connection. The
//!   next waiter is not held up.
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
//! - **No pooler that shares server sessions.** PgBouncer in transaction
//!   or statement mode hands a server session to other clients between
//!   transactions, and a session lock stays on it, where another client's
//!   `pg_try_advisory_lock` of the same key succeeds (a re-entry of the
//!   session, to Postgres): two owners would hold one name. `connect`
//!   probes for such a pooler (`?pooler=`, see
//!   [`lockkit_sql::Pooler`]) and refuses it with a configuration error
//!   naming the pool mode; and each try grants only on the server session
//!   its connection opened on (`pg_backend_pid()` checked in the try's
//!   statement), refusing the same way otherwise. The table mode works
//!   behind such a pooler.
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
//!   a hold (the shared count of [the contract](lockkit_core::contract#re-entry-by-owner)): the second waits. Not
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
//!
//! [`SqlConfig`]: lockkit_sql::SqlConfig
//! [`LeaseKind::Session`]: lockkit_core::LeaseKind::Session
//! [`Capabilities::durable_tokens`]: lockkit_core::Capabilities::durable_tokens
//! [`LockBackend::inspect`]: lockkit_core::raw::LockBackend::inspect
//! [`Capabilities::shared_holds`]: lockkit_core::Capabilities::shared_holds
//! [`Capabilities::fair`]: lockkit_core::Capabilities::fair
#![warn(missing_docs)]
// Without a driver feature there is no database to talk to: the crate is empty.
#![cfg(any(feature = "mysql", feature = "postgres"))]

mod acquire;
mod backend;
mod carrier;
mod conn;
mod entry;
mod handle;
mod holds;
mod inspect;
mod layout;
mod line;
mod pinger;
mod pooler;
mod release;
mod sql;
mod wait;

pub use handle::SessionBackend;
pub use layout::server_key;
