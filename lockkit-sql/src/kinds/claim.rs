//! One attempt at a semaphore's permit or a read-write lock's hold (one
//! transaction), a place in the name's line, and leaving it.

use std::time::{Duration, Instant};

use lockkit_core::backend::{AcquireRequest, Lease, LockKind, TryAcquire};
use lockkit_core::{LockError, ttl_millis};

use super::rules::{Grant, Row, decide, permits_of};
use super::{family, line_key, name_args, share_count};
use crate::backend::Inner;
use crate::conn::{Arg, Col, Tx, Val, sent, us};
use crate::sql::KindStatements;

/// How often a claim looks again when the hold it was to join went.
const JOIN_ROUNDS: u32 = 3;

/// What one claim found.
enum Claimed {
    /// The request holds it `count` times under `token`, for `remaining`.
    Held {
        count: u32,
        token: u64,
        remaining: Duration,
    },
    /// Not now; `placed`: the attempt's place in line still stands (always,
    /// for an attempt outside the line).
    Busy { retry_in: Option<Duration>, placed: bool },
}

/// What the transaction found of the name: its row in `<table>_kinds`
/// (locked) and its live rows in `<table>_holds`.
struct NameState {
    permits: i64,
    last_token: i64,
    last_write: i64,
    rows: Vec<Row>,
}

impl NameState {
    /// The attempt's place in line, if it has one.
    fn placed(&self, attempt: &str) -> bool {
        self.rows.iter().any(|r| r.queued && r.attempts == attempt)
    }
}

/// A row that a claim (a new hold) or a join (a place in line) inserts in
/// `<table>_holds` as the name's next; see [`insert_next`].
struct NextRow<'a> {
    /// The hold's token (0 for a place in line).
    token: i64,
    write: bool,
    /// A place in line, not a hold.
    queued: bool,
    /// How long the row lives (`us`): the hold's ttl, or the queue lease.
    lease: Arg<'a>,
}

/// Inserts `row` for `req` under `seq` (one past the name's last token),
/// after the name's row in `<table>_kinds` records `seq`, `last_write` and
/// the permits (the request's count if it names one, else the name's). A
/// claim and a join number their rows the same way, so that the line's
/// order and the tokens stay one sequence.
async fn insert_next(
    tx: &mut Tx,
    k: &KindStatements,
    req: &AcquireRequest<'_>,
    state: &NameState,
    seq: i64,
    last_write: i64,
    row: NextRow<'_>,
) -> Result<(), sqlx::Error> {
    let [fam, name] = name_args(req);
    let asked = permits_of(req.kind);
    let permits = if asked != 0 { asked } else { state.permits };
    let args = [Arg::Int(permits), Arg::Int(seq), Arg::Int(last_write), fam, name];
    tx.exec(&k.set_name, &args).await?;
    let args = [
        fam,
        name,
        Arg::Int(seq),
        Arg::Bytes(req.owner.as_bytes()),
        Arg::Int(row.token),
        Arg::Int(i64::from(row.write)),
        Arg::Int(i64::from(row.queued)),
        Arg::Text(Some(req.attempt)),
        row.lease,
    ];
    tx.exec(&k.insert, &args).await?;
    Ok(())
}

