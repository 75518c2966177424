//! The Redis backend of lockkit: locks on one Redis (a single server, the
//! master of a sentinel group, or a Redis Cluster) and Redlock over N
//! independent masters.
//!
//! Applications reach it through the `lockkit` facade (feature `redis`):
//!
//! ```no_run
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockkit_core::LockError> {
//! use lockkit_core::raw::{BackendSchemes, ConnectUrl};
//! use lockkit_core::LockClient;
//!
//! // What `lockkit::connect("redis://…")` does:
//! let mut url = ConnectUrl::parse("redis://:secret@127.0.0.1:6379/0?prefix=app:&ttl=10s")?;
//! let backend = lockkit_redis::connect(&mut url).await?; // refuses unknown parameters first
//! let locks = LockClient::from_arc(backend, url.options)?;
//!
//! let guard = locks.lock("order:42").await?;
//! let token = guard.fencing_token(); // hand it to the storage you write to
//! # let _ = token;
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! # How a lock is kept
//!
//! One hash per lock (`lockkit:{tag}:NAME`: owner, hold count, fencing
//! token) with the lease as its expiry, changed only by Lua scripts, so
//! acquire, re-enter, extend and release are each one atomic round trip
//! (`EVALSHA`; a script body is sent only when a server answers
//! `NOSCRIPT`). The token comes from a counter in the same cluster slot,
//! raised only by a first acquisition. `tag` is three hex digits of the
//! FNV-1a hash of the name, so the lock key, its counter (`lockkit:{tag}fence`,
//! shared by the names of one of 4096 buckets, which keeps their number
//! bounded) and its channel share a cluster slot, and a name may contain any
//! bytes (`{`, `}`, NUL, newlines, UTF-8) as it is. [`config`] documents the
//! URL and its parameters.
//!
//! * **Semaphores and read-write locks** ([`LockKind::Permit`],
//!   [`LockKind::Read`], [`LockKind::Write`]) keep their holds in a hash
//!   per name and kind with their lease ends in a sorted set, in the same
//!   slot, with the same counter, the same kind of line and the same
//!   attempt ids (see `layout`); every change is again one script call.
//!   The line lets in what `lockkit_core::raw::admitted` says (a
//!   semaphore of N: the first N − held, not only the first; a read-write
//!   lock: every reader before the first waiting writer, or that writer
//!   alone), and a change tells only the clients it lets in, on their own
//!   channels — a crowd costs each hand-off about two script calls however
//!   many clients wait. A client waiting to read and to write stands in
//!   line twice; a turn to read lets all of the client's readers in. On
//!   Redlock a permit is one of N slots held on a quorum, as a mutex is
//!   (see [`RedlockBackend`]).
//! * **Waiting** does not poll: waiters subscribe (one pub/sub connection
//!   per backend, shared, counted per name) before they retry, and sleep
//!   until a message or the holder's expiry. Waiting clients queue on the
//!   server (`lockkit:{tag}q:NAME`), each with a channel of its own per name
//!   (`lockkit:{tag}wID:NAME`, in the lock's slot). A release message names
//!   the client whose turn it is and goes to that client, which wakes one of
//!   its waiters, and to the next in line only, which tries anyway if nobody
//!   took the lock within 200–400 ms; a release nobody queued for goes to
//!   the lock's own channel. A hand-off therefore costs the same few Redis
//!   commands and two messages with 2 waiting clients or 200, in one
//!   process or in many. (Clients of lockkit versions before these
//!   channels listen on the lock's channel only: they miss their turns and
//!   wait for the lease. Upgrade the clients of one keyspace together.) The
//!   releasing client also hands its message to the waiters of its own
//!   process (every backend there on the same servers and prefix) at once,
//!   so a hand-off within a process does not wait for the pub/sub round trip
//!   — and reaches waiters that may not subscribe (no channel rights).
//! * **Dead waiters**: a waiting client whose process died has no listener
//!   left on its channel once the server has closed its connection (at
//!   once for a killed process: the kernel closes its sockets). The release
//!   (or any change) that would tell it its turn sees its `PUBLISH` reach
//!   nobody, drops it from the line and tells the next one: the dead
//!   waiter costs the next about one more command. A client that cannot be told so — its
//!   process frozen, its network cut, or a connection the server has not
//!   seen close yet — is dropped by the next in line after the fallback
//!   delay of 200–400 ms (`FALLBACK` in `turn`), which bounds what a dead
//!   waiter costs. A live client dropped so (its pub/sub connection
//!   reconnecting, a process starved past the delay) joins again at the
//!   back of the line with its next attempt; its grant is still decided by
//!   the server's line, so it is never granted out of turn or twice.
//! * **Watchdog batching**: [`extend_many`](lockkit_core::raw::LockBackend::extend_many)
//!   extends every hold of a client in one script call (per slot in a
//!   cluster, per node for Redlock) — one round trip per renewal period.
//! * **Recovery**: connections reconnect by themselves after a restart
//!   (commands in between fail with retryable errors); pub/sub connections
//!   resubscribe and wake their waiters once they are back.
//! * **Cancel safety**: if the caller of an acquisition attempt is gone when
//!   it succeeds (its future dropped mid-attempt), the rest of the attempt
//!   moves to a task of its own, which releases the hold at once. A waiter
//!   dropped at any point leaves no subscription and no queue entry behind.
//! * **Operators**: `list` (by `SCAN`, on every primary or node) and
//!   `force_release` (which publishes, so waiters move on).
//! * **Security**: `AUTH` with a password or an ACL user from the URL
//!   (`redis://user:pass@…`; the user needs the prefix's keys and, for
//!   prompt hand-offs, its channels: `~lockkit:* &lockkit:*`), TLS with
//!   `rediss://` (feature `tls`, on by default: rustls with the system's
//!   roots, or `tls_ca`, and client certificates with `tls_cert`/`tls_key`).
//!
//! # Fencing tokens
//!
//! Tokens grow strictly per name. A token is `max(counter + 1, the server's
//! clock in µs)`, so they keep growing across a restart that lost the
//! counter (no persistence) or a failover to a lagging replica, unless the
//! new server's clock is behind the old one's. `Capabilities::durable_tokens`
//! is `true` only when the server writes an append-only file, which keeps
//! the counter without relying on clocks. For Redlock see [`RedlockBackend`]:
//! its tokens are the maximum over a quorum, with the limits stated there.
//!
//! # Clocks
//!
//! A lease is a key expiry, which Redis keeps as a time on its **wall
//! clock**; the holder turns the remaining lease it was told into a
//! deadline on its own monotonic clock, so the client's clock steps change
//! nothing. A forward step of the *server's* wall clock by `d` ends every
//! lease `d` early while its holder still trusts it — another owner can
//! acquire before the holder's lost signal fires (the newcomer's fencing
//! token is greater, and the clock rule above keeps it so). Run Redis hosts
//! with a slewing time daemon (chrony) so corrections never step. A step
//! back only lengthens leases, and can hold tokens at the counter (they
//! still grow by one). A holder process suspended past its deadline (a
//! pause, a VM migration) finds its guard lost when it resumes; work it
//! had in flight is what fencing tokens are for.
//!
//! # Modes
//!
//! | URL | backend |
//! |---|---|
//! | `redis://h:6379/0`, `rediss://…` | [`RedisBackend`], one server |
//! | `redis+sentinel://s1:26379,s2/NAME` | [`RedisBackend`] on the group's master, following failovers |
//! | `redis+cluster://h1,h2,h3` | [`RedisBackend`] on a cluster, sharded pub/sub |
//! | `redlock://h1,h2,h3,h4,h5` | [`RedlockBackend`] |
//!
//! Servers must speak RESP3 (Redis 6 or later).
//!
//! # Replication: what sentinel and cluster do not promise
//!
//! A sentinel group or a cluster shard is one master with replicas, and
//! Redis replicates **asynchronously**: a hold is granted when the master
//! has it, before any replica does. If the master fails before the hold
//! reached the replica that is promoted, the hold is gone, and another
//! owner can acquire the name while the first holder's guard is still
//! valid (it turns lost only at its next extension). Tokens stay ordered
//! through such a failover only by the clock rule above. Use Redlock over
//! independent masters, or a backend with synchronous commits (SQL with
//! synchronous replication, ZooKeeper), when a failover must not break
//! mutual exclusion; at least run the lease short so the window is short.
//!
//! `wait_replicas=N` (see [`RedisConfig::wait_replicas`]; for `redis://`
//! with replicas, sentinel and cluster, not Redlock) narrows the window:
//! each acquisition (new hold or re-entry) and each extension is followed by
//! `WAIT N timeout` in the same pipeline — same connection, same node, same
//! round trip. An acquisition fewer than N replicas acknowledged within
//! `wait_replicas_timeout` is taken back (released by its attempt id) and
//! fails with a retryable [`ReplicasError`]; an extension counts as failed,
//! so the lost signal fires at the validity deadline unless a later one is
//! acknowledged. Releases do not wait. It does not close the window: a
//! replica that acknowledged can still lose the election. It costs a
//! replica's acknowledgement on every acquisition and extension (the
//! README gives the measured cost). While
//! replicas lag, a `WAIT` holds up the commands queued behind it on the
//! backend's command connection (up to the timeout each), and an answer
//! that the name is busy also waits for the replicas.
//!
//! # Retries
//!
//! Every script call is idempotent by the call's attempt id (see the key
//! layout in `layout` and the attempts in `scripts`): a command that the
//! client library sends again after a timeout or a dropped connection — the
//! cluster client does so for redirections and lost connections — counts
//! once. Only an
//! operator's `force_release` is not: sent twice, it can remove a hold
//! taken between the two.
#![warn(missing_docs)]

mod acquire;
mod backend;
pub mod config;
mod conn;
mod error;
mod extend;
mod guard;
mod inspect;
mod layout;
mod redlock;
mod release;
mod replicas;
mod scripts;
mod turn;
mod wait;

use std::sync::Arc;

pub use backend::RedisBackend;
pub use config::{Mode, RedisConfig, RestartGuard};
pub use error::{LayoutError, NodeTimeout, Quarantined, QuorumError, ReplicasError, UnexpectedReply};
pub use redlock::RedlockBackend;

use lockkit_core::LockError;
#[cfg(doc)]
use lockkit_core::LockKind;
use lockkit_core::raw::{BackendSchemes, ConnectUrl, LockBackend};

/// The schemes this crate serves (see [`connect`]).
pub const SCHEMES: BackendSchemes = BackendSchemes {
    names: &[
        "redis",
        "rediss",
        "redis+sentinel",
        "rediss+sentinel",
        "redis+cluster",
        "rediss+cluster",
        "redlock",
    ],
    connect: |url| Box::pin(connect(url)),
};

/// Connects to the Redis (or the Redlock nodes) a `redis://`, `rediss://`,
/// `redis+sentinel://`, `redis+cluster://` or `redlock://` URL names, taking
/// this backend's query parameters from `url` (see [`config`]). A query
/// parameter left over after them (and lockkit's common ones) is refused
/// with [`ConnectUrl::finish`] **before** any connection is tried, so a typo
/// is reported as such even when the server is unreachable.
///
/// Errors: [`LockError::InvalidConfig`] naming the URL part at fault, or a
/// retryable [`LockError::Backend`] when the server (a quorum of Redlock
/// nodes) cannot be reached.
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = RedisConfig::from_url(url)?;
    url.finish()?;
    Ok(match config.mode {
        Mode::Redlock => Arc::new(RedlockBackend::connect(config).await?),
        _ => Arc::new(RedisBackend::connect(config).await?),
    })
}
