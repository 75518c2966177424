//! [`LockGuard`]: proof of a held lock.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::acquire::{Granted, Shared};
use crate::backend::{ExtendOutcome, LockKind, ReleaseOutcome};
use crate::error::LockError;
use crate::error::LostReason;
use crate::held::{HeldLock, LostSignal, wait_lost};

/// What [`LockGuard::unlock`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlocked {
    /// Holds the owner still has on the name (re-entry); 0 when the name is
    /// now free.
    pub remaining_holds: u32,
}

impl Unlocked {
    /// Whether the name is free now.
    pub fn is_free(&self) -> bool {
        self.remaining_holds == 0
    }
}

/// A held lock.
///
/// Release it with [`unlock`](Self::unlock), which reports the outcome.
/// Dropping a guard releases the lock in the background (on the current
/// tokio runtime; with none left, the lease simply runs out after its ttl) —
/// it never panics and never blocks.
///
/// While the guard lives the client's watchdog extends the lease (unless
/// auto-extend was switched off). Guarded work should stop when
/// [`lost`](Self::lost) fires.
#[derive(Debug)]
#[must_use = "dropping a guard releases the lock"]
pub struct LockGuard {
    shared: Arc<Shared>,
    held: Arc<HeldLock>,
    hold_count: u32,
    /// The acquisition attempt whose share of the hold this guard releases.
    attempt: String,
    armed: bool,
    acquired_at: Instant,
}

impl LockGuard {
    pub(crate) fn new(shared: Arc<Shared>, granted: Granted) -> Self {
        let Granted {
            held,
            hold_count,
            attempt,
        } = granted;
        LockGuard {
            shared,
            held,
            hold_count,
            attempt,
            armed: true,
            acquired_at: Instant::now(),
        }
    }

    /// Stops extending this guard's hold and records its hold time.
    fn disarm(&mut self) {
        self.armed = false;
        self.shared.watchdog.unregister(&self.held);
        crate::telemetry::held(self.held.backend, self.acquired_at.elapsed());
    }

    /// The lock name.
    pub fn name(&self) -> &str {
        &self.held.hold.name
    }

    /// The owner holding the lock.
    pub fn owner(&self) -> &str {
        &self.held.hold.owner
    }

    /// What kind of hold this is: a lock's, a semaphore's permit, a read or
    /// a write hold.
    pub fn kind(&self) -> LockKind {
        self.held.hold.kind
    }

    /// The fencing token: pass it to the storage you write to, and have that
    /// storage refuse writes with a token lower than the highest it has seen.
    /// Unchanged on re-entry.
    pub fn fencing_token(&self) -> u64 {
        self.held.hold.token
    }

    /// The owner's hold count right after this acquisition (1 unless
    /// re-entered).
    pub fn hold_count(&self) -> u32 {
        self.hold_count
    }

    /// Until when the lock is certainly held, by this process's monotonic
    /// clock, as of the last extension; for a session lease (ZooKeeper),
    /// until when the session certainly lives, as of the last time the
    /// server proved it alive (the backend's heartbeat moves it forward).
    /// `None` only where a backend gives no deadline.
    pub fn valid_until(&self) -> Option<Instant> {
        self.held.valid_until()
    }

    /// Whether the holder can no longer be sure it holds the lock.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Why the lock was lost, once it is.
    pub fn lost_reason(&self) -> Option<LostReason> {
        self.held.reason()
    }

