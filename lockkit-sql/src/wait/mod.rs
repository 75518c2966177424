//! Waiting for a lock: the fair line's loop (`acquire_fair`) and a
//! waiter's place in it, one for every kind (a mutex, a semaphore, a
//! read-write lock); this process's registry of waiters (`listener.rs`),
//! the Postgres `LISTEN` connection that feeds it (`pg_listener.rs`), the
//! Postgres wait lists (`waitlist.rs`), the renewal of places in the line
//! (`places.rs`), and the liveness key that lets a dead process's places be
//! skipped at once (`live.rs`, the key itself in `live_key.rs`).
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
//! A semaphore's or read-write lock's waiter stands in the same table
//! under the name's [`line_key`], and its claim (`kinds/`) reads the line
//! in its transaction: the line's order, leases, renewal, liveness and
//! wake-ups are the mutex's. Only the head of a line is granted (a reader:
//! any reader with no writer ahead), and a dead process's places are
//! skipped at once where the server tells (see `live.rs`).
//!
//! [`Statements::claim_fair`]: crate::sql::Statements

pub(crate) mod listener;
pub(crate) mod live;
pub(crate) mod live_key;
mod pg_listener;
pub(crate) mod places;
#[cfg(feature = "postgres")]
pub(crate) mod waitlist;

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::raw::{AcquireRequest, Backoff, Lease, TryAcquire, detach};
use lockkit_core::{LockError, LockKind};
use sha2::{Digest, Sha256};

#[cfg(feature = "mysql")]
use crate::config::Dialect;
use crate::handle::{Inner, SqlBackend};
use crate::sql::family;
use crate::value::{Arg, Col, us};
use listener::{InLine, Served};
use places::Place;

/// The key of a name's line — in `<table>_waiters`, in this process's
/// registry and in Postgres notifications: a mutex's name itself; for a
/// semaphore or a read-write lock 0xFF (never the first byte of a UTF-8
/// name), the kind family, then the name — or, for a name of more than
/// 253 bytes, the family + 0x80 and the name's SHA-256, so that every key
/// fits MySQL's `VARBINARY(255)`.
pub(crate) fn line_key(name: &str, kind: LockKind) -> Vec<u8> {
    if kind == LockKind::Mutex {
        return name.as_bytes().to_vec();
    }
    let family = family(kind) as u8;
    let mut key = Vec::with_capacity(name.len().min(253) + 2);
    key.push(0xFF);
    if name.len() <= 253 {
        key.push(family);
        key.extend_from_slice(name.as_bytes());
    } else {
        key.push(family | 0x80);
        key.extend_from_slice(&Sha256::digest(name.as_bytes()));
    }
    key
}

/// The longest a fair waiter that is not first in line sleeps without being
/// woken (its place's renewal wakes it every third of the queue lease).
const IDLE: Duration = Duration::from_secs(3600);

/// Without a push from the server (MySQL, SQLite), how often the first
/// waiter of each process looks whether the line moved in another process
/// (at most `max_backoff`): it becomes the head when the waiter before it
/// takes the name, and nobody tells it. One read per process and waited
/// name every 10 ms; a hand-off across processes then costs a few
/// milliseconds more than a poll of the head, where looking a few times a
/// second made hand-offs across processes an order of magnitude slower.
const LOOK: Duration = Duration::from_millis(10);

/// Leaves a line now, after a wait gave up (wait bound, error): `leaving`
/// takes the place out. A failure is only logged: the place ends with its
/// lease all the same, and the wait's own outcome is what the caller needs.
async fn leave_now(backend: &'static str, leaving: impl Future<Output = Result<(), LockError>>) {
    if let Err(e) = leaving.await {
        tracing::debug!(backend, error = %e, "leaving the line failed; the place ends with its lease");
    }
}

