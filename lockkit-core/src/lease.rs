//! Turning a server's remaining lease into a local validity deadline, and
//! the moving deadline of a session lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How much a lease is shortened locally to allow for clock-rate drift between
/// this process and the server: 1 % of the lease plus 2 ms (the Redlock
/// paper's allowance).
pub fn drift_allowance(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The instant until which a holder may trust a lease of `remaining` that the
/// server granted in answer to a request sent at `sent_at`.
///
/// Measuring from the moment the request was *sent* (not answered) and
/// subtracting [`drift_allowance`] makes the deadline fall no later than the
/// server's own expiry, so the lost signal fires before another owner can
/// acquire.
pub fn valid_until(sent_at: Instant, remaining: Duration) -> Instant {
    sent_at + remaining.saturating_sub(drift_allowance(remaining))
}

/// The validity deadline of a **session lease** (ZooKeeper): shared by every
/// lease of one session and moved forward by the backend each time the
/// server proves the session alive.
///
/// A server ends a session a session timeout after it last heard from the
/// client. A request sent at `sent` and answered proves the server heard
/// from the client at `sent` or later, so the session lives at least until
/// [`valid_until`]`(sent, session_timeout)`. The client library notices a
/// silent connection much sooner and fires the lost signal then — but only
/// while the process runs. A process that did not run (stopped, swapped out,
/// a stop-the-world pause) for longer than the session timeout may find, at
/// its first look after resuming, that nothing has told it yet. This
/// deadline makes that look answer "lost" at once: a guard's `is_lost()`
/// compares it with the clock, like a TTL lease's deadline.
#[derive(Clone, Debug)]
pub struct SessionDeadline {
    inner: Arc<DeadlineInner>,
}

#[derive(Debug)]
struct DeadlineInner {
    base: Instant,
    /// The deadline, in nanoseconds after `base`.
    nanos: AtomicU64,
    /// A deadline made by [`SessionDeadline::capped`]: the earlier of these
    /// two until the cap is lifted (`base` and `nanos` unused).
    capped: Option<Capped>,
}

#[derive(Debug)]
struct Capped {
    of: SessionDeadline,
    cap: SessionDeadline,
    lifted: AtomicBool,
}

impl SessionDeadline {
    /// A deadline at `until` (an instant before now counts as now: passed).
    pub fn new(until: Instant) -> Self {
        let base = Instant::now();
        SessionDeadline {
            inner: Arc::new(DeadlineInner {
                base,
                nanos: AtomicU64::new(nanos(until.saturating_duration_since(base))),
                capped: None,
            }),
        }
    }

    /// This deadline, but no later than `cap` until [`lift_cap`] is called
    /// on the result: a lease that rests on its session and, for a while,
    /// also on something shorter-lived (a ZooKeeper hold that its holder
    /// has not claimed yet rests on the session's liveness record too).
    /// Both keep moving; extending the result extends this deadline.
    ///
    /// [`lift_cap`]: SessionDeadline::lift_cap
    pub fn capped(&self, cap: SessionDeadline) -> SessionDeadline {
        SessionDeadline {
            inner: Arc::new(DeadlineInner {
                base: self.inner.base,
                nanos: AtomicU64::new(0),
                capped: Some(Capped {
                    of: self.clone(),
                    cap,
                    lifted: AtomicBool::new(false),
                }),
            }),
        }
    }

    /// Lifts the cap of a deadline made by [`capped`]: from now on it is
    /// the deadline it was made from. Nothing for any other deadline.
    ///
    /// [`capped`]: SessionDeadline::capped
    pub fn lift_cap(&self) {
        if let Some(c) = &self.inner.capped {
            c.lifted.store(true, Ordering::Release);
        }
    }

    /// Moves the deadline to `until` if that is later; never back.
    pub fn extend_to(&self, until: Instant) {
        if let Some(c) = &self.inner.capped {
            return c.of.extend_to(until);
        }
        let at = nanos(until.saturating_duration_since(self.inner.base));
        self.inner.nanos.fetch_max(at, Ordering::AcqRel);
    }

    /// The deadline now.
    pub fn get(&self) -> Instant {
        if let Some(c) = &self.inner.capped {
            let of = c.of.get();
            return match c.lifted.load(Ordering::Acquire) {
                true => of,
                false => of.min(c.cap.get()),
            };
        }
        self.inner.base + Duration::from_nanos(self.inner.nanos.load(Ordering::Acquire))
    }

    /// Whether the deadline has passed.
    pub fn passed(&self) -> bool {
        Instant::now() >= self.get()
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_before_server_expiry() {
        let t0 = Instant::now();
        let d = valid_until(t0, Duration::from_secs(30));
        assert!(d < t0 + Duration::from_secs(30));
        assert!(d > t0 + Duration::from_secs(29));
        assert_eq!(valid_until(t0, Duration::from_millis(1)), t0);
    }

    #[test]
    fn session_deadline_only_moves_forward() {
        let t0 = Instant::now();
        let d = SessionDeadline::new(t0 + Duration::from_secs(10));
        let shared = d.clone();
        d.extend_to(t0 + Duration::from_secs(5));
        assert_eq!(shared.get(), t0 + Duration::from_secs(10));
        d.extend_to(t0 + Duration::from_secs(20));
        assert_eq!(shared.get(), t0 + Duration::from_secs(20));
        assert!(!shared.passed());
        let past = SessionDeadline::new(t0.checked_sub(Duration::from_secs(1)).unwrap_or(t0));
        assert!(past.passed());
    }

    #[test]
    fn a_capped_deadline_is_the_earlier_until_lifted() {
        let t0 = Instant::now();
        let session = SessionDeadline::new(t0 + Duration::from_secs(10));
        let cap = SessionDeadline::new(t0 + Duration::from_secs(1));
        let capped = session.capped(cap.clone());
        assert_eq!(capped.get(), t0 + Duration::from_secs(1));
        cap.extend_to(t0 + Duration::from_secs(2));
        assert_eq!(capped.get(), t0 + Duration::from_secs(2), "the cap moves");
        cap.extend_to(t0 + Duration::from_secs(20));
        assert_eq!(capped.get(), t0 + Duration::from_secs(10), "never past the session");
        let capped = session.capped(SessionDeadline::new(t0));
        assert!(capped.passed());
        capped.lift_cap();
        assert!(!capped.passed());
        capped.extend_to(t0 + Duration::from_secs(30));
        assert_eq!(
            session.get(),
            t0 + Duration::from_secs(30),
            "extending extends the session's"
        );
        session.lift_cap();
        assert_eq!(
            session.get(),
            t0 + Duration::from_secs(30),
            "lifting an uncapped one does nothing"
        );
    }
}