/// Locks the name's row in `<table>_kinds` to the end of the transaction
/// (`(family, name)`); its `(permits, last_token, last_write)`, or `None`
/// when the name has no row. Claims and releases of a name take it first,
/// so they change the name's holds one at a time.
pub(super) async fn lock_name(
    tx: &mut Tx,
    k: &KindStatements,
    args: &[Arg<'_>],
) -> Result<Option<Vec<Val>>, sqlx::Error> {
    Ok(tx.fetch(&k.lock_name, args, &[Col::Int; 3]).await?.pop())
}

impl Inner {
    /// One attempt of a semaphore or read-write lock request (see
    /// [`Inner::attempt`]); says whether the attempt's place in line still
    /// stands (`queued`: the attempt has one; a lost one is taken again).
    pub(crate) async fn kind_attempt(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> Result<(TryAcquire, bool), LockError> {
        let req = AcquireRequest {
            ttl: Duration::from_millis(ttl_millis(req.ttl)),
            ..*req
        };
        let called = Instant::now();
        let claim = self.retry_if("acquire", Some(req.name), true, || self.kind_claim(&req, queued));
        let (claimed, sent) = sent::timed(claim).await;
        let sent_at = sent.unwrap_or(called);
        match claimed?.0.map_err(|reason| self.conflict(req.name, reason))? {
            Claimed::Held {
                count,
                token,
                remaining,
            } => Ok((TryAcquire::Acquired(Lease::ttl(token, count, sent_at, remaining)), true)),
            Claimed::Busy { retry_in, placed } => Ok((TryAcquire::Busy { retry_in }, placed)),
        }
    }

    fn conflict(&self, name: &str, reason: String) -> LockError {
        LockError::Conflict {
            backend: self.kind,
            name: name.to_owned(),
            reason,
        }
    }

    /// Opens the transaction and reads the name (making its row if it is
    /// missing).
    async fn read_name(&self, req: &AcquireRequest<'_>) -> Result<(Tx, NameState), sqlx::Error> {
        let k = &self.ksql;
        let args = name_args(req);
        let mut tx = self.db.begin().await?;
        let mut found = None;
        for _ in 0..2 {
            found = lock_name(&mut tx, k, &args).await?;
            if found.is_some() {
                break;
            }
            tx.exec(&k.ensure_name, &args).await?;
        }
        let found = found.ok_or(sqlx::Error::RowNotFound)?;
        let cols = [Col::Int, Col::Bytes, Col::Int, Col::Int, Col::Int, Col::Text, Col::Int];
        let rows = tx.fetch(&k.rows, &args, &cols).await?;
        let state = NameState {
            permits: found[0].int(),
            last_token: found[1].int(),
            last_write: found[2].int(),
            rows: rows.into_iter().map(Row::from_vals).collect(),
        };
        Ok((tx, state))
    }

    /// The claim: `Err` with the reason of a conflict.
    async fn kind_claim(&self, req: &AcquireRequest<'_>, queued: bool) -> Result<Result<Claimed, String>, sqlx::Error> {
        for _ in 0..JOIN_ROUNDS {
            if let Some(claimed) = self.kind_claim_once(req, queued).await? {
                return Ok(claimed);
            }
        }
        Ok(Ok(Claimed::Busy {
            retry_in: None,
            placed: true,
        }))
    }

    /// The claim's transaction; `None` when the hold it was to join went
    /// meanwhile (its lease ended and the sweeper took it): look again.
    async fn kind_claim_once(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> Result<Option<Result<Claimed, String>>, sqlx::Error> {
        let k = &self.ksql;
        let (mut tx, state) = self.read_name(req).await?;
        let [fam, name] = name_args(req);
        let asked = permits_of(req.kind);
        let ttl = Arg::Int(us(req.ttl));
        let held = match decide(req, state.permits, &state.rows) {
            Grant::Conflict(reason) => {
                tx.rollback().await?;
                return Ok(Some(Err(reason)));
            }
            Grant::Busy(retry_in) => {
                let placed = if queued {
                    let lease = Arg::Int(us(self.config.queue_lease));
                    let args = [lease, fam, name, Arg::Text(Some(req.attempt))];
                    tx.exec(&k.renew, &args).await?.rows > 0
                } else {
                    true
                };
                tx.commit().await?;
                return Ok(Some(Ok(Claimed::Busy { retry_in, placed })));
            }
            Grant::Join(i) => {
                let row = &state.rows[i];
                // A repeated attempt is the same share, counted once.
                let attempts = if row.has(req.attempt) {
                    row.attempts.clone()
                } else {
                    format!("{} {}", row.attempts, req.attempt).trim().to_owned()
                };
                let args = [Arg::Text(Some(&attempts)), ttl, fam, name, Arg::Int(row.seq)];
                if tx.exec(&k.join, &args).await?.rows == 0 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                if asked != 0 && asked != state.permits {
                    let (t, w) = (state.last_token, state.last_write);
                    let args = [Arg::Int(asked), Arg::Int(t), Arg::Int(w), fam, name];
                    tx.exec(&k.set_name, &args).await?;
                }
                Claimed::Held {
                    count: share_count(&attempts),
                    token: row.token as u64,
                    remaining: row.remaining.max(req.ttl),
                }
            }
            Grant::New { write } => {
                let seq = state.last_token + 1;
                let token = if req.kind == LockKind::Read {
                    state.last_write
                } else {
                    seq
                };
                let last_write = if write { seq } else { state.last_write };
                let row = NextRow {
                    token,
                    write,
                    queued: false,
                    lease: ttl,
                };
                insert_next(&mut tx, k, req, &state, seq, last_write, row).await?;
                Claimed::Held {
                    count: 1,
                    token: token as u64,
                    remaining: req.ttl,
                }
            }
        };
        // Served: the place in line goes in the same transaction.
        if state.placed(req.attempt) {
            tx.exec(&k.leave, &[fam, name, Arg::Text(Some(req.attempt))]).await?;
        }
        // A permit or a read hold leaves room for more: the next in line
        // looks at once.
        let shared = matches!(req.kind, LockKind::Permit { .. } | LockKind::Read);
        let others = state.rows.iter().any(|r| r.queued && r.attempts != req.attempt);
        let key = line_key(req.name, req.kind);
        if shared
            && others
            && let Some(notify) = &k.notify
        {
            tx.exec(notify, &[Arg::Bytes(&key), fam, name]).await?;
        }
        tx.commit().await?;
        if shared && others {
            self.waiters.wake(&key);
        }
        Ok(Some(Ok(held)))
    }

    /// Takes a place at the back of the name's line for `req` (idempotent
    /// by its attempt id); a request another permit count refuses fails
    /// with [`LockError::Conflict`].
    pub(super) async fn kind_join(&self, req: &AcquireRequest<'_>) -> Result<(), LockError> {
        let joined = self
            .retry_if("acquire", Some(req.name), true, || self.kind_join_once(req))
            .await?
            .0;
        joined.map_err(|reason| self.conflict(req.name, reason))
    }

    async fn kind_join_once(&self, req: &AcquireRequest<'_>) -> Result<Result<(), String>, sqlx::Error> {
        let k = &self.ksql;
        let (mut tx, state) = self.read_name(req).await?;
        if state.placed(req.attempt) {
            tx.commit().await?;
            return Ok(Ok(()));
        }
        if let Grant::Conflict(reason) = decide(req, state.permits, &state.rows) {
            tx.rollback().await?;
            return Ok(Err(reason));
        }
        let row = NextRow {
            token: 0,
            write: req.kind == LockKind::Write,
            queued: true,
            lease: Arg::Int(us(self.config.queue_lease)),
        };
        let seq = state.last_token + 1;
        insert_next(&mut tx, k, req, &state, seq, state.last_write, row).await?;
        tx.commit().await?;
        Ok(Ok(()))
    }

    /// Takes `attempt` out of the line of `name` (idempotent); this
    /// process's other waiters look again (it may have been in their way).
    pub(super) async fn kind_leave(&self, kind: LockKind, name: &str, attempt: &str) -> Result<(), LockError> {
        let args = [
            Arg::Int(family(kind)),
            Arg::Bytes(name.as_bytes()),
            Arg::Text(Some(attempt)),
        ];
        self.retry_if("acquire", Some(name), true, || self.db.exec(&self.ksql.leave, &args))
            .await?;
        self.waiters.wake(&line_key(name, kind));
        Ok(())
    }
}
