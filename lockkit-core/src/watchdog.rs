//! The watchdog: one task per client that extends every auto-extended hold
//! at ttl/3 (in batches, through [`LockBackend::extend_many`]) and fires a
//! hold's lost signal when an extension fails for good or its validity
//! deadline passes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::backend::{ExtendOutcome, Hold, Lease, LockBackend};
use crate::held::{HeldLock, HeldState, LostReason};
use crate::telemetry;

/// How long before the next extension is due a hold may join a batch that
/// is going out anyway: half the renewal interval. Holds taken at scattered
/// times so fall into step, and one renewal period costs one batch.
fn batch_window(ttl: Duration) -> Duration {
    ttl / 6
}

/// How soon a failed extension is tried again.
fn retry_delay(ttl: Duration) -> Duration {
    (ttl / 10).clamp(Duration::from_millis(1), Duration::from_secs(1))
}

pub(crate) struct Watchdog {
    shared: Arc<Shared>,
}

struct Shared {
    backend: Arc<dyn LockBackend>,
    /// The backend's `extend_batch_max`: the largest part of a batch.
    batch_max: usize,
    holds: Mutex<HashMap<Hold, Arc<HeldLock>>>,
    /// When the task looks at the holds next (`None`: it waits to be
    /// woken). Written under the `holds` lock, so a new hold wakes the task
    /// only when it is due earlier — an acquisition then costs no wake-up of
    /// another thread.
    planned: Mutex<Option<Instant>>,
    wake: Notify,
    stop: CancellationToken,
    started: AtomicBool,
}

impl Shared {
    fn holds(&self) -> MutexGuard<'_, HashMap<Hold, Arc<HeldLock>>> {
        self.holds.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn planned(&self) -> MutexGuard<'_, Option<Instant>> {
        self.planned.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the task if `due` comes before the time it planned to look
    /// again. Call with the `holds` lock held.
    fn wake_for(&self, due: Instant) {
        let mut planned = self.planned();
        if planned.is_none_or(|p| due < p) {
            *planned = Some(due);
            drop(planned);
            self.wake.notify_one();
        }
    }
}

impl Watchdog {
    pub fn new(backend: Arc<dyn LockBackend>) -> Self {
        Watchdog {
            shared: Arc::new(Shared {
                batch_max: backend.capabilities().extend_batch_max.max(1),
                backend,
                holds: Mutex::new(HashMap::new()),
                planned: Mutex::new(None),
                wake: Notify::new(),
                stop: CancellationToken::new(),
                started: AtomicBool::new(false),
            }),
        }
    }

    /// Tracks a new guard of `hold`: joins the existing hold of this client
    /// (re-entry) or starts tracking a new one.
    pub fn register(
        &self,
        hold: Hold,
        lease: &Lease,
        ttl: Duration,
        auto_extend: bool,
        sent_at: Instant,
    ) -> Arc<HeldLock> {
        let renew_at = sent_at + ttl / 3;
        // A session lease (no deadline) lives as long as the session: nothing to renew.
        let auto_extend = auto_extend && lease.valid_until.is_some();
        let mut holds = self.shared.holds();
        let held = match holds.get(&hold) {
            Some(held) if !held.lost_token().is_cancelled() => {
                let held = held.clone();
                let mut st = held.state();
                st.local_guards += 1;
                st.valid_until = later(st.valid_until, lease.valid_until);
                st.ttl = st.ttl.max(ttl);
                st.auto_extend |= auto_extend;
                drop(st);
                held
            }
            _ => {
                let state = HeldState {
                    valid_until: lease.valid_until,
                    ttl,
                    auto_extend,
                    local_guards: 1,
                    next_renew: renew_at,
                    in_flight: false,
                };
                let kind = self.shared.backend.kind();
                let session = lease.session_deadline.clone();
                let held = HeldLock::new(kind, hold.clone(), state, lease.lost.as_ref(), session);
                holds.insert(hold, held.clone());
                held
            }
        };
        self.ensure_started();
        let due = due(&held.state());
        if let Some(due) = due {
            self.shared.wake_for(due);
        }
        drop(holds);
        held
    }

    /// A guard of `held` is gone (unlocked, dropped or abandoned): stop
    /// tracking the hold when it was the client's last guard of it.
    pub fn unregister(&self, held: &Arc<HeldLock>) {
        let mut holds = self.shared.holds();
        let last = {
            let mut st = held.state();
            st.local_guards = st.local_guards.saturating_sub(1);
            st.local_guards == 0
        };
        if last && holds.get(&held.hold).is_some_and(|h| Arc::ptr_eq(h, held)) {
            holds.remove(&held.hold);
        }
    }

