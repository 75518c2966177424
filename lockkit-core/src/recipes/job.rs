//! Scheduled-job locks, as ShedLock has them:
//! [`LockClient::run_exclusive`] with [`JobLimits`].

use std::future::Future;
use std::time::{Duration, Instant};

use crate::backend::LeaseKind;
use crate::options::{MAX_TTL, MIN_TTL};
use crate::{LockClient, LockError, LockGuard, LockOptions, LostSignal};

/// How long a job's name stays blocked: at least `at_least` from the start
/// (a job fired on ten machines a little apart runs once even when it ends
/// fast) and at most `at_most` (a job that hangs, or whose process dies,
/// holds the name no longer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobLimits {
    /// The least time the name stays blocked from the job's start.
    pub at_least: Duration,
    /// The most time the name stays blocked from the job's start.
    pub at_most: Duration,
}

impl JobLimits {
    /// The limits `at_least` ≤ `at_most` (checked when a job runs).
    pub fn new(at_least: Duration, at_most: Duration) -> Self {
        JobLimits { at_least, at_most }
    }

    fn validate(&self) -> Result<(), LockError> {
        let bad = |reason: String| {
            Err(LockError::InvalidConfig {
                part: "job limits".to_owned(),
                reason,
            })
        };
        if self.at_most < MIN_TTL || self.at_most > MAX_TTL {
            return bad(format!(
                "at_most must be between {MIN_TTL:?} and {MAX_TTL:?}, not {:?}",
                self.at_most
            ));
        }
        if self.at_least > self.at_most {
            return bad(format!(
                "at_least ({:?}) must not exceed at_most ({:?})",
                self.at_least, self.at_most
            ));
        }
        Ok(())
    }
}

/// What a job run by [`LockClient::run_exclusive`] is given: its lock's
/// fencing token and the signal to stop.
#[derive(Debug, Clone)]
pub struct JobContext {
    name: String,
    token: u64,
    signal: LostSignal,
    deadline: Instant,
}

impl JobContext {
    /// The job's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token of the job's lock.
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The start plus `at_most`: when the name stops being the job's.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Whether the job should stop: its lock is lost, or `at_most` passed.
    pub fn is_lost(&self) -> bool {
        self.signal.is_lost() || Instant::now() >= self.deadline
    }

    /// Resolves when the job should stop (see [`is_lost`](Self::is_lost)).
    /// Cancel safe.
    pub async fn lost(&self) {
        tokio::select! {
            _ = self.signal.wait() => {}
            _ = tokio::time::sleep_until(self.deadline.into()) => {}
        }
    }
}

impl LockClient {
    /// Runs `job` only if the lock `name` is free now (never waits: a job
    /// fired on many machines runs where the lock was taken, the others
    /// get `Ok(None)` at once; so do callers of the owner that holds it —
    /// its hold is not re-entered), and keeps the name blocked between
    /// `at_least` and `at_most` from the start (see [`JobLimits`]).
    ///
    /// * While the job runs its lease is extended (every third of the
    ///   client's ttl, never past `at_most`); at `at_most` the extensions
    ///   stop, the lease runs out and [`JobContext::lost`] fires. On
    ///   ZooKeeper (session leases) the lock is released at `at_most`.
    /// * A job that ends before `at_least` leaves its lock to run out at
    ///   `at_least` (TTL leases: the lease is set to end then and left,
    ///   so the name stays blocked even if this process exits; the job's
    ///   lease is never longer than `at_least`, so it ends by then plus
    ///   the time the job took). With
    ///   session leases a session that ends frees the name, so this call
    ///   holds the lock until `at_least` and returns then.
    /// * A job that ends later releases the lock at once.
    ///
    /// Returns the job's output, or `None` where it did not run.
    pub async fn run_exclusive<F, Fut, T>(&self, name: &str, limits: JobLimits, job: F) -> Result<Option<T>, LockError>
    where
        F: FnOnce(JobContext) -> Fut,
        Fut: Future<Output = T>,
    {
        self.run_exclusive_with(name, limits, &self.options(), job).await
    }

