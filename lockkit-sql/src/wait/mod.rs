//! Waiting for a lock: the fair line's loop (`acquire_fair`) and a
//! waiter's place in it; this process's registry of waiters
//! (`listener.rs`), the Postgres `LISTEN` connection that feeds it
//! (`pg_listener.rs`), the Postgres wait lists (`waitlist.rs`), and the
//! renewal of places in the line (`queue.rs`).
//!
//! # The fair line
//!
//! A fair acquisition that finds the name busy joins the name's line in
//! `<table>_waiters` (idempotent by its attempt id), marking the name's row
//! `queued` in the same transaction (a free row if there is none), and from
//! then on claims with [`Statements::claim_fair`]: it takes a free or
//! expired name only as the oldest live waiter, and the claim that gives it
//! the name deletes its row (Postgres: a CTE of the same statement; MySQL: a
//! statement of the same transaction; SQLite: a trigger). A release of a
//! marked row leaves the row (free, expired, no owner) instead of deleting
//! it, and the sweeper spares it while a live waiter is in line: so a name
//! with no row, or an unmarked one, has nobody waiting, and an uncontended
//! claim takes it without reading the line (MySQL's batch does not even
//! name the waiter table then). A take clears the mark when nobody else
//! waits; a fair claim that finds the name held marks it again (Postgres,
//! MySQL), so a mark that a statement with an older snapshot lost costs at
//! most one overtaking. A fair `try_lock` claims the same way without a
//! row, so it takes a free name only when nobody waits.
//!
//! [`Statements::claim_fair`]: crate::sql::Statements

pub(crate) mod listener;
mod pg_listener;
pub(crate) mod queue;
#[cfg(feature = "postgres")]
pub(crate) mod waitlist;

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::{AcquireRequest, Lease, TryAcquire};
use lockkit_core::backoff::Backoff;
use lockkit_core::{LockError, detach};

use crate::backend::{Inner, SqlBackend};
#[cfg(feature = "mysql")]
use crate::config::Dialect;
use crate::conn::{Arg, Col, us};
use listener::InLine;
use queue::Place;

/// The longest a fair waiter that is not first in line sleeps without being
/// woken (its place's renewal wakes it every third of the queue lease).
const IDLE: Duration = Duration::from_secs(3600);

/// Without a push from the server (MySQL, SQLite), how often the first
/// waiter of each process looks whether the line moved in another process
/// (at most `max_backoff`): it becomes the head when the waiter before it
/// takes the name, and nobody tells it. One read per process and waited
/// name every 10 ms; a hand-off across processes then costs ~5 ms more
/// than a poll of the head (measured on `lockkit demo`, SQLite, 4
/// processes: looking every 250 ms made 9–12 hand-offs/s).
const LOOK: Duration = Duration::from_millis(10);

/// Leaves a line now, after a wait gave up (wait bound, error): `leaving`
/// takes the place out. A failure is only logged: the place ends with its
/// lease all the same, and the wait's own outcome is what the caller needs.
pub(crate) async fn leave_now(backend: &'static str, leaving: impl Future<Output = Result<(), LockError>>) {
    if let Err(e) = leaving.await {
        tracing::debug!(backend, error = %e, "leaving the line failed; the place ends with its lease");
    }
}

/// Leaves a line in the background, after the `lock` future that had the
/// place was cancelled (dropped with it): `leaving` takes the place out, if
/// a runtime still runs to spawn it on (without one, the place ends with
/// its lease). A failure is only logged, as in [`leave_now`].
pub(crate) fn leave_later(
    backend: &'static str,
    leaving: impl Future<Output = Result<(), LockError>> + Send + 'static,
) {
    if let Ok(handle) = tokio::runtime::Handle::try_current() {
        handle.spawn(async move {
            if let Err(e) = leaving.await {
                tracing::debug!(backend, error = %e,
                    "leaving the line of a cancelled lock failed; the place ends with its lease");
            }
        });
    }
}

/// A fair acquisition's place in line: its row in `<table>_waiters`, its
/// place in this process's line and in the renewal set. Dropped without
/// [`served`](Self::served) or [`leave`](Self::leave) — the `lock` future
/// was cancelled — it deletes the row in the background.
struct Queued {
    inner: Arc<Inner>,
    attempt: String,
    line: InLine,
    place: Arc<Place>,
    /// Served (the claim took the row out) or left: nothing to delete.
    done: bool,
}

impl Queued {
    /// The claim that gave the name took the row out.
    fn served(mut self) {
        self.done = true;
        self.line.served();
    }

    /// Gave up (wait bound, error): the row goes now, then the next in this
    /// process's line is woken (as the place is dropped) if this was first.
    pub(crate) async fn leave(mut self) {
        self.done = true;
        leave_now(self.inner.kind, self.inner.leave(&self.attempt)).await;
    }
}

