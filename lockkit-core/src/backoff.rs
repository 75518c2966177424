//! Waiting for a lock without a fixed polling interval: exponential backoff
//! with jitter, bounded by the holder's remaining lease and the caller's
//! deadline, and woken early when the backend hears of a release.
//!
//! A backend whose server can push release notifications (Postgres
//! `LISTEN/NOTIFY`, Redis pub/sub) passes a [`Notify`] that it signals on
//! each release; one without (MySQL, SQLite) still gets short waits when the
//! holder's lease is about to end and spreads its retries out otherwise.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lockkit_core::LockError> {
//! use std::time::Duration;
//! use lockkit_core::raw::{Backoff, acquire_with_backoff};
//! use lockkit_core::raw::{Lease, TryAcquire};
//!
//! let mut tries = 0;
//! let lease = acquire_with_backoff(Some(Duration::from_secs(5)), Backoff::default(), None, || {
//!     tries += 1;
//!     let busy = tries < 3;
//!     async move {
//!         Ok(if busy {
//!             TryAcquire::Busy { retry_in: Some(Duration::from_millis(1)) }
//!         } else {
//!             TryAcquire::Acquired(Lease { token: 1, hold_count: 1, valid_until: None, lost: None, session_deadline: None })
//!         })
//!     }
//! })
//! .await?;
//! assert_eq!(lease.map(|l| l.token), Some(1));
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::LockError;
use crate::backend::{Lease, TryAcquire};

/// A holder's lease is reported in whole server-clock units and the expiry
/// check runs on the server: retry this long after the reported end.
const EXPIRY_SLACK: Duration = Duration::from_millis(2);

/// Exponential backoff with "equal jitter": each delay is drawn from the
/// upper half of a window that doubles from `first` up to `cap`.
#[derive(Debug, Clone)]
pub struct Backoff {
    first: Duration,
    cap: Duration,
    window: Duration,
}

impl Backoff {
    /// Delays start around `first` and grow to at most `cap`.
    pub fn new(first: Duration, cap: Duration) -> Self {
        let first = first.max(Duration::from_micros(100));
        let cap = cap.max(first);
        Backoff {
            first,
            cap,
            window: first,
        }
    }

    /// The next delay: uniformly random in `[window/2, window]`; the window
    /// then doubles, up to the cap.
    pub fn next_delay(&mut self) -> Duration {
        let window = self.window;
        self.window = (self.window * 2).min(self.cap);
        let half = window / 2;
        let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
        half + Duration::from_nanos(rand::random_range(0..=nanos))
    }

    /// Starts over from the first delay (e.g. after a notification).
    pub fn reset(&mut self) {
        self.window = self.first;
    }

    /// The largest delay this backoff produces.
    pub fn cap(&self) -> Duration {
        self.cap
    }
}

impl Default for Backoff {
    /// 2 ms growing to 250 ms.
    fn default() -> Self {
        Backoff::new(Duration::from_millis(2), Duration::from_millis(250))
    }
}

/// The delay before the next attempt: the backoff's, cut short by the
/// holder's remaining lease (`retry_in`, plus a little slack) and by the
/// time left until `deadline`.
pub fn bounded_delay(
    backoff: &mut Backoff,
    retry_in: Option<Duration>,
    deadline: Option<Instant>,
    now: Instant,
) -> Duration {
    let mut delay = backoff.next_delay();
    if let Some(r) = retry_in {
        delay = delay.min(r + EXPIRY_SLACK);
    }
    if let Some(d) = deadline {
        delay = delay.min(d.saturating_duration_since(now));
    }
    delay
}