    /// Resolves when the lock is lost: an extension failed, the validity
    /// deadline passed, or the backend session was lost — no later than the
    /// moment another owner could acquire the lock. Never resolves for a
    /// lock that stays held.
    ///
    /// Cancel safe: dropping the future has no effect on the lock.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        wait_lost(&self.held)
    }

    /// A cloneable handle on the lost signal, for tasks doing guarded work.
    pub fn lost_signal(&self) -> LostSignal {
        LostSignal {
            held: self.held.clone(),
        }
    }

    /// Extends the lease to at least `ttl` from now (never shortens it), and
    /// makes `ttl` the lease the watchdog keeps renewing.
    ///
    /// Fails with [`LockError::Lost`] if the backend no longer has this
    /// owner as the holder (the lost signal fires too).
    pub async fn extend(&self, ttl: Duration) -> Result<(), LockError> {
        crate::options::LockOptions::new().ttl(ttl).validate()?;
        let backend = &self.shared.backend;
        let sent_at = Instant::now();
        let outcome = backend.extend(&self.held.hold, ttl).await?;
        match outcome {
            ExtendOutcome::Extended { valid_until } => {
                crate::telemetry::extended(backend.name(), 1);
                tracing::debug!(backend = backend.name(), lock = %self.name(), ?ttl, "extended");
                self.shared.watchdog.extended(&self.held, valid_until, ttl, sent_at);
                Ok(())
            }
            ExtendOutcome::NotHeld => {
                self.held.fire_lost(LostReason::NotHeld);
                Err(LockError::Lost {
                    backend: backend.name(),
                    name: self.name().to_owned(),
                    reason: LostReason::NotHeld,
                })
            }
        }
    }

    /// Releases this hold (decrements the owner's hold count; frees the name
    /// at zero) and reports what happened.
    ///
    /// Fails with [`LockError::NotHeld`] if the lock had already expired or
    /// been taken over — nothing of the new holder's is touched.
    ///
    /// Cancel safe: once called, the release completes in the background
    /// even if this future is dropped.
    pub async fn unlock(mut self) -> Result<Unlocked, LockError> {
        self.disarm();
        let backend = self.shared.backend.clone();
        let held = self.held.clone();
        let attempt = self.attempt.clone();
        let kind = backend.name();
        let name = held.hold.name.clone();
        let outcome = crate::detach::detach(
            kind,
            async move {
                let outcome = backend.release(&held.hold, &attempt).await;
                if let Ok(o) = &outcome {
                    others_lost_if_freed(&held, o);
                }
                outcome
            },
            move |outcome| async move {
                tracing::debug!(backend = kind, lock = %name, ?outcome, "released after unlock was cancelled");
            },
        )
        .await??;
        match outcome {
            ReleaseOutcome::Released { remaining } => {
                tracing::debug!(backend = kind, lock = %self.name(), token = self.fencing_token(), remaining, "released");
                Ok(Unlocked {
                    remaining_holds: remaining,
                })
            }
            ReleaseOutcome::NotHeld => {
                tracing::warn!(backend = kind, lock = %self.name(), token = self.fencing_token(), "release of a lock not held");
                Err(LockError::NotHeld {
                    backend: kind,
                    name: self.name().to_owned(),
                    owner: self.owner().to_owned(),
                })
            }
        }
    }

    /// Turns a write hold into a read hold without letting go: takes the
    /// owner's read hold (granted at once beside its own write hold), then
    /// releases this write share. Readers that waited come in; no writer
    /// gets between. Takes the client's default options for the read hold.
    ///
    /// Fails with [`LockError::Conflict`] (the guard unchanged, released
    /// as any dropped guard) unless this is a write hold.
    pub async fn downgrade(self) -> Result<LockGuard, LockError> {
        let backend = self.shared.backend.name();
        if self.kind() != LockKind::Write {
            return Err(LockError::Conflict {
                backend,
                name: self.name().to_owned(),
                reason: format!(
                    "a {} hold cannot be downgraded: only a write hold can",
                    self.kind().as_str()
                ),
            });
        }
        let options = self.shared.defaults.clone().owner(self.owner());
        let read = self
            .shared
            .acquire(self.owner(), self.name(), LockKind::Read, &options, true)
            .await?
            .map(|granted| LockGuard::new(self.shared.clone(), granted))
            .ok_or_else(|| LockError::Conflict {
                backend,
                name: self.name().to_owned(),
                reason: "the read hold was refused beside the owner's write hold (the write hold was lost)".to_owned(),
            })?;
        match self.unlock().await {
            Ok(_) => {}
            Err(error) => {
                tracing::warn!(backend, lock = %read.name(), %error, "downgrade: the write hold was gone already")
            }
        }
        Ok(read)
    }

    /// Gives the hold up without releasing it: the watchdog stops extending
    /// it and the backend frees the name when the lease ends (the ttl, or the
    /// session on ZooKeeper).
    ///
    /// This is what a crashed holder looks like to everybody else; it is also
    /// a way to keep a name blocked for one ttl ("at most once per ttl").
    pub fn abandon(mut self) {
        self.disarm();
        tracing::debug!(backend = self.shared.backend.name(), lock = %self.name(), "abandoned");
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.disarm();
        let backend = self.shared.backend.clone();
        let held = self.held.clone();
        let attempt = std::mem::take(&mut self.attempt);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move {
                    match backend.release(&held.hold, &attempt).await {
                        Ok(outcome) => {
                            others_lost_if_freed(&held, &outcome);
                            tracing::debug!(backend = backend.name(), lock = %held.hold.name, ?outcome, "released on drop")
                        }
                        Err(error) => tracing::warn!(backend = backend.name(), lock = %held.hold.name, %error, "release on drop failed; the lease will run out"),
                    }
                });
            }
            Err(_) => tracing::warn!(
                backend = backend.name(),
                lock = %held.hold.name,
                "guard dropped outside a tokio runtime; the lease will run out instead"
            ),
        }
    }
}

/// A release that freed the name while other guards of this client still
/// count on the same hold means their shares were lost on the way (a
/// Redlock node that lost its keys, a hold the quorum no longer has): they
/// are no longer protected from the moment the name is free, so their lost
/// signal fires now rather than at their next extension.
fn others_lost_if_freed(held: &HeldLock, outcome: &ReleaseOutcome) {
    if *outcome == (ReleaseOutcome::Released { remaining: 0 }) && held.state().local_guards > 0 {
        held.fire_lost(LostReason::NotHeld);
    }
}
