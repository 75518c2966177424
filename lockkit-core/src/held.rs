//! The state one client keeps for one hold: its validity, its watchdog
//! schedule and its lost signal. Shared by every guard of the hold (re-entry
//! within a client) and by the watchdog.

use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::backend::Hold;
use crate::error::LostReason;
use crate::lease::SessionDeadline;

/// Mutable part of a hold, guarded by a std mutex never held across an await.
#[derive(Debug)]
pub(crate) struct HeldState {
    pub valid_until: Option<Instant>,
    pub ttl: Duration,
    pub auto_extend: bool,
    /// Guards of this client alive for this hold.
    pub local_guards: usize,
    /// When the watchdog should extend next.
    pub next_renew: Instant,
    /// An extension of this hold is on its way.
    pub in_flight: bool,
}

/// One hold as seen by one client.
#[derive(Debug)]
pub(crate) struct HeldLock {
    pub backend: &'static str,
    pub hold: Hold,
    state: Mutex<HeldState>,
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
    /// A session lease's moving deadline (see [`SessionDeadline`]).
    session: Option<SessionDeadline>,
}

impl HeldLock {
    pub fn new(
        backend: &'static str,
        hold: Hold,
        state: HeldState,
        backend_lost: Option<&CancellationToken>,
        session: Option<SessionDeadline>,
    ) -> Arc<Self> {
        let lost = backend_lost.map_or_else(CancellationToken::new, CancellationToken::child_token);
        Arc::new(HeldLock {
            backend,
            hold,
            state: Mutex::new(state),
            lost,
            reason: OnceLock::new(),
            session,
        })
    }

    pub fn state(&self) -> MutexGuard<'_, HeldState> {
        // A poisoned lock only means another thread panicked while holding
        // it; the plain-data state is still usable.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The lease's deadline; for a session lease, the session's deadline
    /// as of now (it moves while the server proves the session alive).
    pub fn valid_until(&self) -> Option<Instant> {
        let ttl = self.state().valid_until;
        ttl.or_else(|| self.session.as_ref().map(SessionDeadline::get))
    }

    /// Lost if signalled, or if the validity deadline has passed even when
    /// the watchdog (or the backend's session task) has not run yet: a
    /// process that did not run past its lease knows at its first look.
    pub fn is_lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        if self.session.as_ref().is_some_and(SessionDeadline::passed) {
            self.fire_lost(LostReason::Session);
            return true;
        }
        self.state().valid_until.is_some_and(|v| Instant::now() >= v)
    }

    pub fn reason(&self) -> Option<LostReason> {
        if let Some(r) = self.reason.get() {
            return Some(*r);
        }
        if self.lost.is_cancelled() {
            return Some(LostReason::Session);
        }
        self.is_lost().then_some(LostReason::Expired)
    }

    pub fn fire_lost(&self, reason: LostReason) {
        if self.lost.is_cancelled() {
            return;
        }
        let _ = self.reason.set(reason);
        crate::telemetry::lost(self.backend, reason);
        tracing::warn!(
            backend = self.backend,
            lock = %self.hold.name,
            owner = %self.hold.owner,
            token = self.hold.token,
            %reason,
            "lock lost"
        );
        self.lost.cancel();
    }

    pub fn lost_token(&self) -> &CancellationToken {
        &self.lost
    }
}

/// A cloneable handle on a guard's lost signal, to hand to the tasks doing the
/// guarded work.
///
/// ```
/// # async fn demo(guard: lockkit_core::LockGuard) {
/// let lost = guard.lost_signal();
/// tokio::select! {
///     _ = lost.wait() => { /* stop: another owner may hold the lock now */ }
///     _ = async { /* the guarded work */ } => {}
/// }
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LostSignal {
    pub(crate) held: Arc<HeldLock>,
}

impl LostSignal {
    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.held.is_lost()
    }

    /// Why it was lost, once it is.
    pub fn reason(&self) -> Option<LostReason> {
        self.held.reason()
    }

    /// Resolves when the lock is lost; never, if it is released normally.
    pub async fn wait(&self) {
        wait_lost(&self.held).await
    }
}

/// Resolves when `held` is lost: on the signal, or at the validity deadline,
/// whichever comes first (so it never depends on the watchdog's timing).
pub(crate) async fn wait_lost(held: &HeldLock) {
    loop {
        // The deadline may have moved on (extended) since the last look.
        if held.is_lost() {
            return;
        }
        match held.valid_until() {
            Some(d) => {
                tokio::select! {
                    _ = held.lost.cancelled() => return,
                    _ = tokio::time::sleep_until(d.into()) => {}
                }
            }
            None => return held.lost.cancelled().await,
        }
    }
}
