//! [`LockGuard`] and [`LostSignal`], blocking.

use std::time::{Duration, Instant};

use lockkit_core::{LockError, LockKind, LostReason, Unlocked};

use super::runtime::{OnRuntime, blocking_methods, refuse_in_async, same_methods};

/// A held lock: the blocking [`LockGuard`](crate::LockGuard), whose methods
/// it has (see there), each `async fn` a blocking one.
///
/// Release it with [`unlock`](Self::unlock), which reports the outcome.
/// Dropping a guard releases the lock before the drop returns, waiting at
/// most 5 s for the backend (past that the release goes on in the
/// background; if it cannot be done, the lease runs out after its ttl).
/// Dropped inside an async runtime, it releases on a thread of its own
/// instead, without blocking and without panicking.
///
/// While the guard lives the client's runtime keeps extending the lease
/// (unless auto-extend was switched off), whatever the calling thread
/// does. Guarded work should look at [`is_lost`](Self::is_lost) (or wait
/// with [`wait_lost`](Self::wait_lost)) and stop once it says so.
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// use std::time::Duration;
///
/// let locks = lockkit::blocking::connect("memory://")?;
/// let options = locks.options().ttl(Duration::from_millis(100)).auto_extend(false);
/// let guard = locks.lock_with("report", &options)?;
/// assert!(guard.wait_lost(Duration::from_secs(10)), "not extended: lost after its ttl");
/// assert!(guard.lost_reason().is_some());
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[must_use = "dropping a guard releases the lock"]
pub struct LockGuard(pub(super) OnRuntime<crate::LockGuard>);

impl LockGuard {
    same_methods! {
        /// The lock name.
        fn name(&self) -> &str;

        /// The owner holding the lock.
        fn owner(&self) -> &str;

        /// What kind of hold this is: a lock's, a semaphore's permit, a read
        /// or a write hold.
        fn kind(&self) -> LockKind;

        /// The fencing token: pass it to the storage you write to, and have
        /// that storage refuse writes with a token lower than the highest it
        /// has seen. Unchanged on re-entry.
        fn fencing_token(&self) -> u64;

        /// The owner's hold count right after this acquisition (1 unless
        /// re-entered).
        fn hold_count(&self) -> u32;

        /// Until when the lock is certainly held, by this process's
        /// monotonic clock (see [`crate::LockGuard::valid_until`]).
        fn valid_until(&self) -> Option<Instant>;

        /// Whether the holder can no longer be sure it holds the lock.
        fn is_lost(&self) -> bool;

        /// Why the lock was lost, once it is.
        fn lost_reason(&self) -> Option<LostReason>;
    }

    /// Waits up to `timeout` for the lock to be lost (the blocking form of
    /// [`crate::LockGuard::lost`]): `true` once it is, `false` if it was
    /// still held when the time ran out. See [`LostSignal::wait`].
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.lost_signal().wait(timeout)
    }

    /// A cloneable handle on the lost signal, for threads doing guarded
    /// work.
    pub fn lost_signal(&self) -> LostSignal {
        self.0.with(self.0.get().lost_signal())
    }

    blocking_methods! {
        /// Extends the lease to at least `ttl` from now (never shortens it),
        /// and makes `ttl` the lease the watchdog keeps renewing.
        ///
        /// Fails with [`LockError::Lost`] if the backend no longer has this
        /// owner as the holder (the lost signal fires too).
        fn extend(&self, ttl: Duration) -> ();
    }

    /// Releases this hold (decrements the owner's hold count; frees the
    /// name at zero) and reports what happened.
    ///
    /// Fails with [`LockError::NotHeld`] if the lock had already expired or
    /// been taken over — nothing of the new holder's is touched. Inside an
    /// async runtime it fails with [`LockError::InvalidConfig`], and the
    /// guard is released as a dropped one is.
    pub fn unlock(mut self) -> Result<Unlocked, LockError> {
        refuse_in_async()?;
        let guard = self.take();
        self.0.runtime().block_on(guard.unlock())
    }

    /// Turns a write hold into a read hold without letting go (see
    /// [`crate::LockGuard::downgrade`]). Fails with [`LockError::Conflict`]
    /// (the guard released as a dropped one is) unless this is a write
    /// hold.
    pub fn downgrade(mut self) -> Result<LockGuard, LockError> {
        refuse_in_async()?;
        let guard = self.take();
        let read = self.0.runtime().block_on(guard.downgrade())?;
        Ok(self.0.with(read))
    }

    /// Gives the hold up without releasing it: the watchdog stops extending
    /// it and the backend frees the name when the lease ends (see
    /// [`crate::LockGuard::abandon`]).
    pub fn abandon(mut self) {
        self.take().abandon();
    }

    fn take(&mut self) -> crate::LockGuard {
        self.0.take().expect("a live guard has its async guard")
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(guard) = self.0.take() {
            self.0.runtime().release(guard);
        }
    }
}

/// A cloneable handle on a guard's lost signal, for the threads doing the
/// guarded work: the blocking [`LostSignal`](crate::LostSignal).
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// use std::time::Duration;
///
/// let locks = lockkit::blocking::connect("memory://")?;
/// let guard = locks.lock("batch")?;
/// let lost = guard.lost_signal();
/// let worker = std::thread::spawn(move || {
///     for _step in 0..3 {
///         if lost.is_lost() {
///             return false; // stop: another owner may hold the lock now
///         }
///         // … one step of the guarded work …
///     }
///     true
/// });
/// assert!(worker.join().unwrap());
/// assert!(!guard.wait_lost(Duration::ZERO));
/// guard.unlock()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct LostSignal(pub(super) OnRuntime<crate::LostSignal>);

impl LostSignal {
    same_methods! {
        /// Whether the lock is lost.
        fn is_lost(&self) -> bool;

        /// Why it was lost, once it is.
        fn reason(&self) -> Option<LostReason>;
    }

    /// Waits up to `timeout` for the lock to be lost: `true` once it is,
    /// `false` if it was still held when the time ran out (a lock released
    /// normally is never lost).
    ///
    /// Unlike the other blocking calls, this one also works inside an
    /// async runtime — by blocking that runtime's thread; there, prefer
    /// the async signal's [`wait`](crate::LostSignal::wait)
    /// ([`as_async`](Self::as_async)).
    pub fn wait(&self, timeout: Duration) -> bool {
        self.0.runtime().wait_lost(vec![self.0.get().clone()], timeout) || self.is_lost()
    }

    /// The async signal.
    pub fn as_async(&self) -> &crate::LostSignal {
        self.0.get()
    }
}
