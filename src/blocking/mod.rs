//! The lock API for programs without async (cargo feature `blocking`).
//!
//! [`LockClient`] has the methods of the async [`crate::LockClient`], and
//! its guards and handles those of theirs, with each `async fn` a plain
//! blocking one. Each client runs a small tokio runtime of its own (one
//! worker thread, `lockkit-blocking`), shared by its clones, guards and
//! handles: the watchdog keeps extending leases and lost signals fire
//! while the calling thread does its own work.
//!
//! ```
//! # fn main() -> Result<(), lockkit::LockError> {
//! use std::time::Duration;
//!
//! let locks = lockkit::blocking::connect("memory://")?; // or redis://, mysql://, zk://, sqlite://
//! let guard = locks.lock("order:42")?;                   // waits up to the default bound (30 s)
//! assert!(locks.with_new_owner().try_lock("order:42")?.is_none());
//! let token = guard.fencing_token();                     // storage should refuse stale tokens
//! assert!(token > 0);
//! // The guarded work, checking now and then that the lock is still held:
//! assert!(!guard.wait_lost(Duration::from_millis(10)));
//! guard.unlock()?;                                       // or drop it: that releases too
//! # Ok(()) }
//! ```
//!
//! Dropping a guard releases its lock before the drop returns (waiting at
//! most 5 s for the backend; past that the release goes on in the
//! background). A blocking call made inside an async runtime, where it
//! would stall the runtime's thread, fails with
//! [`LockError::InvalidConfig`] (part `blocking API`): use the async client
//! there ([`LockClient::as_async`]). Dropping blocking clients and guards
//! there is safe.

mod client;
mod guard;
mod kinds;
mod recipes;
mod runtime;

pub use client::LockClient;
pub use guard::{LockGuard, LostSignal};
pub use kinds::{RwLock, Semaphore};
pub use recipes::{Election, LeaderChanges, Leadership, MultiGuard};

use crate::LockError;

/// Connects to the backend a URL names, on a new runtime of the client's
/// own: the blocking [`connect`](crate::connect), with its URLs, defaults
/// and errors.
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// let locks = lockkit::blocking::connect("memory://?ttl=10s&wait=2s")?;
/// let guard = locks.lock("job:nightly-report")?;
/// guard.unlock()?;
/// # Ok(()) }
/// ```
pub fn connect(url: &str) -> Result<LockClient, LockError> {
    LockClient::start(|| crate::connect(url))
}

/// Connects to the URL in [`LOCKKIT_URL`](crate::URL_VAR): the blocking
/// [`connect_from_env`](crate::connect_from_env).
pub fn connect_from_env() -> Result<LockClient, LockError> {
    LockClient::start(crate::connect_from_env)
}
