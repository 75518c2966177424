//! The recipes, blocking: [`MultiGuard`] ([`LockClient::lock_all`]),
//! [`Election`] and [`Leadership`] ([`LockClient::election`]), and
//! [`LockClient::run_exclusive`].

use std::pin::Pin;
use std::time::{Duration, Instant};

use futures_util::{Stream, StreamExt};
use lockkit_core::{JobContext, JobLimits, Leader, LockError, LockOptions, LostReason};

use super::client::LockClient;
use super::guard::{LockGuard, LostSignal};
use super::runtime::{OnRuntime, blocking_methods, refuse_in_async, same_methods};

impl LockClient {
    blocking_methods! {
        /// Locks every name in `names`, all or nothing, within one wait
        /// bound, in byte order (see [`crate::LockClient::lock_all`]).
        fn lock_all(&self, names: &[&str]) -> MultiGuard;

        /// [`lock_all`](Self::lock_all) with `options` (their wait bounds
        /// the whole set).
        fn lock_all_with(&self, names: &[&str], options: &LockOptions) -> MultiGuard;

        /// Locks every name in `names` if none is held by another owner;
        /// never waits (see [`crate::LockClient::try_lock_all`]).
        fn try_lock_all(&self, names: &[&str]) -> Option<MultiGuard>;
    }

    /// The election for the role `name` (see [`crate::LockClient::election`]).
    pub fn election(&self, name: &str) -> Result<Election, LockError> {
        Ok(self.0.with(self.0.get().election(name)?))
    }

    /// Runs `job` on a thread of the client's runtime if the lock `name`
    /// is free now, keeping the name blocked between `at_least` and
    /// `at_most` from the start (see [`crate::LockClient::run_exclusive`]):
    /// the job's output, or `None` where it did not run. The job looks at
    /// [`JobContext::is_lost`] to know when to stop. A job that panics
    /// panics this call, after its lock is handled as for a job that ended.
    pub fn run_exclusive<T, F>(&self, name: &str, limits: JobLimits, job: F) -> Result<Option<T>, LockError>
    where
        F: FnOnce(JobContext) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.run_exclusive_with(name, limits, &self.options(), job)
    }

    /// [`run_exclusive`](Self::run_exclusive) with `options` (see
    /// [`crate::LockClient::run_exclusive_with`]).
    pub fn run_exclusive_with<T, F>(
        &self,
        name: &str,
        limits: JobLimits,
        options: &LockOptions,
        job: F,
    ) -> Result<Option<T>, LockError>
    where
        F: FnOnce(JobContext) -> T + Send + 'static,
        T: Send + 'static,
    {
        let run = self
            .0
            .get()
            .run_exclusive_with(name, limits, options, |context| async move {
                tokio::task::spawn_blocking(move || job(context)).await
            });
        match self.0.runtime().block_on(run)? {
            None => Ok(None),
            Some(Ok(output)) => Ok(Some(output)),
            Some(Err(joined)) => std::panic::resume_unwind(joined.into_panic()),
        }
    }
}

/// Several names held together: the blocking
/// [`MultiGuard`](crate::MultiGuard). Dropping it releases every member
/// before the drop returns (as a dropped [`LockGuard`] does).
#[derive(Debug)]
#[must_use = "dropping a multi-guard releases every lock in it"]
pub struct MultiGuard(pub(super) OnRuntime<crate::MultiGuard>);

impl MultiGuard {
    /// The names held, in the order they were taken (byte order).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.get().names()
    }

    same_methods! {
        /// The fencing token of member `name` (`None`: not in the set).
        fn token(&self, name: &str) -> Option<u64>;

        /// Whether any member is lost.
        fn is_lost(&self) -> bool;
    }

    /// The first lost member and why, once one is.
    pub fn lost_reason(&self) -> Option<(&str, LostReason)> {
        self.0.get().lost_reason()
    }

    /// Waits up to `timeout` for any member to be lost: `true` once one is.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let signals = self.0.get().guards().iter().map(|g| g.lost_signal()).collect();
        self.0.runtime().wait_lost(signals, timeout)
    }

    /// Releases every member; the first failure is returned (see
    /// [`crate::MultiGuard::unlock`]).
    pub fn unlock(mut self) -> Result<(), LockError> {
        refuse_in_async()?;
        let set = self.0.take().expect("a live multi-guard has its members");
        self.0.runtime().block_on(set.unlock())
    }

    /// The members' guards, to release one by one.
    pub fn into_guards(mut self) -> Vec<LockGuard> {
        let set = self.0.take().expect("a live multi-guard has its members");
        set.into_guards().into_iter().map(|g| self.0.with(g)).collect()
    }
}

