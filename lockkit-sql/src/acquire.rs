//! Taking a lock: one attempt on its own task (`detached_attempt`), made
//! of one claim (`claim.rs`), and the unfair acquire loop; the fair line's
//! loop is in `wait/`.
//!
//! # How a lock is taken
//!
//! One **claim** inserts the row, takes over an expired row or re-enters
//! one's own (count + 1, lease never shortened), and reports the hold count,
//! token and remaining lease — or the holder's remaining lease when busy.
//!
//! A new hold's fencing token comes from a durable counter (a Postgres
//! sequence; a sequence on MariaDB; `<table>_tokens` rows on MySQL and
//! SQLite), and *when* it is
//! drawn is what makes tokens strictly grow per name: it must be drawn while
//! the name is held against every other acquirer, through the commit. A value
//! drawn before the row is reached could be overtaken by another client's
//! whole acquire + release in between. So each dialect draws under a lock on
//! the name that lasts to the commit:
//!
//! - **MySQL/MariaDB**: claim, draw and stamp run as one transaction, sent
//!   as one multi-statement round trip; the claim's row lock on the name
//!   comes first. MariaDB draws with `NEXTVAL` from the table's sequence
//!   (one `UPDATE`), MySQL from one of 64 counter rows by the name's hash
//!   (an `INSERT … ON DUPLICATE KEY UPDATE` on the counter, then the
//!   `UPDATE`); see `token_source.rs`.
//! - **Postgres**: one statement; it takes a transaction-scoped advisory lock
//!   on the name before `nextval`.
//! - **SQLite**: one statement; SQLite runs one writer at a time, and a
//!   trigger moves the counter as the token is written.
//!
//! Release deletes the row (last hold) or decrements it, only where name,
//! owner and token match and the lease runs; extend moves the expiry out,
//! never in, under the same condition.
//!
//! # Attempts
//!
//! The row's `attempts` column holds the attempt id of every share of the
//! hold (space-separated; `hold_count` is their number). A claim whose
//! attempt is already there is a repeat — lockkit's retry after a lost
//! connection, whose first try committed unseen — and changes nothing; a
//! release takes out exactly its attempt's share, and a repeated release
//! finds it gone and changes nothing. So every statement that changes a
//! hold can be sent again after a lost connection, and is.

use std::future::Future;
use std::time::{Duration, Instant};

use lockkit_core::raw::{
    AcquireRequest, Backoff, Hold, Lease, TryAcquire, check_attempt_id, detach_acquisition, ttl_millis,
};
use lockkit_core::{LockError, LockKind};

use crate::claim::Claim;
use crate::conn::sent;
use crate::handle::{Inner, SqlBackend};
use crate::wait::line_key;

