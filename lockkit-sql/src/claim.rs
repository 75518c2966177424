//! One claim of a mutex ([`Inner::claim`]), in the shape its database
//! reports it ([`ClaimShape`]): Postgres's rows, SQLite's row or a second
//! look at the holder, MySQL's batch. How a claim takes the name and draws
//! its token is told in `acquire.rs`.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::AcquireRequest;

#[cfg(feature = "mysql")]
use crate::conn::db::Done;
use crate::handle::Inner;
use crate::sql::ClaimShape;
#[cfg(feature = "mysql")]
use crate::sql::{MysqlClaim, MysqlTokens};
use crate::value::{Arg, Col, Val, count, from_us, us};

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

/// Our hold, from a claim's `(hold_count, token, remaining_us)`.
fn held(count_of: &Val, token: &Val, remaining: &Val) -> Claim {
    Claim::Held {
        count: count(count_of.int()),
        token: token.int() as u64,
        remaining: from_us(remaining.int()),
    }
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

impl Inner {
    /// One claim (see [`Statements::claim`](crate::sql::Statements::claim) and
    /// [`Statements::claim_fair`](crate::sql::Statements::claim_fair)).
    /// `queued`: the attempt has a row in the fair line (taken out by the
    /// claim that gives it the name).
    pub(crate) async fn claim(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        match self.sql.claim_shape {
            #[cfg(feature = "mysql")]
            ClaimShape::Batch => self.claim_batch(req, queued).await,
            // MySQL's statements without its driver: nothing to claim with.
            #[cfg(not(feature = "mysql"))]
            ClaimShape::Batch => Ok(Claim::Busy {
                retry_in: None,
                head: true,
            }),
            ClaimShape::Rows => self.claim_rows(req, queued).await,
            ClaimShape::RowsOrHolder => self.claim_or_holder(req, queued).await,
        }
    }

    /// A claim's arguments: `(name, owner, ttl_us, memo, attempt)`.
    fn claim_args<'a>(&'a self, req: &AcquireRequest<'a>) -> [Arg<'a>; 5] {
        [
            Arg::Bytes(req.name.as_bytes()),
            Arg::Bytes(req.owner.as_bytes()),
            Arg::Int(us(req.ttl)),
            Arg::Text(self.config.memo.as_deref()),
            Arg::Text(Some(req.attempt)),
        ]
    }

    /// The claim statement for `req`: unfair, or fair — Postgres's
    /// contended form for an attempt in line or a name this process sees
    /// waiters for.
    fn claim_statement(&self, req: &AcquireRequest<'_>, queued: bool) -> &Arc<str> {
        let sql = &self.sql;
        match &sql.claim_fair_contended {
            Some(contended) if req.fair && (queued || self.waiters.has_line(req.name.as_bytes())) => contended,
            _ if req.fair => &sql.claim_fair,
            _ => &sql.claim,
        }
    }

    /// Postgres ([`ClaimShape::Rows`]): a first try where this process sees
    /// nobody in line takes a name without a row by a plain insert; else,
    /// or when the name has a row, the claim.
    async fn claim_rows(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        let statement = self.claim_statement(req, queued);
        let args = self.claim_args(req);
        if !queued
            && !self.waiters.has_line(req.name.as_bytes())
            && let Some(held) = self.claim_absent(req, &args).await?
        {
            return Ok(held);
        }
        // The fair claim adds a fifth column: whether the attempt heads the
        // line.
        let cols = [Col::Int; 5];
        let cols = if req.fair { &cols[..] } else { &cols[..4] };
        let row = self
            .retry_if("acquire", Some(req.name), true, || {
                self.db.fetch_one(statement, &args, cols)
            })
            .await?
            .0;
        Ok(match row.as_deref() {
            Some([acquired, c, t, r, ..]) if acquired.int() == 1 => held(c, t, r),
            Some([_, _, _, r, rest @ ..]) => Claim::Busy {
                retry_in: Some(from_us(r.int())),
                head: rest.first().is_none_or(|h| h.int() != 0),
            },
            // Free, but another waiter is first in line (fair), or the
            // holder's row went meanwhile.
            _ => Claim::Busy {
                retry_in: None,
                head: !req.fair,
            },
        })
    }

    /// Postgres: the plain insert of a name without a row
    /// ([`Statements::claim_absent`](crate::sql::Statements::claim_absent)):
    /// our hold, or `None` when the name has a row (or the dialect has no
    /// such statement).
    async fn claim_absent(&self, req: &AcquireRequest<'_>, args: &[Arg<'_>]) -> Result<Option<Claim>, LockError> {
        let Some(absent) = &self.sql.claim_absent else {
            return Ok(None);
        };
        let cols = [Col::Int; 4];
        let row = self
            .retry_if("acquire", Some(req.name), true, || {
                self.db.fetch_one(absent, args, &cols)
            })
            .await?
            .0;
        Ok(match row.as_deref() {
            Some([_, c, t, r]) => Some(held(c, t, r)),
            _ => None,
        })
    }

    /// SQLite ([`ClaimShape::RowsOrHolder`]): the claim, and when it found
    /// the name busy, a look at the holder (and, fair, at the line).
    async fn claim_or_holder(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        let statement = self.claim_statement(req, queued);
        let args = self.claim_args(req);
        let cols = [Col::Int; 3];
        let row = self
            .retry_if("acquire", Some(req.name), true, || {
                self.db.fetch_one(statement, &args, &cols)
            })
            .await?
            .0;
        if let Some([c, t, r]) = row.as_deref() {
            return Ok(held(c, t, r));
        }
        if req.fair {
            self.busy_fair(req).await
        } else {
            self.busy_holder(req).await
        }
    }

    /// After a fair claim found the name busy: the holder's remaining lease
    /// (none when the name is free for a waiter ahead) and whether the
    /// attempt heads the line.
    async fn busy_fair(&self, req: &AcquireRequest<'_>) -> Result<Claim, LockError> {
        let args = [Arg::Bytes(req.name.as_bytes()), Arg::Text(Some(req.attempt))];
        let row = self
            .retry("acquire", Some(req.name), || {
                self.db.fetch_one(&self.sql.holder_fair, &args, &[Col::Int, Col::Int])
            })
            .await?;
        Ok(match row.as_deref() {
            Some([r, head]) => Claim::Busy {
                retry_in: (r.int() >= 0).then(|| from_us(r.int())),
                head: head.int() != 0,
            },
            _ => Claim::Busy {
                retry_in: None,
                head: false,
            },
        })
    }

    /// After an unfair claim found the name busy: the holder's remaining
    /// lease, if it still has a row.
    async fn busy_holder(&self, req: &AcquireRequest<'_>) -> Result<Claim, LockError> {
        let args = [Arg::Bytes(req.name.as_bytes())];
        let row = self
            .retry("acquire", Some(req.name), || {
                self.db.fetch_one(&self.sql.holder, &args, &[Col::Int])
            })
            .await?;
        Ok(Claim::Busy {
            retry_in: row.map(|r| from_us(r[0].int())),
            head: true,
        })
    }
}