impl Drop for Queued {
    fn drop(&mut self) {
        self.inner.places.remove(&self.attempt);
        if self.done {
            return;
        }
        // Cancelled: leave in the background, if a runtime still runs.
        let (inner, attempt) = (self.inner.clone(), std::mem::take(&mut self.attempt));
        leave_later(inner.kind, async move { inner.leave(&attempt).await });
    }
}

impl SqlBackend {
    /// A fair `lock` (contract point 12): one attempt; if the name is busy,
    /// a place at the back of the name's line (`<table>_waiters`), then
    /// attempts that take the name only when this one heads the line. Only
    /// the head tries again on its backoff (bounded by the holder's lease);
    /// the others sleep until a release wakes the first waiter of this
    /// process (a local release, or on Postgres any release, through the
    /// listener), the waiter ahead of them in this process leaves, or their
    /// place is renewed (every third of the queue lease: the line may have
    /// moved in another process, or a waiter ahead died). A waiter ahead
    /// that is served (took the name, which is held then) only makes the
    /// next one the first of this process, without a try. On MySQL and
    /// SQLite, which cannot push a release to another process, the first
    /// waiter of each process also looks every [`LOOK`].
    pub(crate) async fn acquire_fair(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let inner = &self.inner;
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let door = inner.waiters.door(req.name.as_bytes());
        let passing = match deadline {
            Some(d) => match tokio::time::timeout_at(d, door.pass()).await {
                Ok(passing) => passing,
                Err(_) => return Ok(None),
            },
            None => door.pass().await,
        };
        // With waiters of this process in the name's line, a first attempt
        // outside the line cannot take it (they are ahead; a re-entry is
        // taken by the attempt in line as well): straight into the line.
        if !inner.waiters.has_line(req.name.as_bytes())
            && let Some(lease) = self.attempt_before_line(req).await?
        {
            return Ok(Some(lease));
        }
        // Postgres: releases notify only names somebody has listed (see
        // `waitlist.rs`); list it before the first attempt in line.
        #[cfg(feature = "postgres")]
        let _listed = match inner.wait_list.get() {
            Some(list) => {
                let (joined, confirmed) = list.join(req.name.as_bytes());
                match deadline {
                    Some(d) => {
                        let _ = tokio::time::timeout_at(d, confirmed).await;
                    }
                    None => {
                        let _ = confirmed.await;
                    }
                }
                Some(joined)
            }
            None => None,
        };
        // Whether releases in other processes wake this process's waiters.
        #[cfg(feature = "postgres")]
        let push = _listed.is_some();
        #[cfg(not(feature = "postgres"))]
        let push = false;
        let mut queued = self.join_line(req).await?;
        drop(passing);
        let mut backoff = Backoff::new(Duration::from_millis(2), inner.config.max_backoff);
        let mut last_error: Option<LockError> = None;
        // Woken only because the waiter before it in this process took the
        // name: the name is held, so wait on as the first without a try.
        // Likewise when it joined behind waiters of this process: the name
        // is theirs first, and the first of them wakes it on leaving.
        let mut moved_up = !queued.line.is_first();
        loop {
            if queued.place.rejoin.swap(false, std::sync::atomic::Ordering::Relaxed) {
                // The row went (its lease ran out while this task stalled):
                // join again, at the back.
                match inner.join(req.name, req.owner, req.attempt).await {
                    Ok(id) => queued.line.move_to(id),
                    Err(e) => tracing::debug!(error = %e, "lockkit could not rejoin the line; retrying"),
                }
            }
            // Listen before trying, so a wake-up during the attempt is kept.
            let notify = queued.line.notify_arc();
            let notified = notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (retry_in, head) = if std::mem::take(&mut moved_up) {
                (None, false)
            } else {
                match self.detached_attempt(req, true).await {
                    Ok((TryAcquire::Acquired(lease), _)) => {
                        queued.served();
                        return Ok(Some(lease));
                    }
                    Ok((TryAcquire::Busy { retry_in }, head)) => {
                        last_error = None;
                        (retry_in, head)
                    }
                    Err(e) if e.is_retryable() => {
                        tracing::debug!(error = %e, "lock attempt failed; retrying");
                        last_error = Some(e);
                        (None, true)
                    }
                    Err(e) => {
                        queued.leave().await;
                        return Err(e);
                    }
                }
            };
            let now = tokio::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                queued.leave().await;
                return match last_error {
                    Some(e) => Err(e),
                    None => Ok(None),
                };
            }
            let delay = if head {
                lockkit_core::backoff::bounded_delay(&mut backoff, retry_in, deadline, now)
            } else {
                backoff.reset();
                // Without a push from the server (MySQL, SQLite), the head
                // of the line changing in another process is learnt by
                // looking: the first waiter of this process looks every
                // `max_backoff`, the others wait for their turn here.
                let idle = if !push && queued.line.is_first() {
                    LOOK.min(inner.config.max_backoff)
                } else {
                    IDLE
                };
                deadline.map_or(idle, |d| d.saturating_duration_since(now).min(idle))
            };
            tokio::select! {
                _ = notified => moved_up = queued.line.take_moved_up(),
                _ = tokio::time::sleep(delay) => {
                    queued.line.take_moved_up();
                }
            }
        }
    }

    /// Joins the name's line: a row in `<table>_waiters` (idempotent by the
    /// attempt id) and the matching place in this process's line. Run
    /// detached: a caller cancelled mid-way leaves no row behind.
    async fn join_line(&self, req: &AcquireRequest<'_>) -> Result<Queued, LockError> {
        let inner = self.inner.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let work = {
            let (inner, name, attempt) = (inner.clone(), name.clone(), attempt.clone());
            async move { inner.join(&name, &owner, &attempt).await }
        };
        let orphan = {
            let (inner, attempt) = (inner.clone(), attempt.clone());
            move |_| async move {
                let _ = inner.leave(&attempt).await;
            }
        };
        let id = detach(inner.kind, work, orphan).await??;
        let line = inner.waiters.line_up(name.as_bytes(), id);
        let place = Arc::new(Place {
            rejoin: Default::default(),
            notify: line.notify_arc(),
        });
        inner.places.insert(&attempt, place.clone());
        Ok(Queued {
            inner,
            attempt,
            line,
            place,
            done: false,
        })
    }
}

