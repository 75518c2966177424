//! The fair line's loop ([`SqlBackend::acquire_fair`]): through the
//! name's door in this process, a first attempt outside the line, a place
//! in it (and on Postgres on the name's wait list), then attempts in turn
//! until the name is this waiter's, the wait runs out or an attempt fails.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::time::Duration;

use lockkit_core::raw::{AcquireRequest, Backoff, Lease, TryAcquire, bounded_delay};
use lockkit_core::{LockError, LockKind};
use tokio::time::Instant;

use super::{Queued, line_key};
use crate::handle::SqlBackend;

/// The longest a fair waiter that is not first in line sleeps without being
/// woken (its place's renewal wakes it every third of the queue lease).
const IDLE: Duration = Duration::from_secs(3600);

/// Without a push from the server (MySQL, SQLite), how often the first
/// waiter of each process looks whether the line moved in another process
/// (at most `max_backoff`): it becomes the head when the waiter before it
/// takes the name, and nobody tells it. Looking this often costs one read
/// per process and waited name per look, and keeps a hand-off across
/// processes close to what a poll by the head would take. A look at a
/// semaphore or read-write lock reads the name without a lock first and
/// claims only when it may be granted (see `Inner::kind_look`): their
/// claim is a transaction that holds the name's row over several round
/// trips; a mutex's is one statement.
const LOOK: Duration = Duration::from_millis(10);

/// `future`, unless `deadline` comes first (`None`).
async fn until<F: Future>(deadline: Option<Instant>, future: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, future).await.ok(),
        None => Some(future.await),
    }
}

/// A waiter's place in line, and what it carries from one turn to the
/// next.
struct Turns {
    queued: Queued,
    deadline: Option<Instant>,
    /// Releases in other processes wake this process's waiters (Postgres).
    push: bool,
    backoff: Backoff,
    /// The last attempt's retryable failure: the outcome if the wait ends
    /// before another attempt.
    last_error: Option<LockError>,
    /// Woken only because the waiter before it in this process took the
    /// name: wait on as the first of this process, without a try.
    moved_up: bool,
    /// The last sleep was a look's ([`LOOK`]) and ran out: the next turn
    /// reads the name without a lock first.
    looking: bool,
}

impl Turns {
    /// How long to sleep before the next turn (a wake-up may come first):
    /// the head of the line backs off, bounded by the soonest end of a hold
    /// in the way (`retry_in`) and the deadline; the others wait for their
    /// turn, and without a push from the server the first waiter of this
    /// process looks every [`LOOK`] (at most `max_backoff`) whether the
    /// line moved in another process.
    fn delay(&mut self, head: bool, retry_in: Option<Duration>, now: Instant, max_backoff: Duration) -> Duration {
        self.looking = false;
        if head {
            return bounded_delay(&mut self.backoff, retry_in, self.deadline, now);
        }
        self.backoff.reset();
        self.looking = !self.push && self.queued.line.is_first();
        let idle = if self.looking { LOOK.min(max_backoff) } else { IDLE };
        self.deadline
            .map_or(idle, |d| d.saturating_duration_since(now).min(idle))
    }
}

impl SqlBackend {
    /// A fair `lock` ([the contract](lockkit_core::contract#fair-by-default)) of any kind: one attempt; if the
    /// name is busy, a place at the back of the name's line
    /// (`<table>_waiters`, under its [`line_key`]), then attempts that take
    /// the name only when this one heads the line (a reader: when no
    /// writer waits ahead of it). Only the head tries again on its backoff
    /// (bounded by the soonest end of a hold in the way); the others sleep
    /// until a release wakes the first waiter of this process (a local
    /// release, or on Postgres any release, through the listener), the
    /// waiter ahead of them in this process leaves or is served with room
    /// left for another (a permit, a read hold), or their place is renewed
    /// (every third of the queue lease: the line may have moved in another
    /// process, or a waiter ahead died). A waiter ahead served without room
    /// only makes the next one the first of this process, without a try.
    /// On MySQL and SQLite, which cannot push a release to another
    /// process, the first waiter of each process also looks every [`LOOK`].
    pub(crate) async fn acquire_fair(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let inner = &self.inner;
        let key = line_key(req.name, req.kind);
        let deadline = wait.map(|w| Instant::now() + w);
        let door = inner.waiters.door(&key);
        let Some(passing) = until(deadline, door.pass()).await else {
            return Ok(None);
        };
        // With waiters of this process in the name's line, a first attempt
        // outside the line cannot take it (they are ahead): straight into
        // the line — unless the owner holds the name, when it may be a
        // re-entry, which is taken at once (in line it would wait behind
        // waiters that wait for this owner's release).
        if (!inner.waiters.has_line(&key) || inner.waiters.is_holder(&key, req.owner))
            && let Some(lease) = self.attempt_before_line(req).await?
        {
            return Ok(Some(lease));
        }
        // Held to the end of the wait: the name's place on the wait list.
        #[cfg(feature = "postgres")]
        let listed = self.list_waiting(&key, deadline).await;
        #[cfg(feature = "postgres")]
        let push = listed.is_some();
        #[cfg(not(feature = "postgres"))]
        let push = false;
        let queued = self.join_line(req, &key).await?;
        drop(passing);
        // Joined behind waiters of this process: the name is theirs first,
        // and the first of them wakes it on leaving.
        let moved_up = !queued.line.is_first();
        let turns = Turns {
            queued,
            deadline,
            push,
            backoff: Backoff::new(Duration::from_millis(2), inner.config.max_backoff),
            last_error: None,
            moved_up,
            looking: false,
        };
        self.wait_in_line(req, &key, turns).await
    }