    /// Updates a hold after an explicit extension.
    pub fn extended(&self, held: &HeldLock, valid_until: Option<Instant>, ttl: Duration, sent_at: Instant) {
        let _holds = self.shared.holds();
        let mut st = held.state();
        st.valid_until = valid_until;
        st.ttl = ttl;
        st.next_renew = sent_at + ttl / 3;
        if let Some(due) = due(&st) {
            drop(st);
            self.shared.wake_for(due);
        }
    }

    /// Stops the task; holds are no longer extended.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    fn ensure_started(&self) {
        if self.shared.started.swap(true, Ordering::AcqRel) {
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(run(self.shared.clone()));
            }
            Err(_) => {
                self.shared.started.store(false, Ordering::Release);
                tracing::error!("lockkit watchdog needs a tokio runtime; holds will not be extended");
            }
        }
    }
}

/// When the task must next look at a hold: its renewal (if auto-extended)
/// or the end of its validity (to fire the lost signal), whichever is first.
fn due(st: &HeldState) -> Option<Instant> {
    let renew = (st.auto_extend && !st.in_flight).then_some(st.next_renew);
    match (renew, st.valid_until) {
        (Some(r), Some(v)) => Some(r.min(v)),
        (r, v) => r.or(v),
    }
}

fn later(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => None,
    }
}

async fn run(shared: Arc<Shared>) {
    loop {
        let (mut batch, next_wake) = plan(&shared);
        // Parts the backend extends in one go, sent concurrently.
        while batch.len() > shared.batch_max {
            let rest = batch.split_off(shared.batch_max);
            tokio::spawn(extend_batch(shared.clone(), batch));
            batch = rest;
        }
        if !batch.is_empty() {
            tokio::spawn(extend_batch(shared.clone(), batch));
        }
        let sleep = async {
            match next_wake {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shared.stop.cancelled() => return,
            _ = shared.wake.notified() => {}
            _ = sleep => {}
        }
    }
}

/// One pass over the holds: fires the lost signal of expired ones, picks the
/// ones due for extension, and finds when to look again.
fn plan(shared: &Shared) -> (Vec<(Hold, Duration)>, Option<Instant>) {
    let now = Instant::now();
    let mut batch = Vec::new();
    let mut next_wake: Option<Instant> = None;
    let mut wake_at = |t: Instant| next_wake = Some(next_wake.map_or(t, |n| n.min(t)));
    let mut holds = shared.holds();
    holds.retain(|hold, held| {
        if held.lost_token().is_cancelled() {
            return false;
        }
        let mut st = held.state();
        if let Some(valid_until) = st.valid_until {
            if now >= valid_until {
                drop(st);
                held.fire_lost(LostReason::Expired);
                return false;
            }
            wake_at(valid_until);
        }
        if st.auto_extend && !st.in_flight {
            if st.next_renew <= now + batch_window(st.ttl) {
                st.in_flight = true;
                batch.push((hold.clone(), st.ttl));
            } else {
                wake_at(st.next_renew);
            }
        }
        true
    });
    *shared.planned() = next_wake;
    drop(holds);
    (batch, next_wake)
}

async fn extend_batch(shared: Arc<Shared>, batch: Vec<(Hold, Duration)>) {
    let sent_at = Instant::now();
    let mut results = shared.backend.extend_many(&batch).await;
    results.truncate(batch.len());
    tracing::debug!(
        backend = shared.backend.kind(),
        holds = batch.len(),
        "watchdog extended"
    );
    let now = Instant::now();
    let kind = shared.backend.kind();
    let mut holds = shared.holds();
    let mut results = results.into_iter();
    for (hold, ttl) in &batch {
        let result = results.next();
        let Some(held) = holds.get(hold).cloned() else {
            continue; // released meanwhile
        };
        let mut st = held.state();
        st.in_flight = false;
        match result {
            Some(Ok(ExtendOutcome::Extended { valid_until })) => {
                telemetry::extended(kind, 1);
                st.valid_until = valid_until;
                st.next_renew = sent_at + *ttl / 3;
            }
            Some(Ok(ExtendOutcome::NotHeld)) => {
                drop(st);
                held.fire_lost(LostReason::NotHeld);
                holds.remove(hold);
            }
            Some(Err(error)) => {
                telemetry::extension_failed(kind);
                tracing::warn!(backend = shared.backend.kind(), lock = %hold.name, %error, "extension failed; retrying");
                st.next_renew = now + retry_delay(*ttl);
            }
            None => {
                tracing::warn!(backend = shared.backend.kind(), lock = %hold.name, "extend_many returned too few results; retrying");
                st.next_renew = now + retry_delay(*ttl);
            }
        }
    }
    drop(holds);
    shared.wake.notify_one();
}
