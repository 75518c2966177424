//! The ZooKeeper backend of lockkit (`zk://h1:2181,h2:2181/chroot`).
//!
//! Each lock name is a container node under the chroot; each contender an
//! ephemeral-sequential child of it. The lowest sequence holds the lock,
//! every other contender watches only its direct predecessor (no herd
//! effect: one release wakes one waiter, in queue order). The owner id and
//! the attempt ids of the hold's shares live in the node data and change
//! only with versioned writes, each idempotent by attempt id: a retried
//! acquisition, re-entry or release counts once.
//!
//! **Owners shared by processes**: processes configured with the same owner
//! id share one hold, but each session's share of it lives in a node of its
//! own session — the contender node it acquired with, or a *share node* it
//! creates when it re-enters a hold another session's node carries. The
//! hold stands while any of its nodes does (another owner waits for all of
//! them), and each guard rests on its own session alone: when one process
//! releases or dies, the others keep the hold, and nobody else gets it
//! while they do.
//!
//! The fencing token is the holder node's creation zxid, which keeps growing
//! across server restarts and leader changes.
//!
//! Leases are the session's: a crashed holder's locks come free when its
//! session expires (`session_timeout`, default 10 s), and a holder's lost
//! signal fires as soon as its connection is suspended, before the server
//! could expire the session and let another owner in. After an expiry the
//! backend opens a new session for later acquisitions by itself, and fences
//! the old one: each session has an ephemeral marker node
//! (`/lockkit-sessions/<id>` under the chroot), every contender create
//! checks its session's marker in the same `multi`, and the new session
//! deletes the old marker — so a create of the old session that the server
//! runs late (the server keeps a session until its timeout) fails instead of
//! queueing a node nobody waits for. The queue is FIFO: waiters are served
//! in the order they queued whatever the request's `fair` says.
//!
//! **A `lock` that gives up** (its wait bound, an error) deletes its queued
//! node before it returns: a node that comes first is its owner's hold, and
//! the owner's other processes would join it. While the connection is lost
//! or slow the server keeps the session, and the node, so the call tries
//! again until its delete is answered (a session that ended meanwhile:
//! until the next session has taken the node back) or one session timeout
//! has passed — by then a server that could not hear the client has ended
//! the session. A
//! `lock` can therefore return up to a session timeout after its bound
//! when the network is failing (up to two when the bound ran out before
//! the node's create was answered: the call waits for that answer too). A
//! dropped `lock` future leaves the delete to the background.
//!
//! **Semaphores and read-write locks** (`LockClient::semaphore`,
//! `LockClient::rw_lock`) queue in the same line as the mutex of their
//! name, under its one parent, with the kind in each contender node's
//! name: a name is one lock whatever the kind
//! ([the contract](lockkit_core::contract#one-name-one-lock)). The line is
//! in sequence order across kinds: a mutex or a writer holds when it is
//! first, a permit when only permits of its semaphore come before it and
//! fewer than N, a reader when only readers do. Each waiter watches the
//! node right ahead of it that keeps it out, whatever its kind; `inspect`
//! answers with the first hold of the line and its kind. A permit is a
//! node among the first N of its semaphore's run (its token its creation
//! zxid; the count is in every node's name, and a request with another
//! count than a node before it gets `LockError::Conflict`); the first
//! waiting permit watches the parent's children, every one behind it its
//! predecessor's data, which that one's claim changes when it comes to
//! hold (see below). A writer holds when it is first in the
//! line and watches its predecessor; a reader holds when
//! only readers come before it and watches the last node that does not
//! read, so a waiting writer keeps new readers out. A reader of the owner
//! of the holding writer is granted beside it (a downgrade, marked by a
//! node `beside-<reader>` so that a listing shows it), and the writer
//! coming first after it waits for it too. Each step of a waiter is one
//! listing (and reads of its own owner's nodes only), and each release
//! wakes only the waiters it admits. A writer records its token in the
//! read-write lock's write record (`rwlock-<name>`), which is persistent
//! for that reason: readers carry the last write token, also once nobody
//! holds the lock. Lockkit versions that kept each kind under parents of
//! its own do not see these lines: see the `layout` module.
//! Re-entry (a second read or write hold of an owner) and a repeated
//! attempt add the attempt to the owner's holding node *of the same
//! session*; another process with the same owner id is another contender
//! for these kinds (unlike the mutex, whose holds it joins). Leases, cancel
//! safety and the clean-up of failed attempts are the mutex's.
//!
//! **Dead waiters**: a waiter whose process died leaves its node in line
//! until the server ends its session. While a session has waiters it
//! rewrites its marker every 100 ms (its liveness record: one write per
//! session, however many wait), and the waiter behind a node whose
//! session's record has stood still for 300 ms deletes that node — if it
//! never held: a contender that comes to hold after it waited *claims* its
//! node (a versioned write, made once the hold has lasted 50 ms, at once
//! for a permit) and until then its lease also ends 300 ms after its
//! session's last refresh, before anyone could take its node. So a dead
//! waiter costs the next one about 0.3–0.4 s; a live process that stops
//! refreshing for 300 ms (stopped, starved) has its waiters queue again at
//! the back — never granted out of turn, never twice. A dead *holder* frees
//! its lock when its session ends, as before. The details, the bound and
//! its costs: the `dead` and `claim` modules.
//!
//! **Slow links:** the client library pings after 3/20 of the session
//! timeout without a request and drops a connection that answered nothing
//! for 2/5 of it, so a connection carries round trips up to about a
//! quarter of the session timeout (2.5 s at the default 10 s). Over slower
//! links it breaks and reconnects every few seconds: raise
//! `session_timeout`.
//!
//! **A holder that did not run**: the client library notices a silent
//! connection (and fires the lost signal) only while the process runs. A
//! process stopped, swapped out or starved for longer than its session
//! timeout may resume with its session already expired on the server and
//! another owner holding the lock — and its first look could come before
//! the library's task has run. So every lease also carries its session's
//! deadline: a session timeout (less 1 % + 2 ms for clock-rate drift) after
//! the send time of the last request the server answered, kept fresh by a
//! cheap read every quarter of the timeout (which stands in for the
//! library's idle ping). `guard.is_lost()` compares it with the clock, so
//! that first look says lost; `guard.valid_until()` reports it. The server
//! expires sessions by its own monotonic clock: steps of its wall clock
//! change nothing.
//!
//! **Access control**: with credentials in the URL,
//! `zk://user:password@h1:2181,h2:2181/chroot`, the session authenticates
//! with the `digest` scheme and every node lockkit creates gets the ACL
//! creator-all + world-read: clients with the same credentials share the
//! locks; other sessions can list and inspect them but cannot delete a lock
//! node, change its data or queue under a name (`NoAuth`). Without
//! credentials nodes are open to every session (`world:anyone` all). See
//! [`ZkConfig`] for the details.
//!
//! Most applications use it through the `lockkit` facade (feature
//! `zookeeper`):
//!
//! ```no_run
//! # async fn demo() -> Result<(), lockkit_core::LockError> {
//! use lockkit_core::{LockClient, LockOptions};
//! use lockkit_zk::ZkBackend;
//!
//! let backend = ZkBackend::from_url("zk://127.0.0.1:2181,127.0.0.1:2182/lockkit?session_timeout=10s").await?;
//! let locks = LockClient::new(backend, LockOptions::new())?;
//! let guard = locks.lock("order:42").await?;
//! let token = guard.fencing_token(); // the holder node's czxid
//! tokio::select! {
//!     _ = guard.lost() => { /* connection suspended or session expired: stop */ }
//!     _ = async { /* the guarded work, writing with `token` */ } => {}
//! }
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::{BackendSchemes, ConnectUrl, LockBackend};