    /// [`run_exclusive`](Self::run_exclusive) with `options` (their owner,
    /// and their ttl as the longest lease between extensions; the wait and
    /// auto-extend are the job lock's own).
    pub async fn run_exclusive_with<F, Fut, T>(
        &self,
        name: &str,
        limits: JobLimits,
        options: &LockOptions,
        job: F,
    ) -> Result<Option<T>, LockError>
    where
        F: FnOnce(JobContext) -> Fut,
        Fut: Future<Output = T>,
    {
        limits.validate()?;
        let started = Instant::now();
        let session = self.capabilities().leases == LeaseKind::Session;
        // A lease no longer than `at_least`: a job that ends early leaves
        // it to run out at `at_least` (an extension never shortens a lease),
        // not a whole ttl later.
        let mut ttl = options.ttl_value().min(limits.at_most);
        if !limits.at_least.is_zero() {
            ttl = ttl.min(limits.at_least.max(MIN_TTL));
        }
        let options = options.clone().ttl(ttl).auto_extend(false);
        let Some(guard) = self.try_lock_with(name, &options).await? else {
            return Ok(None);
        };
        if guard.hold_count() > 1 {
            // This owner holds the name already: a run of the job of its
            // own (another task, or an earlier run's `at_least`). A
            // re-entry is not a run of its own.
            release(guard).await;
            return Ok(None);
        }
        let deadline = started + limits.at_most;
        let context = JobContext {
            name: name.to_owned(),
            token: guard.fencing_token(),
            signal: guard.lost_signal(),
            deadline,
        };
        let job = job(context);
        tokio::pin!(job);
        // The lease is kept (extended, on TTL backends) beside the job, which
        // runs on while an extension is out.
        let ended = {
            let keep = keep_until(&guard, name, ttl, deadline, session);
            tokio::pin!(keep);
            tokio::select! {
                output = &mut job => Some(output),
                _ = &mut keep => None,
            }
        };
        let Some(output) = ended else {
            // `at_most` has passed (so has `at_least`): the name is let go
            // (session leases) or its lease ends by now (TTL leases), and
            // the job, told to stop, runs to its end.
            if session {
                release(guard).await;
            } else {
                guard.abandon();
            }
            return Ok(Some(job.await));
        };
        let until = started + limits.at_least;
        let rest = until.saturating_duration_since(Instant::now());
        if guard.is_lost() {
            guard.abandon();
        } else if rest.is_zero() {
            release(guard).await;
        } else if session {
            tokio::select! {
                _ = tokio::time::sleep_until(until.into()) => release(guard).await,
                _ = guard.lost() => guard.abandon(),
            }
        } else {
            if let Err(error) = guard.extend(rest.max(MIN_TTL)).await {
                tracing::warn!(lock = %name, %error, "job lock: could not keep the name blocked for at_least");
            }
            guard.abandon();
        }
        Ok(Some(output))
    }
}

/// Keeps a job's lock until `deadline` (`at_most`), then returns: on TTL
/// leases it extends the lease every third of `ttl`, never past the
/// deadline, while the lock stands; a session lease needs nothing.
async fn keep_until(guard: &LockGuard, name: &str, ttl: Duration, deadline: Instant, session: bool) {
    if !session {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            tokio::time::sleep((ttl / 3).min(left)).await;
            let left = deadline.saturating_duration_since(Instant::now());
            if left < MIN_TTL || guard.is_lost() {
                break;
            }
            if let Err(error) = guard.extend(ttl.min(left)).await {
                tracing::debug!(lock = %name, %error, "job lock: extension failed");
            }
        }
    }
    tokio::time::sleep_until(deadline.into()).await;
}

/// Releases a job's lock, logging a failure (the lease runs out then).
async fn release(guard: LockGuard) {
    let name = guard.name().to_owned();
    if let Err(error) = guard.unlock().await {
        tracing::debug!(lock = %name, %error, "job lock: release failed; the lease runs out");
    }
}
