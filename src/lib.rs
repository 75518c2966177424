//! # lockkit
//!
//! Distributed locks with one contract and several backends. Write
//! `locks.lock("order:42")` once; pick the backend with a URL.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockkit::LockError> {
//! let locks = lockkit::connect("memory://").await?; // or redis://, mysql://, zk://, sqlite://
//! let guard = locks.lock("order:42").await?;         // waits up to the default bound (30 s)
//! let token = guard.fencing_token();                 // storage should refuse stale tokens
//! assert!(token > 0);
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! | scheme | backend | cargo feature |
//! |---|---|---|
//! | `memory://[NAME]` | in-process | always |
//! | `sqlite://PATH` | SQLite table | `sqlite` |
//! | `redis://`, `rediss://`, `redis+sentinel://`, `redis+cluster://` | Redis | `redis` |
//! | `redlock://h1,h2,h3` | Redlock over N masters | `redis` |
//! | `mysql://`, `mariadb://` | MySQL/MariaDB table | `mysql` |
//! | `postgres://` | PostgreSQL table | `postgres` |
//! | `zk://h1,h2/chroot` | ZooKeeper | `zookeeper` |
//!
//! Common query parameters: `ttl` (lease, default 30s), `wait` (bound of
//! `lock`, default 30s, or `forever`), `auto_extend` (default true), `owner`.
//! See [`LockClient`] for the API and the contract every backend keeps.
//!
//! Programs without async: `lockkit::blocking` (cargo feature `blocking`)
//! has the same client, guards and handles with blocking methods, each
//! client on a small runtime of its own that keeps its leases extended.
#![warn(missing_docs)]

#[cfg(feature = "blocking")]
pub mod blocking;
#[cfg(feature = "serde")]
mod config;
mod connect;
mod schemes;
#[cfg(any(feature = "mysql", feature = "postgres"))]
mod sql_modes;

#[cfg(feature = "serde")]
pub use config::LockConfig;
pub use connect::{Connect, URL_VAR, connect, connect_from_env};
#[doc(inline)]
pub use lockkit_core::{
    Capabilities, DEFAULT_OBSERVE_INTERVAL, DEFAULT_TTL, DEFAULT_WAIT, Election, JobContext, JobLimits, Leader,
    Leadership, LeaseKind, LockClient, LockError, LockGuard, LockInfo, LockKind, LockOptions, LostReason, LostSignal,
    MAX_PERMITS, MAX_TTL, MAX_WAIT, MIN_TTL, MultiGuard, PUSHED_RECHECK, RwLock, Semaphore, Unlocked, contract, memory,
    one_line, raw, telemetry,
};
pub use schemes::register_backend;

/// The conformance kit (feature `testkit`), for testing a backend.
#[cfg(feature = "testkit")]
pub use lockkit_core::testkit;
