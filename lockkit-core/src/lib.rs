//! The lockkit contract: one lock API over several backends.
//!
//! Applications use [`LockClient`] and [`LockGuard`], at the crate root;
//! backends implement [`raw::LockBackend`], and everything a backend author
//! needs is in [`raw`] alone. This crate also holds the watchdog that keeps
//! leases alive, the in-memory backend ([`memory`]), the URL parser
//! ([`raw::ConnectUrl`]), and — behind the `testkit` feature — the
//! conformance kit every backend runs.
//!
//! Most applications depend on the `lockkit` facade crate instead, which adds
//! `lockkit::connect(url)` and the network backends.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockkit_core::LockError> {
//! use std::time::Duration;
//! use lockkit_core::memory::MemoryBackend;
//! use lockkit_core::{LockClient, LockOptions};
//!
//! let locks = LockClient::new(MemoryBackend::new(), LockOptions::new())?;
//! let guard = locks
//!     .lock_with("order:42", &locks.options().ttl(Duration::from_secs(10)))
//!     .await?;
//! let token = guard.fencing_token(); // hand this to the storage you write to
//! assert!(token > 0);
//! tokio::select! {
//!     _ = guard.lost() => { /* stop working: another owner may hold it now */ }
//!     _ = async { /* the guarded work */ } => {}
//! }
//! assert!(guard.unlock().await?.is_free());
//! # Ok(()) }
//! ```
//!
//! # The contract
//!
//! Every backend keeps it, and the conformance kit checks it against each:
//! mutual exclusion while a lease is valid; reentrancy by owner id with a
//! hold count kept on the server; `try_lock` never waits; `lock` waits up to
//! its bound and is cancel safe; only the holder releases; leases are
//! extended by one watchdog per client; a lost signal fires no later than the
//! moment another owner could acquire; fencing tokens grow per name; a
//! crashed holder's lock comes free after its ttl or session; names are 1 to
//! 255 bytes of UTF-8; errors are typed [`LockError`]s; waiters are served
//! in order; attempts are idempotent. Each point in full: [`contract`].
#![warn(missing_docs)]

mod acquire;
mod admission;
mod backend;
mod backoff;
mod client;
pub mod contract;
mod detach;
mod error;
mod forward;
mod guard;
mod held;
mod kinds;
mod lease;
mod line;
pub mod memory;
mod name;
mod options;
pub mod raw;
mod recipes;
mod server_clock;
pub mod telemetry;
mod undo;
mod url;
mod watchdog;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use backend::{Capabilities, LeaseKind, LockInfo, LockKind};
pub use client::LockClient;
pub use error::{BoxError, LockError, LostReason, Result, one_line};
pub use guard::{LockGuard, Unlocked};
pub use held::LostSignal;
pub use kinds::{MAX_PERMITS, RwLock, Semaphore};
pub use options::{DEFAULT_TTL, DEFAULT_WAIT, LockOptions, MAX_TTL, MAX_WAIT, MIN_TTL};
pub use recipes::{
    DEFAULT_OBSERVE_INTERVAL, Election, JobContext, JobLimits, Leader, Leadership, MultiGuard, PUSHED_RECHECK,
};

/// Re-exported so backends and the testkit macro name the same versions.
pub use async_trait::async_trait;