mod acquire;
mod backend;
mod cache;
mod change;
mod claim;
mod cleanup;
mod config;
mod conn;
mod dead;
mod enqueue;
mod error;
mod extend;
mod held;
mod hold;
mod inspect;
mod join;
mod kinds;
mod layout;
mod lease;
mod leftover;
mod orphan;
mod queue;
mod release;
mod result;
mod scheme;
mod step;
mod take_out;
mod wait;
mod want;

pub use backend::{ZkBackend, ZkStats};
pub use config::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_PORT, DEFAULT_SESSION_TIMEOUT, ZkConfig};
pub use error::{BACKEND, ConnectTimeout, ForeignNode};
pub use layout::{decode_name, encode_name};

/// The schemes this crate serves (see [`connect`]).
pub const SCHEMES: BackendSchemes = BackendSchemes {
    names: scheme::SCHEME_NAMES,
    connect: |url| Box::pin(connect(url)),
};

/// Connects to the ZooKeeper ensemble a `zk://` URL names, taking its own
/// query parameters (`session_timeout`, `connect_timeout`) from `url`.
///
/// This is what `lockkit::connect` calls. A query parameter left over is
/// refused with [`ConnectUrl::finish`] before any connection is tried.
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = ZkConfig::from_url(url)?;
    url.finish()?;
    Ok(Arc::new(ZkBackend::connect(config).await?))
}
