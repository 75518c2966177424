//! Turning a server's remaining lease into a local validity deadline, and
//! the moving deadline of a session lease.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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
}

impl SessionDeadline {
    /// A deadline at `until` (an instant before now counts as now: passed).
    pub fn new(until: Instant) -> Self {
        let base = Instant::now();
        SessionDeadline {
            inner: Arc::new(DeadlineInner {
                base,
                nanos: AtomicU64::new(nanos(until.saturating_duration_since(base))),
            }),
        }
    }

    /// Moves the deadline to `until` if that is later; never back.
    pub fn extend_to(&self, until: Instant) {
        let at = nanos(until.saturating_duration_since(self.inner.base));
        self.inner.nanos.fetch_max(at, Ordering::AcqRel);
    }

    /// The deadline now.
    pub fn get(&self) -> Instant {
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
}