/// Runs `attempt` until it acquires, the wait runs out (`Ok(None)`; `None`
/// waits forever), or it fails with an error that is not retryable.
///
/// Between attempts it sleeps for [`bounded_delay`], or less if `wake` is
/// notified (it listens before each attempt, so a release between the
/// attempt and the sleep is not missed). Retryable errors (a database
/// restart, a deadlock) are retried the same way; if the wait runs out while
/// they last, the last one is returned instead of `Ok(None)`. At the
/// deadline one last attempt is made.
///
/// Cancel safe as far as the waiting goes; each `attempt` must be cancel
/// safe itself (see [`detach`](crate::raw::detach)).
pub async fn acquire_with_backoff<F, Fut>(
    wait: Option<Duration>,
    mut backoff: Backoff,
    wake: Option<&Notify>,
    mut attempt: F,
) -> Result<Option<Lease>, LockError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<TryAcquire, LockError>>,
{
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        // Listen before trying, so a release between the attempt and the
        // sleep is not missed.
        let mut notified = std::pin::pin!(wake.map(Notify::notified));
        if let Some(n) = notified.as_mut().as_pin_mut() {
            n.enable();
        }
        let (retry_in, error) = match attempt().await {
            Ok(TryAcquire::Acquired(lease)) => return Ok(Some(lease)),
            Ok(TryAcquire::Busy { retry_in }) => (retry_in, None),
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "lock attempt failed; retrying");
                (None, Some(e))
            }
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return match error {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        let delay = bounded_delay(&mut backoff, retry_in, deadline, now);
        let woken = async {
            match notified.as_mut().as_pin_mut() {
                Some(n) => n.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn delays_grow_to_the_cap_with_jitter() {
        let mut b = Backoff::new(Duration::from_millis(4), Duration::from_millis(64));
        let first = b.next_delay();
        assert!(first >= Duration::from_millis(2) && first <= Duration::from_millis(4));
        for _ in 0..20 {
            let d = b.next_delay();
            assert!(d <= Duration::from_millis(64));
        }
        let d = b.next_delay();
        assert!(
            d >= Duration::from_millis(32),
            "at the cap, delays stay in its upper half"
        );
        b.reset();
        assert!(b.next_delay() <= Duration::from_millis(4));
    }

    #[test]
    fn bounded_by_lease_and_deadline() {
        let now = Instant::now();
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let d = bounded_delay(&mut b, Some(Duration::from_millis(3)), None, now);
        assert_eq!(d, Duration::from_millis(3) + EXPIRY_SLACK);
        let d = bounded_delay(&mut b, None, Some(now + Duration::from_millis(7)), now);
        assert_eq!(d, Duration::from_millis(7));
    }

    fn busy() -> Result<TryAcquire, LockError> {
        Ok(TryAcquire::Busy { retry_in: None })
    }

    #[tokio::test]
    async fn times_out_after_a_last_attempt() {
        let tries = AtomicU32::new(0);
        let started = Instant::now();
        let r = acquire_with_backoff(Some(Duration::from_millis(50)), Backoff::default(), None, || {
            tries.fetch_add(1, Ordering::SeqCst);
            async { busy() }
        })
        .await
        .unwrap();
        assert!(r.is_none());
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert!(tries.load(Ordering::SeqCst) >= 2);
    }

    #[tokio::test]
    async fn a_notification_wakes_the_waiter() {
        let notify = Arc::new(Notify::new());
        let tries = Arc::new(AtomicU32::new(0));
        let (n, t) = (notify.clone(), tries.clone());
        let waiter = tokio::spawn(async move {
            let slow = Backoff::new(Duration::from_secs(3600), Duration::from_secs(3600));
            acquire_with_backoff(None, slow, Some(&n), || {
                let first = t.fetch_add(1, Ordering::SeqCst) == 0;
                async move {
                    if first {
                        busy()
                    } else {
                        Ok(TryAcquire::Acquired(Lease {
                            token: 9,
                            hold_count: 1,
                            valid_until: None,
                            lost: None,
                            session_deadline: None,
                        }))
                    }
                }
            })
            .await
        });
        while tries.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        notify.notify_waiters();
        let lease = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken by the notification, not the hour-long backoff")
            .unwrap()
            .unwrap();
        assert_eq!(lease.map(|l| l.token), Some(9));
    }

    #[tokio::test]
    async fn retryable_errors_are_retried_and_reported_at_the_deadline() {
        let r = acquire_with_backoff(Some(Duration::from_millis(30)), Backoff::default(), None, || async {
            Err(LockError::backend("test", "acquire", None, true, "connection reset"))
        })
        .await;
        assert!(matches!(r, Err(LockError::Backend { retryable: true, .. })));
        let r = acquire_with_backoff(None, Backoff::default(), None, || async {
            Err(LockError::config("x", "permanent"))
        })
        .await;
        assert!(matches!(r, Err(LockError::InvalidConfig { .. })));
    }
}
