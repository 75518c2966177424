//! [`LockClient`]: the blocking client.

use std::future::Future;

use lockkit_core::{Capabilities, LockError, LockInfo, LockOptions};

use super::guard::LockGuard;
use super::kinds::{RwLock, Semaphore};
use super::runtime::{OnRuntime, Runtime, blocking_methods, refuse_in_async, same_methods};

/// A handle on one lock backend, with an owner id and default options: the
/// blocking [`LockClient`](crate::LockClient), whose contract and methods
/// it has (see there), each `async fn` a blocking one.
///
/// Cheap to clone; clones share the backend's connections, the watchdog,
/// the owner id and the runtime. As with the async client, **clones share
/// the owner**: give each independent worker thread its own with
/// [`with_new_owner`](Self::with_new_owner).
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// use std::time::Duration;
///
/// let locks = lockkit::blocking::connect("memory://")?;
/// let options = locks.options().ttl(Duration::from_secs(10));
/// let guard = locks.lock_with("order:42", &options)?;
/// assert!(locks.with_new_owner().try_lock("order:42")?.is_none());
/// assert_eq!(locks.inspect("order:42")?.map(|info| info.token), Some(guard.fencing_token()));
/// drop(guard); // releases
/// assert!(locks.inspect("order:42")?.is_none());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LockClient(pub(super) OnRuntime<crate::LockClient>);

impl LockClient {
    /// A blocking client for `client`, on a new runtime.
    ///
    /// The backend's connections keep running where they were made: a
    /// client connected on another runtime works only while that runtime
    /// runs. [`connect`](super::connect) makes the connections on the
    /// blocking client's own runtime.
    pub fn new(client: crate::LockClient) -> Result<Self, LockError> {
        Ok(LockClient(OnRuntime::new(client, Runtime::start()?)))
    }

    /// A client that `connect` makes on a new runtime.
    pub(crate) fn start<F>(connect: impl FnOnce() -> F) -> Result<Self, LockError>
    where
        F: Future<Output = Result<crate::LockClient, LockError>>,
    {
        refuse_in_async()?;
        let runtime = Runtime::start()?;
        let client = runtime.block_on(connect())?;
        Ok(LockClient(OnRuntime::new(client, runtime)))
    }

    /// The async client (for async parts of a program). Its background
    /// work runs on this client's runtime while that lives.
    pub fn as_async(&self) -> &crate::LockClient {
        self.0.get()
    }

    /// A client sharing this one's backend, watchdog and runtime, with
    /// another owner id (see [`crate::LockClient::with_owner`]).
    pub fn with_owner(&self, owner: impl Into<String>) -> Result<Self, LockError> {
        Ok(self.0.with(self.0.get().with_owner(owner)?))
    }

    /// A client sharing this one's backend, watchdog and runtime, with a new
    /// random owner id: an independent contender for every lock.
    pub fn with_new_owner(&self) -> Self {
        self.0.with(self.0.get().with_new_owner())
    }

    same_methods! {
        /// This client's owner id.
        fn owner(&self) -> &str;

        /// The default options, to adjust for one call of
        /// [`lock_with`](Self::lock_with).
        fn options(&self) -> LockOptions;

        /// What the backend supports.
        fn capabilities(&self) -> Capabilities;
    }

    blocking_methods! {
        /// Acquires `name` with the default options, waiting up to the
        /// default wait bound (see [`crate::LockClient::lock`]).
        fn lock(&self, name: &str) -> LockGuard;

        /// Acquires `name` with `options` (start from
        /// [`options`](Self::options)). Fails with
        /// [`LockError::WaitTimeout`] when the wait bound runs out.
        fn lock_with(&self, name: &str, options: &LockOptions) -> LockGuard;

        /// Acquires `name` if no other owner holds it; never waits.
        /// `Ok(None)` when the name is held by another owner.
        fn try_lock(&self, name: &str) -> Option<LockGuard>;

        /// [`try_lock`](Self::try_lock) with `options` (the wait is ignored).
        fn try_lock_with(&self, name: &str, options: &LockOptions) -> Option<LockGuard>;

        /// Who holds `name`, if anybody.
        fn inspect(&self, name: &str) -> Option<LockInfo>;

        /// How many acquisitions wait for `name` behind its holder (see
        /// [`crate::LockClient::waiting`]).
        fn waiting(&self, name: &str) -> usize;

        /// Held names starting with `prefix`, in name order, at most `limit`
        /// (see [`crate::LockClient::list`]).
        fn list(&self, prefix: &str, limit: usize) -> Vec<LockInfo>;

        /// Removes the hold on `name` whoever holds it: the operator's
        /// override for a stuck lock (see
        /// [`crate::LockClient::force_release`]).
        fn force_release(&self, name: &str) -> Option<LockInfo>;
    }

    /// A semaphore of `permits` on `name` (see [`crate::Semaphore`]).
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore, LockError> {
        Ok(self.0.with(self.0.get().semaphore(name, permits)?))
    }

    /// A read-write lock on `name` (see [`crate::RwLock`]).
    pub fn rw_lock(&self, name: &str) -> Result<RwLock, LockError> {
        Ok(self.0.with(self.0.get().rw_lock(name)?))
    }
}