/// Leaves a line in the background, after the `lock` future that had the
/// place was cancelled (dropped with it): `leaving` takes the place out, if
/// a runtime still runs to spawn it on (without one, the place ends with
/// its lease). A failure is only logged, as in [`leave_now`].
fn leave_later(backend: &'static str, leaving: impl Future<Output = Result<(), LockError>> + Send + 'static) {
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
    /// The claim that gave the name took the row out; `room`: the grant
    /// leaves room for the next in line, who tries at once.
    fn served(mut self, room: bool) {
        self.done = true;
        self.line.served(if room { Served::Room } else { Served::Full });
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
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let door = inner.waiters.door(&key);
        let passing = match deadline {
            Some(d) => match tokio::time::timeout_at(d, door.pass()).await {
                Ok(passing) => passing,
                Err(_) => return Ok(None),
            },
            None => door.pass().await,
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
        // Postgres: releases notify only names somebody has listed (see
        // `waitlist.rs`); list it before the first attempt in line.
        #[cfg(feature = "postgres")]
        let _listed = match inner.wait_list.get() {
            Some(list) => {
                let (joined, confirmed) = list.join(&key);
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
        let mut queued = self.join_line(req, &key).await?;
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
                let live = inner.live.for_place(inner).await;
                match inner.join(req, &key, live).await {
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
                    Ok((TryAcquire::Acquired(lease), room)) => {
                        queued.served(room);
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
                lockkit_core::raw::bounded_delay(&mut backoff, retry_in, deadline, now)
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

    /// Joins the line `key` of the request's name: a row in
    /// `<table>_waiters` (idempotent by the attempt id) and the matching
    /// place in this process's line. Run detached: a caller cancelled
    /// mid-way leaves no row behind.
    async fn join_line(&self, req: &AcquireRequest<'_>, key: &[u8]) -> Result<Queued, LockError> {
        let inner = self.inner.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let (ttl, fair, kind) = (req.ttl, req.fair, req.kind);
        let work = {
            let (inner, attempt, key) = (inner.clone(), attempt.clone(), key.to_vec());
            async move {
                let req = AcquireRequest {
                    name: &name,
                    owner: &owner,
                    ttl,
                    attempt: &attempt,
                    fair,
                    kind,
                };
                let live = inner.live.for_place(&inner).await;
                inner.join(&req, &key, live).await
            }
        };
        let orphan = {
            let (inner, attempt) = (inner.clone(), attempt.clone());
            move |_| async move {
                let _ = inner.leave(&attempt).await;
            }
        };
        let id = detach(inner.kind, work, orphan).await??;
        let line = inner.waiters.line_up(key, id);
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
    /// Puts the request in the line `key` (or renews its place), naming
    /// the liveness key `live` (0: none): its row's id, the place in line.
    /// A mutex's join also marks the name's row `queued`.
    pub(crate) async fn join(&self, req: &AcquireRequest<'_>, key: &[u8], live: i64) -> Result<i64, LockError> {
        let lease = us(self.config.queue_lease);
        let writer = i64::from(req.kind == LockKind::Write);
        let args = [
            Arg::Bytes(key),
            Arg::Bytes(req.owner.as_bytes()),
            Arg::Text(Some(req.attempt)),
            Arg::Int(lease),
            Arg::Int(live),
            Arg::Int(writer),
        ];
        let n = Some(req.name);
        let mutex = req.kind == LockKind::Mutex;
        #[cfg(feature = "mysql")]
        if self.config.dialect == Dialect::Mysql {
            if !mutex {
                let (done, _) = self
                    .retry_if("acquire", n, true, || self.line_db.exec(&self.sql.kind_join, &args))
                    .await?;
                return Ok(i64::try_from(done.last_id).unwrap_or(i64::MAX));
            }
            let ((done, _), _) = self
                .retry_if("acquire", n, true, || {
                    let (owner, attempt) = (req.owner.as_bytes(), req.attempt);
                    let batch = self.sql.mysql_join_batch(key, owner, attempt, lease, live);
                    self.db.mysql_batch(batch, &[])
                })
                .await?;
            // BEGIN, the waiter row, COMMIT, the mark.
            let id = done.get(1).map_or(u64::MAX, |d| d.last_id);
            return Ok(i64::try_from(id).unwrap_or(i64::MAX));
        }
        let (statement, args) = if mutex {
            (&self.sql.join, &args[..5])
        } else {
            (&self.sql.kind_join, &args[..])
        };
        let (row, _) = self
            .retry_if("acquire", n, true, || {
                self.line_db.fetch_one(statement, args, &[Col::Int])
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
    use lockkit_core::raw::LockBackend;

    fn req<'a>(owner: &'a str, attempt: &'a str) -> AcquireRequest<'a> {
        crate::kinds::tests::req(LockKind::Mutex, owner, attempt)
    }

    /// The line by itself: a join repeated (a retry after a lost reply)
    /// keeps one place; a place whose process is gone (its liveness key
    /// not renewed) is neither counted nor in the way; only the head takes
    /// a free name, and its claim takes its place out; leaving twice is
    /// leaving once.
    #[tokio::test]
    async fn the_line_counts_each_attempt_once() {
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Sqlite, ":memory:"))
            .await
            .unwrap();
        let inner = &backend.inner;
        let (dead, first, second) = ("00000000000000ff", "0123456789abcdef", "fedcba9876543210");
        // Ahead of everybody, but its process never renewed key 7.
        inner.join(&req("o0", dead), b"n", 7).await.unwrap();
        assert_eq!(backend.waiting("n").await.unwrap(), 0, "a dead place is not counted");
        let live = inner.live.for_place(inner).await;
        assert!(live > 0, "the backend carries its liveness key");
        let a = inner.join(&req("o1", first), b"n", live).await.unwrap();
        assert_eq!(
            inner.join(&req("o1", first), b"n", live).await.unwrap(),
            a,
            "the same place"
        );
        assert_eq!(backend.waiting("n").await.unwrap(), 1);
        let b = inner.join(&req("o2", second), b"n", 0).await.unwrap();
        assert!(b > a, "later joins stand behind");
        assert_eq!(backend.waiting("n").await.unwrap(), 2);
        let busy = backend.detached_attempt(&req("o2", second), true).await.unwrap();
        assert!(
            matches!(busy, (TryAcquire::Busy { .. }, false)),
            "the second in line may not take the free name"
        );
        let (taken, _) = backend.detached_attempt(&req("o1", first), true).await.unwrap();
        assert!(
            matches!(taken, TryAcquire::Acquired(_)),
            "the first live place takes it, past the dead one"
        );
        assert_eq!(backend.waiting("n").await.unwrap(), 1, "the served place is gone");
        inner.leave(second).await.unwrap();
        inner.leave(second).await.unwrap();
        assert_eq!(backend.waiting("n").await.unwrap(), 0);
    }

    #[test]
    fn line_keys() {
        assert_eq!(line_key("n", LockKind::Mutex), b"n");
        let permit = line_key("n", LockKind::Permit { permits: 2 });
        assert_eq!(permit, [0xFF, 1, b'n']);
        assert_eq!(line_key("n", LockKind::Read), line_key("n", LockKind::Write));
        assert_ne!(line_key("n", LockKind::Read), permit);
        let long = "x".repeat(255);
        let key = line_key(&long, LockKind::Read);
        assert_eq!((key.len(), key[1]), (34, 0x82), "a long name's key fits 255 bytes");
        assert_eq!(line_key(&"x".repeat(253), LockKind::Read).len(), 255);
    }
}