#[cfg(feature = "mysql")]
impl Inner {
    /// MySQL's claim (see [`ClaimShape::Batch`]): for a first try where
    /// this process sees nobody in line, the fresh batch; then one claim
    /// batch, and for a fair attempt not in line that found the name free
    /// but marked, the batch again reading the line.
    async fn claim_batch(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Claim, LockError> {
        let (sql, fair) = (&self.sql, req.fair);
        let bucket = match self.tokens.get() {
            Some(MysqlTokens::Sequence) => None,
            _ => Some(bucket(req.name, sql.buckets)),
        };
        let claim = &MysqlClaim::new(req, self.config.memo.as_deref(), bucket);
        if !queued
            && !self.waiters.has_line(req.name.as_bytes())
            && let Some(held) = self.claim_fresh(req, claim).await?
        {
            return Ok(held);
        }
        // The fair batch reads the line only for an attempt in it, or when
        // the name is free but marked (see `mysql_claim_batch_fair`).
        let run = |line: bool| {
            self.retry_if("acquire", Some(req.name), true, move || {
                let batch = if fair {
                    sql.mysql_claim_batch_fair(claim, line, queued)
                } else {
                    sql.mysql_claim_batch(claim)
                };
                self.db.mysql_batch(batch, &[Col::Int, Col::Int, Col::Int])
            })
        };
        let ((mut done, mut rows), _) = run(queued).await?;
        // The claim is the statement after BEGIN.
        if fair && !queued && rows.is_empty() && done.get(1).is_some_and(|c| c.rows > 0 && c.last_id == 1) {
            ((done, rows), _) = run(true).await?;
        }
        Ok(batch_claim(fair, &done, &rows))
    }

    /// MySQL's first try at a name without a row
    /// ([`mysql_fresh_batch`](crate::sql::Statements::mysql_fresh_batch)):
    /// our new hold, or `None` when the name had a row.
    async fn claim_fresh(&self, req: &AcquireRequest<'_>, claim: &MysqlClaim) -> Result<Option<Claim>, LockError> {
        let batch = || self.db.mysql_batch(self.sql.mysql_fresh_batch(claim), &[]);
        let ((done, _), _) = self.retry_if("acquire", Some(req.name), true, batch).await?;
        // The statement before COMMIT is the stamp's.
        let stamp = done.len().checked_sub(2).and_then(|i| done.get(i));
        Ok(stamp.filter(|s| s.rows == 1 && s.last_id > 0).map(|stamp| Claim::Held {
            count: 1,
            token: stamp.last_id,
            remaining: req.ttl,
        }))
    }
}

/// What a claim batch found, from its statements' results (`done`) and the
/// read-back of our hold (`rows`).
#[cfg(feature = "mysql")]
fn batch_claim(fair: bool, done: &[Done], rows: &[Vec<Val>]) -> Claim {
    match (rows.first().map(Vec::as_slice), done.get(1)) {
        // Ours: fresh, taken over or re-entered, stamped in the batch.
        (Some([c, t, r]), _) => held(c, t, r),
        // The fair claim left the name to another (maybe marking its row):
        // twice the remaining lease, plus whether the attempt heads the line.
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets() {
        assert_eq!(bucket("order:42", 64), bucket("order:42", 64));
        assert!((0..64).contains(&bucket("x", 64)));
        assert_eq!(bucket("anything", 1), 0);
    }
}
