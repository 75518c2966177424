//! Taking a lock: one claim (`claim`), one attempt on its own task
//! (`detached_attempt`), and the unfair acquire loop; the fair line's loop
//! is in `wait/`.
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

use crate::conn::sent;
use crate::handle::{Inner, SqlBackend};
use crate::sql::ClaimShape;
#[cfg(feature = "mysql")]
use crate::sql::{MysqlClaim, MysqlTokens};
use crate::value::{Arg, Col, count, from_us, us};
use crate::wait::line_key;

/// What a claim found.
pub(crate) enum Claim {
    /// Another owner holds the name for this long (if known); `head`: the
    /// attempt is first in line (or, unfair, any attempt), so it is the one
    /// to try again when the name comes free.
    Busy { retry_in: Option<Duration>, head: bool },
    /// We hold it `count` times under `token`, for `remaining`.
    Held {
        count: u32,
        token: u64,
        remaining: Duration,
    },
}

/// FNV-1a: a stable hash of a name, for its token counter bucket.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn bucket(name: &str, buckets: u64) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % buckets.max(1)) as i64
}

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
    /// One claim (see [`Statements::claim`](crate::sql::Statements::claim) and
    /// [`Statements::claim_fair`](crate::sql::Statements::claim_fair)).
    /// `queued`: the attempt has a row in the fair line (taken out by the
    /// claim that gives it the name).
    pub(crate) async fn claim(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        let AcquireRequest {
            name,
            owner,
            ttl,
            attempt,
            fair,
            ..
        } = *req;
        let sql = &self.sql;
        let memo = self.config.memo.as_deref();
        let args = [
            Arg::Bytes(name.as_bytes()),
            Arg::Bytes(owner.as_bytes()),
            Arg::Int(us(ttl)),
            Arg::Text(memo),
            Arg::Text(Some(attempt)),
        ];
        let op = "acquire";
        let n = Some(name);
        let statement = match &sql.claim_fair_contended {
            Some(contended) if fair && (queued || self.waiters.has_line(name.as_bytes())) => contended,
            _ if fair => &sql.claim_fair,
            _ => &sql.claim,
        };
        Ok(match sql.claim_shape {
            #[cfg(feature = "mysql")]
            ClaimShape::Batch => self.claim_batch(req, queued).await?,
            #[cfg(not(feature = "mysql"))]
            ClaimShape::Batch => {
                let _ = (queued, statement);
                Claim::Busy {
                    retry_in: None,
                    head: true,
                }
            }
            ClaimShape::Rows => {
                // A first try where this process sees nobody in line: a
                // name without a row is taken by a plain insert.
                if let Some(absent) = sql
                    .claim_absent
                    .as_ref()
                    .filter(|_| !queued && !self.waiters.has_line(name.as_bytes()))
                {
                    let cols = [Col::Int, Col::Int, Col::Int, Col::Int];
                    let row = self
                        .retry_if(op, n, true, || self.db.fetch_one(absent, &args, &cols))
                        .await?
                        .0;
                    if let Some([_, c, t, r]) = row.as_deref() {
                        return Ok(Claim::Held {
                            count: count(c.int()),
                            token: t.int() as u64,
                            remaining: from_us(r.int()),
                        });
                    }
                }
                // The fair claim adds a fifth column: whether the attempt
                // heads the line.
                let cols = [Col::Int, Col::Int, Col::Int, Col::Int, Col::Int];
                let cols = if fair { &cols[..] } else { &cols[..4] };
                let row = self
                    .retry_if(op, n, true, || self.db.fetch_one(statement, &args, cols))
                    .await?
                    .0;
                match row.as_deref() {
                    Some([acquired, c, t, r, ..]) if acquired.int() == 1 => Claim::Held {
                        count: count(c.int()),
                        token: t.int() as u64,
                        remaining: from_us(r.int()),
                    },
                    Some([_, _, _, r, rest @ ..]) => Claim::Busy {
                        retry_in: Some(from_us(r.int())),
                        head: rest.first().is_none_or(|h| h.int() != 0),
                    },
                    // Free, but another waiter is first in line (fair), or
                    // the holder's row went meanwhile.
                    _ => Claim::Busy {
                        retry_in: None,
                        head: !fair,
                    },
                }
            }
            ClaimShape::RowsOrHolder => {
                let cols = [Col::Int, Col::Int, Col::Int];
                let row = self
                    .retry_if(op, n, true, || self.db.fetch_one(statement, &args, &cols))
                    .await?
                    .0;
                match row.as_deref() {
                    Some([c, t, r]) => Claim::Held {
                        count: count(c.int()),
                        token: t.int() as u64,
                        remaining: from_us(r.int()),
                    },
                    _ if fair => {
                        let args = [Arg::Bytes(name.as_bytes()), Arg::Text(Some(attempt))];
                        let row = self
                            .retry(op, n, || {
                                self.db.fetch_one(&sql.holder_fair, &args, &[Col::Int, Col::Int])
                            })
                            .await?;
                        match row.as_deref() {
                            Some([r, head]) => Claim::Busy {
                                retry_in: (r.int() >= 0).then(|| from_us(r.int())),
                                head: head.int() != 0,
                            },
                            _ => Claim::Busy {
                                retry_in: None,
                                head: false,
                            },
                        }
                    }
                    _ => {
                        let args = [Arg::Bytes(name.as_bytes())];
                        let row = self
                            .retry(op, n, || self.db.fetch_one(&sql.holder, &args, &[Col::Int]))
                            .await?;
                        Claim::Busy {
                            retry_in: row.map(|r| from_us(r[0].int())),
                            head: true,
                        }
                    }
                }
            }
        })
    }

    /// MySQL's claim (see [`ClaimShape::Batch`]): one batch, and for a fair
    /// attempt not in line that found the name free but marked, the batch
    /// again reading the line.
    #[cfg(feature = "mysql")]
    async fn claim_batch(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        let (sql, fair) = (&self.sql, req.fair);
        let (op, n) = ("acquire", Some(req.name));
        let cols: &[Col] = &[Col::Int, Col::Int, Col::Int];
        // The fair batch reads the line only for an attempt in it,
        // or when the name is free but marked (see
        // `mysql_claim_batch_fair`).
        let claim = MysqlClaim::new(
            req.name.as_bytes(),
            req.owner.as_bytes(),
            us(req.ttl),
            self.config.memo.as_deref(),
            req.attempt,
            match self.tokens.get() {
                Some(MysqlTokens::Sequence) => None,
                _ => Some(bucket(req.name, sql.buckets)),
            },
        );
        let claim = &claim;
        if !queued && !self.waiters.has_line(req.name.as_bytes()) {
            let batch = || self.db.mysql_batch(sql.mysql_fresh_batch(claim), &[]);
            let ((done, _), _) = self.retry_if(op, n, true, batch).await?;
            // The statement before COMMIT is the stamp's.
            let stamp = done.len().checked_sub(2).and_then(|i| done.get(i));
            if let Some(stamp) = stamp.filter(|s| s.rows == 1 && s.last_id > 0) {
                return Ok(Claim::Held {
                    count: 1,
                    token: stamp.last_id,
                    remaining: req.ttl,
                });
            }
        }
        let run = |line: bool| {
            self.retry_if(op, n, true, move || {
                let batch = if fair {
                    sql.mysql_claim_batch_fair(claim, line, queued)
                } else {
                    sql.mysql_claim_batch(claim)
                };
                self.db.mysql_batch(batch, cols)
            })
        };
        let ((mut done, mut rows), _) = run(queued).await?;
        // The claim is the statement after BEGIN.
        if fair && !queued && rows.is_empty() && done.get(1).is_some_and(|c| c.rows > 0 && c.last_id == 1) {
            ((done, rows), _) = run(true).await?;
        }
        Ok(match (rows.first().map(Vec::as_slice), done.get(1)) {
            // Ours: fresh, taken over or re-entered, stamped in the batch.
            (Some([c, t, r]), _) => Claim::Held {
                count: count(c.int()),
                token: t.int() as u64,
                remaining: from_us(r.int()),
            },
            // The fair claim left the name to another (maybe marking
            // its row): twice the remaining lease, plus whether the
            // attempt heads the line.
            (_, Some(claim)) if fair && claim.rows > 0 && claim.last_id > 0 => Claim::Busy {
                retry_in: Some(Duration::from_micros(claim.last_id / 2)),
                head: claim.last_id % 2 == 1,
            },
            // The claim left the holder's row unchanged: its remaining lease.
            (_, Some(claim)) if claim.rows == 1 && claim.last_id > 0 => Claim::Busy {
                retry_in: Some(Duration::from_micros(claim.last_id)),
                head: true,
            },
            _ => Claim::Busy {
                retry_in: None,
                head: !fair,
            },
        })
    }

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::prefix_end;

    #[test]
    fn buckets_and_prefixes() {
        assert_eq!(bucket("order:42", 64), bucket("order:42", 64));
        assert!((0..64).contains(&bucket("x", 64)));
        assert_eq!(bucket("anything", 1), 0);
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
        assert_eq!(prefix_end(""), vec![0xFF]);
        assert_eq!(prefix_end("锁"), {
            let mut v = "锁".as_bytes().to_vec();
            *v.last_mut().unwrap() += 1;
            v
        });
    }
}
