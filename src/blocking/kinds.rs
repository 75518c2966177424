//! [`Semaphore`] and [`RwLock`], blocking.

use lockkit_core::{LockError, LockInfo, LockOptions};

use super::guard::LockGuard;
use super::runtime::{OnRuntime, blocking_methods, same_methods};

/// A semaphore of `permits` on one name: the blocking
/// [`Semaphore`](crate::Semaphore). Made by
/// [`LockClient::semaphore`](super::LockClient::semaphore).
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// let locks = lockkit::blocking::connect("memory://")?;
/// let slots = locks.semaphore("render-farm", 2)?;
/// let a = slots.acquire()?;
/// let b = slots.acquire()?;
/// assert!(slots.try_acquire()?.is_none(), "both permits are out");
/// assert_ne!(a.fencing_token(), b.fencing_token());
/// a.unlock()?;
/// assert!(slots.try_acquire()?.is_some());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore(pub(super) OnRuntime<crate::Semaphore>);

impl Semaphore {
    same_methods! {
        /// The semaphore's name.
        fn name(&self) -> &str;

        /// How many permits it has.
        fn permits(&self) -> u32;
    }

    blocking_methods! {
        /// Takes a permit, waiting up to the client's default wait bound.
        fn acquire(&self) -> LockGuard;

        /// Takes a permit with `options` (start from
        /// [`LockClient::options`](super::LockClient::options));
        /// [`LockError::WaitTimeout`] when the wait runs out.
        fn acquire_with(&self, options: &LockOptions) -> LockGuard;

        /// Takes a permit if one is free and nobody waits; never waits.
        fn try_acquire(&self) -> Option<LockGuard>;

        /// [`try_acquire`](Self::try_acquire) with `options` (the wait is
        /// ignored).
        fn try_acquire_with(&self, options: &LockOptions) -> Option<LockGuard>;

        /// How many acquisitions wait for a permit.
        fn waiting(&self) -> usize;

        /// The permits held now, in the order they were granted.
        fn holders(&self) -> Vec<LockInfo>;
    }
}

/// A read-write lock on one name: the blocking [`RwLock`](crate::RwLock).
/// Made by [`LockClient::rw_lock`](super::LockClient::rw_lock).
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// let locks = lockkit::blocking::connect("memory://")?;
/// let config = locks.rw_lock("config")?;
/// let other = locks.with_new_owner().rw_lock("config")?;
/// let write = config.write()?;
/// assert!(other.try_read()?.is_none(), "no reader beside a writer");
/// let read = write.downgrade()?;
/// let shared = other.try_read()?.expect("readers share");
/// assert_eq!(read.fencing_token(), shared.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock(pub(super) OnRuntime<crate::RwLock>);

impl RwLock {
    same_methods! {
        /// The lock's name.
        fn name(&self) -> &str;
    }

    blocking_methods! {
        /// Takes a read hold, waiting up to the client's default wait bound.
        fn read(&self) -> LockGuard;

        /// Takes a read hold with `options`.
        fn read_with(&self, options: &LockOptions) -> LockGuard;

        /// Takes a read hold unless a writer holds the lock or waits for it;
        /// never waits.
        fn try_read(&self) -> Option<LockGuard>;

        /// [`try_read`](Self::try_read) with `options` (the wait is ignored).
        fn try_read_with(&self, options: &LockOptions) -> Option<LockGuard>;

        /// Takes the write hold, waiting up to the client's default wait
        /// bound.
        fn write(&self) -> LockGuard;

        /// Takes the write hold with `options`.
        fn write_with(&self, options: &LockOptions) -> LockGuard;

        /// Takes the write hold if nobody holds the lock (or waits for it);
        /// never waits.
        fn try_write(&self) -> Option<LockGuard>;

        /// [`try_write`](Self::try_write) with `options` (the wait is
        /// ignored).
        fn try_write_with(&self, options: &LockOptions) -> Option<LockGuard>;

        /// How many acquisitions (readers and writers) wait for the lock.
        fn waiting(&self) -> usize;

        /// The read holds now, one per owner, in the order granted.
        fn readers(&self) -> Vec<LockInfo>;

        /// The write hold, if there is one.
        fn writer(&self) -> Option<LockInfo>;
    }
}