impl Drop for MultiGuard {
    fn drop(&mut self) {
        if let Some(set) = self.0.take() {
            for guard in set.into_guards() {
                self.0.runtime().release(guard);
            }
        }
    }
}

/// An election among candidates for one role: the blocking
/// [`Election`](crate::Election).
///
/// ```
/// # fn main() -> Result<(), lockkit::LockError> {
/// let locks = lockkit::blocking::connect("memory://")?;
/// let election = locks.election("billing-singleton")?;
/// let leadership = election.campaign()?;
/// assert_eq!(election.leader()?.map(|l| l.epoch), Some(leadership.epoch()));
/// leadership.resign()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Election(pub(super) OnRuntime<crate::Election>);

impl Election {
    same_methods! {
        /// The role's name.
        fn name(&self) -> &str;
    }

    /// The same election, campaigning with `options` (see
    /// [`crate::Election::with_options`]).
    pub fn with_options(&self, options: LockOptions) -> Self {
        self.0.with(self.0.get().clone().with_options(options))
    }

    /// The same election, observing every `interval` (see
    /// [`crate::Election::with_observe_interval`]).
    pub fn with_observe_interval(&self, interval: Duration) -> Self {
        self.0.with(self.0.get().clone().with_observe_interval(interval))
    }

    blocking_methods! {
        /// Waits to become leader (see [`crate::Election::campaign`]).
        fn campaign(&self) -> Leadership;

        /// Becomes leader if nobody leads now; never waits.
        fn try_campaign(&self) -> Option<Leadership>;

        /// The current leader, if any.
        fn leader(&self) -> Option<Leader>;
    }

    /// The leader as it changes, as an iterator whose `next` blocks until
    /// the next change (see [`crate::Election::observe`]).
    pub fn observe(&self) -> Result<LeaderChanges, LockError> {
        let election = self.0.get();
        let changes = self.0.runtime().block_on(async {
            let changes: ChangeStream = Box::pin(election.observe().await);
            Ok(changes)
        })?;
        Ok(LeaderChanges(OnRuntime::new(
            Changes(changes),
            self.0.runtime().clone(),
        )))
    }
}

/// The leader changes of an [`Election::observe`]: each `next` blocks
/// until the next change.
#[derive(Debug)]
pub struct LeaderChanges(OnRuntime<Changes>);

/// The async stream of leader changes.
type ChangeStream = Pin<Box<dyn Stream<Item = Result<Option<Leader>, LockError>> + Send>>;

/// The async stream of an observer.
pub(super) struct Changes(ChangeStream);

impl std::fmt::Debug for Changes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LeaderChanges")
    }
}

impl Iterator for LeaderChanges {
    type Item = Result<Option<Leader>, LockError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Err(e) = refuse_in_async() {
            return Some(Err(e));
        }
        let runtime = self.0.runtime().clone();
        let changes = self.0.get_mut();
        runtime.block_on(async { Ok(changes.0.next().await) }).unwrap_or(None)
    }
}

/// Being the leader: the blocking [`Leadership`](crate::Leadership).
/// Dropping it resigns before the drop returns.
#[derive(Debug)]
#[must_use = "dropping a leadership resigns it"]
pub struct Leadership(pub(super) OnRuntime<crate::Leadership>);

impl Leadership {
    same_methods! {
        /// The role's name.
        fn name(&self) -> &str;

        /// The leader's owner id.
        fn owner(&self) -> &str;

        /// The epoch: the fencing token of this leadership.
        fn epoch(&self) -> u64;

        /// Until when this leadership is certainly valid.
        fn valid_until(&self) -> Option<Instant>;

        /// Whether the leadership is lost.
        fn is_lost(&self) -> bool;

        /// Why it was lost, once it is.
        fn lost_reason(&self) -> Option<LostReason>;
    }

    /// A cloneable handle on the lost signal, for the leader's threads.
    pub fn lost_signal(&self) -> LostSignal {
        self.0.with(self.0.get().lost_signal())
    }

    /// Waits up to `timeout` for the leadership to be lost: `true` once it
    /// is.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        self.lost_signal().wait(timeout)
    }

    /// Steps down: the next candidate in line becomes leader.
    pub fn resign(mut self) -> Result<(), LockError> {
        refuse_in_async()?;
        let leadership = self.0.take().expect("a live leadership");
        self.0.runtime().block_on(leadership.resign())
    }

    /// Stops renewing without stepping down, as a crashed leader does (see
    /// [`crate::Leadership::abandon`]).
    pub fn abandon(mut self) {
        if let Some(leadership) = self.0.take() {
            leadership.abandon();
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        if let Some(leadership) = self.0.take() {
            self.0.runtime().release(leadership.into_guard());
        }
    }
}
