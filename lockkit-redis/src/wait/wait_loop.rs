//! The wait loop of an acquisition ([`wait_loop`]), what one of its
//! attempts reports ([`Attempt`]) or is told ([`Turn`]), and the steps of
//! one round of the loop on the waiter's state ([`Waiting`]): subscribe,
//! attempt, judge the outcome, sleep.

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{LockError, LockKind};
use tokio::sync::futures::Notified;
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
    let mut w = Waiting {
        waiters,
        channel,
        // A read-write lock's writer is woken by its client's turns to write.
        writer: kind == LockKind::Write,
        sub: None,
        baton: Baton(None),
        failures: 0,
    };
    loop {
        w.subscribe().await;
        // Armed before the attempt: a message that comes while it runs
        // still wakes the sleep after it.
        let notify = w.sub.as_ref().map(|s| s.notify.clone());
        let mut notified = notify.as_ref().map(|n| Box::pin(n.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        let gate = w.gate(kind);
        let in_turn = match &gate {
            Some(g) => Some(g.lock().await),
            None => None,
        };
        let turn = w.sub.as_mut().map(Subscription::turn).unwrap_or_default();
        let pause = match w.judge(attempt(turn).await)? {
            Judged::Done(t) => {
                w.baton.disarm();
                drop(notified);
                if let Some(sub) = &mut w.sub {
                    sub.took();
                }
                return Ok(Some(t));
            }
            Judged::Pause(pause) => pause,
        };
        // (Released only now: a grant's `took` sets where the client stands
        // before its next waiter reads it.)
        drop(in_turn);
        if pause.last_error.is_none() {
            w.baton.disarm();
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return match pause.last_error {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        let wake_at = deadline.map_or(pause.wake_at, |d| d.min(pause.wake_at));
        w.sleep(notified.filter(|_| pause.listen), wake_at).await;
    }
}

/// One waiter's state from one attempt of its wait loop to the next.
struct Waiting<'w> {
    waiters: &'w Waiters,
    channel: &'w [u8],
    /// Waits to write a read-write lock (woken by its client's turns to
    /// write).
    writer: bool,
    /// Its registration on the channel (`None` until the first one).
    sub: Option<Subscription>,
    /// Passes a wake-up this waiter did not use on to the next waiter.
    baton: Baton,
    /// Failed attempts in a row, for the back-off.
    failures: u32,
}

/// What an attempt that did not acquire leaves the loop to do.
struct Pause {
    /// When to try again without a message.
    wake_at: Instant,
    /// Whether a message wakes the waiter sooner (not after a split vote
    /// or an error, whose delay is meant to be waited out).
    listen: bool,
    /// The attempt's error, returned if the wait ends now.
    last_error: Option<LockError>,
}

/// What the wait loop makes of one attempt.
enum Judged<T> {
    /// Acquired.
    Done(T),
    /// Not yet: wait, then try again.
    Pause(Pause),
}

impl Waiting<'_> {
    /// Makes sure the channel is subscribed before the next attempt, so
    /// that a release between the attempt and the sleep is heard. Without
    /// the server's messages (subscribing failed), the waiter still hears
    /// this process's releases.
    async fn subscribe(&mut self) {
        if self.sub.as_ref().is_some_and(Subscription::is_subscribed) {
            return;
        }
        match self.waiters.subscribe(self.channel.to_vec(), self.writer).await {
            Ok(s) => self.sub = Some(s),
            Err(f) => {
                self.waiters.subscribe_failed(&f);
                if self.sub.is_none() {
                    self.sub = Some(self.waiters.listen_locally(self.channel.to_vec(), self.writer));
                }
            }
        }
    }

    /// The lock this client's waiters take turns on while they attempt,
    /// for the kinds whose line entry lets one waiter in at a time (see
    /// [`Subscription::one_at_a_time`]); readers go together.
    fn gate(&self, kind: LockKind) -> Option<Arc<tokio::sync::Mutex<()>>> {
        match kind {
            LockKind::Mutex | LockKind::Permit { .. } | LockKind::Write => {
                self.sub.as_ref().and_then(Subscription::one_at_a_time)
            }
            _ => None,
        }
    }

    /// What an attempt's outcome means for the wait: acquired, or when to
    /// try again and whether a message may come first; an error that is
    /// not retryable ends the wait.
    fn judge<T>(&mut self, outcome: Result<Attempt<T>, LockError>) -> Result<Judged<T>, LockError> {
        let pause = |wake_at, listen| {
            Judged::Pause(Pause {
                wake_at,
                listen,
                last_error: None,
            })
        };
        Ok(match outcome {
            Ok(Attempt::Done(t)) => Judged::Done(t),
            Ok(Attempt::Busy {
                retry_in,
                turn_of: None,
            }) => {
                self.failures = 0;
                pause(Instant::now() + retry_in, true)
            }
            Ok(Attempt::Busy {
                turn_of: Some(TurnOf { head, behind }),
                ..
            }) => {
                self.failures = 0;
                if let Some(sub) = &self.sub {
                    sub.set_stale(head);
                }
                // The next in line hears whether the head comes and drops
                // it if not; a client further back, told nothing more until
                // its own turn nears, looks again only once each client
                // ahead of it could have done the same.
                pause(Instant::now() + fallback() * (behind.min(15) + 1), true)
            }
            Ok(Attempt::Backoff { after }) => {
                self.failures = 0;
                pause(Instant::now() + after, false)
            }
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "attempt failed while waiting; backing off");
                self.failures += 1;
                // The baton stays armed: this waiter got no answer.
                Judged::Pause(Pause {
                    wake_at: Instant::now() + error_backoff(self.failures),
                    listen: false,
                    last_error: Some(e),
                })
            }
            Err(e) => return Err(e),
        })
    }

    /// Sleeps until `wake_at`, or until `notified` fires first; a waiter
    /// woken by a message carries the baton, so that a wake-up it does not
    /// use goes on to the next waiter.
    async fn sleep(&mut self, notified: Option<Pin<Box<Notified<'_>>>>, wake_at: Instant) {
        let sleep = pin!(tokio::time::sleep_until(wake_at));
        match notified {
            Some(n) => {
                tokio::select! {
                    _ = n => self.baton = Baton(self.sub.as_ref().map(|s| s.notify.clone())),
                    _ = sleep => {}
                }
            }
            None => sleep.await,
        }
    }
}