    /// Postgres: releases notify only names somebody has listed (see
    /// `waitlist.rs`): lists `key` before the first attempt in line, and
    /// waits (until `deadline`) for releasers to see it. `None` without a
    /// wait list.
    #[cfg(feature = "postgres")]
    async fn list_waiting(&self, key: &[u8], deadline: Option<Instant>) -> Option<super::waitlist::Joined> {
        let list = self.inner.wait_list.get()?;
        let (joined, confirmed) = list.join(key);
        let _ = until(deadline, confirmed).await;
        Some(joined)
    }

    /// The turns of a waiter in the line `key`: an attempt (unless it only
    /// moved up), then a sleep until a wake-up or its delay, until the
    /// name is its, the deadline passes or an attempt fails for good.
    async fn wait_in_line(
        &self,
        req: &AcquireRequest<'_>,
        key: &[u8],
        mut turns: Turns,
    ) -> Result<Option<Lease>, LockError> {
        loop {
            self.rejoin_if_gone(req, key, &mut turns.queued).await;
            // Listen before trying, so a wake-up during the attempt is kept.
            let notify = turns.queued.line.notify_arc();
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let looking = std::mem::take(&mut turns.looking) && req.kind != LockKind::Mutex;
            let (retry_in, head) = if std::mem::take(&mut turns.moved_up) {
                (None, false)
            } else if let Some(busy) = self.look(looking, req).await {
                turns.last_error = None;
                busy
            } else {
                match self.detached_attempt(req, true).await {
                    Ok((TryAcquire::Acquired(lease), room)) => {
                        turns.queued.served(room);
                        return Ok(Some(lease));
                    }
                    Ok((TryAcquire::Busy { retry_in }, head)) => {
                        turns.last_error = None;
                        (retry_in, head)
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "lock attempt failed; retrying");
                        turns.last_error = Some(e);
                        (None, true)
                    }
                    Err(e) => {
                        turns.queued.leave().await;
                        return Err(e);
                    }
                }
            };
            let now = Instant::now();
            if turns.deadline.is_some_and(|d| now >= d) {
                turns.queued.leave().await;
                return turns.last_error.map_or(Ok(None), Err);
            }
            let delay = turns.delay(head, retry_in, now, self.inner.config.max_backoff);
            tokio::select! {
                _ = notified => {
                    turns.moved_up = turns.queued.line.take_moved_up();
                    turns.looking = false;
                }
                _ = tokio::time::sleep(delay) => {
                    turns.queued.line.take_moved_up();
                }
            }
        }
    }

    /// A look without a lock (see [`LOOK`]) when `looking`: the name busy
    /// for `req` (`(retry_in, head)`), as its claim would find it; `None`
    /// when not looking, or when a claim is to decide.
    async fn look(&self, looking: bool, req: &AcquireRequest<'_>) -> Option<(Option<Duration>, bool)> {
        if looking { self.inner.kind_look(req).await } else { None }
    }

    /// The place's row went (its lease ran out while this task stalled):
    /// join again, at the back. A failure is only logged: the next renewal
    /// finds the row missing and asks again.
    async fn rejoin_if_gone(&self, req: &AcquireRequest<'_>, key: &[u8], queued: &mut Queued) {
        if !queued.place.rejoin.swap(false, Ordering::Relaxed) {
            return;
        }
        let inner = &self.inner;
        let live = inner.live.for_place(inner).await;
        match inner.join(req, key, live).await {
            Ok(id) => queued.line.move_to(id),
            Err(e) => tracing::debug!(error = %e, "lockkit could not rejoin the line; retrying"),
        }
    }
}
