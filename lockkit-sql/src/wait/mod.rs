//! Waiting for a lock: the fair line's loop (`fair.rs`) and a waiter's
//! place in it (here), one for every kind (a mutex, a semaphore, a
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

mod fair;
pub(crate) mod listener;
pub(crate) mod live;
pub(crate) mod live_key;
mod pg_listener;
pub(crate) mod places;
#[cfg(feature = "postgres")]
pub(crate) mod waitlist;

use std::sync::Arc;

use lockkit_core::raw::{AcquireRequest, detach};
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
    use lockkit_core::raw::{LockBackend, TryAcquire};

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