impl SqlBackend {
    /// One attempt, on its own task so a cancelled caller leaves no hold.
    /// `queued`: the attempt has a row in the fair line (taken out by the
    /// claim that gives it the name). The flag beside the outcome: when
    /// busy, whether the attempt is the one to try again when the name
    /// comes free (see [`Claim::Busy`]); when acquired, whether the grant
    /// leaves room for the next in line (a semaphore's permit left, a read
    /// hold; never a mutex).
    pub(crate) fn detached_attempt(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> impl Future<Output = Result<(TryAcquire, bool), LockError>> + use<> {
        let inner = self.inner.clone();
        let (name, owner, ttl, fair, kind) = (req.name.to_owned(), req.owner.to_owned(), req.ttl, req.fair, req.kind);
        let attempt = req.attempt.to_owned();
        let checked = check_attempt_id(&attempt);
        let work_inner = inner.clone();
        let work_attempt = attempt.clone();
        // On the heap: the callers' futures then hold a pointer, not the
        // attempt's (see `conn/db.rs` on statement futures).
        let work = Box::pin(async move {
            let req = AcquireRequest {
                name: &name,
                owner: &owner,
                ttl,
                attempt: &work_attempt,
                fair,
                kind,
            };
            work_inner.attempt(&req, queued).await
        });
        // Only this attempt's share: a re-entry's orphan leaves the
        // holds it re-entered as they were.
        let token_of = |result: &Result<(TryAcquire, bool), LockError>| match result {
            Ok((acquired, _)) => acquired.token(),
            Err(_) => None,
        };
        let backend = inner.kind;
        let release = move |hold: Hold| async move { inner.release(&hold, &attempt).await };
        // Nothing runs before the future is awaited.
        let detached = detach_acquisition(backend, req, work, token_of, release);
        let (waiters, key, owner) = (
            self.inner.waiters.clone(),
            line_key(req.name, req.kind),
            req.owner.to_owned(),
        );
        async move {
            checked?;
            let attempted = detached.await??;
            if let (TryAcquire::Acquired(_), _) = attempted {
                waiters.set_holder(&key, &owner, true);
            }
            Ok(attempted)
        }
    }

    /// The first attempt of a waiting `lock` (fair, or of a semaphore or a
    /// read-write lock), made before it takes a place in the name's line:
    /// the lease if it took the lock; `None` when the name was busy or the
    /// attempt failed in a way worth trying again (it is tried again in
    /// line); any other error is returned.
    pub(crate) async fn attempt_before_line(&self, req: &AcquireRequest<'_>) -> Result<Option<Lease>, LockError> {
        match self.detached_attempt(req, false).await {
            Ok((TryAcquire::Acquired(lease), _)) => Ok(Some(lease)),
            Ok(_) => Ok(None),
            Err(e) if e.is_retryable() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// An unfair `lock` of any kind: attempts on a backoff, woken by
    /// releases of the name (see `wait/`).
    pub(crate) async fn acquire_unfair(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let key = line_key(req.name, req.kind);
        let subscription = self.inner.waiters.subscribe(&key);
        let backoff = Backoff::new(Duration::from_millis(2), self.inner.config.max_backoff);
        let attempt = || {
            let attempt = self.detached_attempt(req, false);
            async move { attempt.await.map(|(r, _)| r) }
        };
        // Postgres: an uncontended acquisition costs one attempt; a busy one
        // joins the name's wait list before its next attempt, so that the
        // release it waits for notifies (see `wait/waitlist.rs`).
        #[cfg(feature = "postgres")]
        let (wait, _joined) = match self.inner.wait_list.get() {
            Some(list) => {
                let started = tokio::time::Instant::now();
                if let Ok(TryAcquire::Acquired(lease)) = attempt().await {
                    return Ok(Some(lease));
                }
                let (joined, confirmed) = list.join(&key);
                let left = wait.map(|w| w.saturating_sub(started.elapsed()));
                match left {
                    Some(left) => {
                        let _ = tokio::time::timeout(left, confirmed).await;
                    }
                    None => {
                        let _ = confirmed.await;
                    }
                }
                (wait.map(|w| w.saturating_sub(started.elapsed())), Some(joined))
            }
            None => (wait, None),
        };
        lockkit_core::raw::acquire_with_backoff(wait, backoff, Some(subscription.notify()), attempt).await
    }
}

impl Inner {
    /// One acquisition attempt: one claim; the flag beside the outcome as
    /// [`SqlBackend::detached_attempt`] says.
    pub(crate) async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> Result<(TryAcquire, bool), LockError> {
        if req.kind != LockKind::Mutex {
            // Boxed: its transaction's future nests deep enough to overflow
            // the compiler's query depth where it sits inside a backend's
            // `acquire` in release builds.
            return Box::pin(self.kind_attempt(req, queued)).await;
        }
        let req = AcquireRequest {
            ttl: Duration::from_millis(ttl_millis(req.ttl)),
            ..*req
        };
        let called = Instant::now();
        let (claimed, sent) = sent::timed(self.claim(&req, queued)).await;
        let sent_at = sent.unwrap_or(called);
        Ok(match claimed? {
            Claim::Held {
                count,
                token,
                remaining,
            } if token > 0 => (
                TryAcquire::Acquired(Lease::ttl(token, count, sent_at, remaining)),
                false,
            ),
            // Every claim stamps its hold in the same transaction; a row
            // without a token is not a hold this version of lockkit made.
            Claim::Held { .. } => (TryAcquire::Busy { retry_in: None }, true),
            Claim::Busy { retry_in, head } => (TryAcquire::Busy { retry_in }, head),
        })
    }
}
