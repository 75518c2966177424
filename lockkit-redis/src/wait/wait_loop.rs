//! The wait loop of an acquisition ([`wait_loop`]) and what one of its
//! attempts reports ([`Attempt`]) or is told ([`Turn`]).

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use lockkit_core::{LockError, LockKind};
use tokio::time::Instant;

use super::state::fallback;
use super::subscription::{Baton, Subscription};
use super::waiters::Waiters;
use crate::turn::{Turn, TurnOf};

/// What one attempt of a waiting acquisition found.
pub(crate) enum Attempt<T> {
    /// Acquired.
    Done(T),
    /// Held by another owner; free at the latest after `retry_in`. Or free,
    /// but the turn of the waiting client `turn_of` (a fair queue): tried
    /// again after the fallback delay unless a message comes first, and
    /// that client is then dropped from the queue if it still has not
    /// taken it.
    Busy {
        /// When to try again without a message.
        retry_in: Duration,
        /// Free, but this client's turn.
        turn_of: Option<TurnOf>,
    },
    /// Redlock split vote: try again after `after`, messages or not.
    Backoff {
        /// The random delay.
        after: Duration,
    },
}

/// The delay after the `failures`-th failed attempt in a row: exponential
/// from 20 ms to 1 s, with jitter.
fn error_backoff(failures: u32) -> Duration {
    let max_ms = (20u64 << failures.min(6)).min(1000);
    Duration::from_millis(rand::random_range(max_ms / 2..=max_ms))
}

/// Waits for `channel`'s lock (a hold of `kind`): subscribes (before the next attempt), then
/// tries `attempt` until it succeeds or `deadline` passes, sleeping after a
/// `Busy` until a release message or the holder's expiry. The attempt that
/// runs at or after the deadline is the last one.
///
/// A retryable error does not end the wait: the waiter backs off and tries
/// again (a server restart is ridden out); if the wait ends while the last
/// attempt failed, that error is returned instead of "not acquired". When
/// subscribing fails (no pub/sub permission, connection down) the waiter
/// still works, waking on the holder's expiry, and subscribes again before
/// its next attempt. Cancel safe as long as `attempt` is.
pub(crate) async fn wait_loop<T, F, Fut>(
    waiters: &Waiters,
    channel: &[u8],
    kind: LockKind,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>, LockError>
where
    F: FnMut(Turn) -> Fut,
    Fut: Future<Output = Result<Attempt<T>, LockError>>,
{
    // A read-write lock's writer is woken by its client's turns to write.
    let writer = kind == LockKind::Write;
    let mut sub: Option<Subscription> = None;
    let mut baton = Baton(None);
    let mut failures = 0u32;
    loop {
        if !sub.as_ref().is_some_and(Subscription::is_subscribed) {
            match waiters.subscribe(channel.to_vec(), writer).await {
                Ok(s) => sub = Some(s),
                Err(f) => {
                    waiters.subscribe_failed(&f);
                    // Without the server's messages, still hear this
                    // process's releases.
                    if sub.is_none() {
                        sub = Some(waiters.listen_locally(channel.to_vec(), writer));
                    }
                }
            }
        }
        let notify = sub.as_ref().map(|s| s.notify.clone());
        let mut notified = notify.as_ref().map(|n| Box::pin(n.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        let gate = match kind {
            LockKind::Mutex | LockKind::Permit { .. } | LockKind::Write => {
                sub.as_ref().and_then(Subscription::one_at_a_time)
            }
            _ => None,
        };
        let in_turn = match &gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        let turn = sub.as_mut().map(Subscription::turn).unwrap_or_default();
        let outcome = attempt(turn).await;
        let (wake_at, listen, last_error) = match outcome {
            Ok(Attempt::Done(t)) => {
                baton.disarm();
                drop(notified);
                if let Some(sub) = &mut sub {
                    sub.took();
                }
                return Ok(Some(t));
            }
            Ok(Attempt::Busy {
                retry_in,
                turn_of: None,
            }) => {
                failures = 0;
                (Instant::now() + retry_in, true, None)
            }
            Ok(Attempt::Busy {
                turn_of: Some(TurnOf { head, behind }),
                ..
            }) => {
                failures = 0;
                if let Some(sub) = &sub {
                    sub.set_stale(head);
                }
                // The next in line hears whether the head comes and drops
                // it if not; a client further back, told nothing more until
                // its own turn nears, looks again only once each client
                // ahead of it could have done the same.
                (Instant::now() + fallback() * (behind.min(15) + 1), true, None)
            }
            Ok(Attempt::Backoff { after }) => {
                failures = 0;
                (Instant::now() + after, false, None)
            }
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "attempt failed while waiting; backing off");
                failures += 1;
                // The baton stays armed: this waiter got no answer.
                (Instant::now() + error_backoff(failures), false, Some(e))
            }
            Err(e) => return Err(e),
        };
        // (Released only now: a grant's `took` sets where the client stands
        // before its next waiter reads it.)
        drop(in_turn);
        if last_error.is_none() {
            baton.disarm();
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return match last_error {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        let wake_at = deadline.map_or(wake_at, |d| d.min(wake_at));
        let sleep = pin!(tokio::time::sleep_until(wake_at));
        match notified.filter(|_| listen) {
            Some(n) => {
                tokio::select! {
                    _ = n => baton = Baton(sub.as_ref().map(|s| s.notify.clone())),
                    _ = sleep => {}
                }
            }
            None => sleep.await,
        }
    }
}
