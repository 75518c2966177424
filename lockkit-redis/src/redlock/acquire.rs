//! Acquiring on Redlock: one attempt (detached, so a cancelled caller's
//! hold is released), its outcome as a waiting caller reads it, and the
//! wait for a busy name. The rounds of one attempt over the nodes are in
//! `rounds`.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::{AcquireRequest, Hold, Lease, LockBackend, TryAcquire, detach_acquisition, ttl_millis};

use crate::scripts::{Publish, Queueing};
use crate::turn::Turn;
use crate::wait::{Attempt, UNKNOWN_LEASE_RECHECK, wait_loop};

use super::nodes::{KIND, RedlockBackend};
use super::quorum::Outcome;
use super::rounds::AttemptOf;

/// How many times `try_lock` makes its attempt again after a split vote.
const TRY_SPLITS: u32 = 4;

impl RedlockBackend {
    /// [`LockBackend::try_acquire`]: no wait for a holder. Contenders that
    /// came at once may split the nodes so that none has a quorum, and
    /// all undo: nobody holds the name then, so each makes its attempt
    /// again after a short random delay (up to [`TRY_SPLITS`] times, a few
    /// ms in all), or none of them would get a free name.
    pub(super) async fn try_acquire_once(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        let mut splits = 0;
        let outcome = loop {
            match self.attempt(req, self.queueing(None, req.fair)).await? {
                Outcome::Busy { split: true, .. } if splits < TRY_SPLITS => {
                    splits += 1;
                    tokio::time::sleep(self.backoff(splits)).await;
                }
                outcome => break outcome,
            }
        };
        match outcome {
            Outcome::Acquired(lease) => Ok(TryAcquire::Acquired(lease)),
            Outcome::Busy { retry_in, .. } => Ok(TryAcquire::Busy { retry_in }),
            Outcome::Failed(e) => Err(self.failed("acquire", req.name, e)),
            Outcome::Conflict(reason) => Err(self.conflict(req.name, reason)),
        }
    }

    /// [`LockBackend::acquire`]: one attempt, then the wait loop. A
    /// retryable failure of the first attempt (no quorum answered in time)
    /// is ridden out within the wait, as the wait loop rides out later ones.
    pub(super) async fn acquire_waiting(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let splits = AtomicU32::new(0);
        let step = |outcome: Outcome| self.waiting_step(req.name, &splits, outcome);
        let first = self.attempt(req, self.queueing(None, req.fair)).await.and_then(step);
        let expired = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
        match first {
            Ok(Attempt::Done(lease)) => return Ok(Some(lease)),
            Err(e) if expired || !e.is_retryable() => return Err(e),
            Ok(_) if expired => return Ok(None),
            Ok(_) | Err(_) => {}
        }
        let channel = self.inner.keys.holds(req.name, req.kind);
        // Every node queues this client at the same place: the client's
        // (see `Turn::place`).
        wait_loop(&self.inner.waiters, &channel, req.kind, deadline, |turn| async move {
            step(self.attempt(req, self.queueing(Some(turn), req.fair)).await?)
        })
        .await
    }

    /// What an attempt's outcome on `name` tells a waiting caller: done,
    /// wait for news (or the lease), or back off; `splits` counts the
    /// split votes in a row, so that their back-off grows.
    fn waiting_step(&self, name: &str, splits: &AtomicU32, outcome: Outcome) -> Result<Attempt<Lease>, LockError> {
        if !matches!(outcome, Outcome::Busy { split: true, .. }) {
            splits.store(0, Ordering::Relaxed);
        }
        Ok(match outcome {
            Outcome::Acquired(lease) => Attempt::Done(lease),
            // Held by another owner: a release message, or the quorum's
            // expiry (plus a little jitter, so contenders spread out).
            // Free, but another client's turn.
            Outcome::Busy {
                retry_in,
                turn_of: Some(head),
                ..
            } => Attempt::Busy {
                retry_in: retry_in.unwrap_or(UNKNOWN_LEASE_RECHECK),
                turn_of: Some(head),
            },
            Outcome::Busy {
                retry_in: Some(r),
                split: false,
                turn_of: None,
            } => Attempt::Busy {
                retry_in: r + self.backoff(0),
                turn_of: None,
            },
            Outcome::Busy {
                retry_in: None,
                split: false,
                turn_of: None,
            } => Attempt::Busy {
                retry_in: UNKNOWN_LEASE_RECHECK,
                turn_of: None,
            },
            // Split vote: everybody backs off for a random while.
            Outcome::Busy { split: true, .. } => Attempt::Backoff {
                after: self.backoff(splits.fetch_add(1, Ordering::Relaxed) + 1),
            },
            Outcome::Failed(e) => return Err(self.failed("acquire", name, e)),
            Outcome::Conflict(reason) => return Err(self.conflict(name, reason)),
        })
    }

    /// As on a single server (see [`Queueing::new`]); a waiting client
    /// joins every node's queue at the same place, `since` (µs), so that
    /// the nodes' queues agree.
    pub(super) fn queueing(&self, turn: Option<Turn>, fair: bool) -> Queueing {
        Queueing::new(self.inner.waiters.waiter_id(), turn, fair, Publish::Classic, true)
    }

    /// One attempt, detached; a hold whose caller is gone is released.
    pub(super) async fn attempt(&self, req: &AcquireRequest<'_>, queueing: Queueing) -> Result<Outcome, LockError> {
        let ttl_ms = ttl_millis(req.ttl);
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let inner = self.inner.clone();
        let releaser = (self.clone(), attempt.clone());
        let kind = req.kind;
        let work = async move {
            let of = AttemptOf {
                name: &name,
                owner: &owner,
                attempt: &attempt,
                ttl_ms,
                queueing: &queueing,
                kind,
            };
            inner.attempt(&of).await
        };
        let token_of = |outcome: &Outcome| match outcome {
            Outcome::Acquired(lease) => Some(lease.token),
            _ => None,
        };
        let release = move |hold: Hold| async move {
            let (backend, attempt) = releaser;
            backend.release(&hold, &attempt).await
        };
        detach_acquisition(KIND, req, work, token_of, release).await
    }
}