impl Inner {
    /// Puts `attempt` in the line for `name` (or renews its place): its
    /// row's id, the place in line.
    pub(crate) async fn join(&self, name: &str, owner: &str, attempt: &str) -> Result<i64, LockError> {
        let lease = us(self.config.queue_lease);
        let args = [
            Arg::Bytes(name.as_bytes()),
            Arg::Bytes(owner.as_bytes()),
            Arg::Text(Some(attempt)),
            Arg::Int(lease),
        ];
        let n = Some(name);
        #[cfg(feature = "mysql")]
        if self.config.dialect == Dialect::Mysql {
            let ((done, _), _) = self
                .retry_if("acquire", n, true, || {
                    let batch = self
                        .sql
                        .mysql_join_batch(name.as_bytes(), owner.as_bytes(), attempt, lease);
                    self.db.mysql_batch(batch, &[])
                })
                .await?;
            // BEGIN, the waiter row, COMMIT, the mark.
            let id = done.get(1).map_or(u64::MAX, |d| d.last_id);
            return Ok(i64::try_from(id).unwrap_or(i64::MAX));
        }
        let (row, _) = self
            .retry_if("acquire", n, true, || {
                self.line_db.fetch_one(&self.sql.join, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(i64::MAX, |r| r[0].int()))
    }

    /// Takes `attempt` out of its line (idempotent).
    async fn leave(&self, attempt: &str) -> Result<(), LockError> {
        let args = [Arg::Text(Some(attempt))];
        self.retry_if("acquire", None, true, || self.line_db.exec(&self.sql.leave, &args))
            .await
            .map(drop)
    }
}

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;
    use crate::config::{Dialect, SqlConfig};
    use lockkit_core::backend::LockBackend;

    /// The line by itself: a join repeated (a retry after a lost reply)
    /// keeps one place; only the head takes a free name, and its claim
    /// takes its place out; leaving twice is leaving once.
    #[cfg(feature = "sqlite")]
    #[tokio::test]
    async fn the_line_counts_each_attempt_once() {
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Sqlite, ":memory:"))
            .await
            .unwrap();
        let inner = &backend.inner;
        let (first, second) = ("0123456789abcdef", "fedcba9876543210");
        let a = inner.join("n", "o1", first).await.unwrap();
        assert_eq!(inner.join("n", "o1", first).await.unwrap(), a, "the same place");
        assert_eq!(backend.waiting("n").await.unwrap(), 1);
        let b = inner.join("n", "o2", second).await.unwrap();
        assert!(b > a, "later joins stand behind");
        assert_eq!(backend.waiting("n").await.unwrap(), 2);
        let req = |owner, attempt| AcquireRequest {
            name: "n",
            owner,
            ttl: Duration::from_secs(30),
            attempt,
            fair: true,
            kind: lockkit_core::backend::LockKind::Mutex,
        };
        let busy = backend.detached_attempt(&req("o2", second), true).await.unwrap();
        assert!(
            matches!(busy, (TryAcquire::Busy { .. }, false)),
            "the second in line may not take the free name"
        );
        let (taken, _) = backend.detached_attempt(&req("o1", first), true).await.unwrap();
        assert!(matches!(taken, TryAcquire::Acquired(_)), "the head takes it");
        assert_eq!(backend.waiting("n").await.unwrap(), 1, "the served place is gone");
        inner.leave(second).await.unwrap();
        inner.leave(second).await.unwrap();
        assert_eq!(backend.waiting("n").await.unwrap(), 0);
    }
}
