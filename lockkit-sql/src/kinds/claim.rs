//! One attempt at a semaphore's permit or a read-write lock's hold (one
//! transaction): the decision on what the transaction read of the name
//! (`name.rs`), and the writes of a grant.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::raw::{AcquireRequest, Lease, TryAcquire, ttl_millis};
use lockkit_core::{LockError, LockKind};

use super::hold::{name_args, share_count};
use super::name::NameState;
use super::rules::{Grant, decide, permits_of};
use crate::conn::{Tx, sent};
use crate::handle::Inner;
use crate::sql::KindStatements;
use crate::value::{Arg, Col, text, us};
use crate::wait::line_key;

/// How often a claim looks again when the hold it was to join went.
const JOIN_ROUNDS: u32 = 3;

/// What one claim found.
enum Claimed {
    /// The request holds it `count` times under `token`, for `remaining`;
    /// `room`: somebody else waits and may be granted beside it.
    Held {
        count: u32,
        token: u64,
        remaining: Duration,
        room: bool,
    },
    /// Not now; `head`: it is the request's turn once the holds end.
    Busy { retry_in: Option<Duration>, head: bool },
}

impl Inner {
    /// One attempt of a semaphore or read-write lock request (see
    /// [`Inner::attempt`]): busy, whether it is the request's turn once the
    /// holds end; granted, whether the grant leaves room for the next in
    /// line. `queued`: the attempt has a place in line (taken out by the
    /// claim that grants it).
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
                room,
            } => Ok((TryAcquire::Acquired(Lease::ttl(token, count, sent_at, remaining)), room)),
            Claimed::Busy { retry_in, head } => Ok((TryAcquire::Busy { retry_in }, head)),
        }
    }

    /// A waiter's look whether the line moved (see [`Inner::peek_name`]):
    /// `Some((retry_in, head))` when the name is busy for `req`, as its
    /// claim would find it; `None` when a claim may grant it (or the look
    /// failed): then the claim decides.
    pub(crate) async fn kind_look(&self, req: &AcquireRequest<'_>) -> Option<(Option<Duration>, bool)> {
        let key = line_key(req.name, req.kind);
        let state = self.peek_name(req, &key).await.ok()??;
        match decide(req, state.permits, &state.holds, &state.line) {
            Grant::Busy { retry_in, turn } => Some((retry_in, turn)),
            _ => None,
        }
    }

    fn conflict(&self, name: &str, reason: String) -> LockError {
        LockError::Conflict {
            backend: self.kind,
            name: name.to_owned(),
            reason,
        }
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
            head: true,
        }))
    }

    /// The claim's transaction; `None` when the hold it was to join went
    /// meanwhile (its lease ended and the sweeper took it): look again.
    async fn kind_claim_once(
        &self,
        req: &AcquireRequest<'_>,
        queued: bool,
    ) -> Result<Option<Result<Claimed, String>>, sqlx::Error> {
        let key = line_key(req.name, req.kind);
        let (tx, state) = self.read_name(req, &key).await?;
        let mut claim = Claiming {
            tx,
            k: &self.ksql,
            req,
            key: &key,
            queued,
            state,
        };
        let state = &claim.state;
        let granted = match decide(req, state.permits, &state.holds, &state.line) {
            Grant::Conflict(reason) => {
                claim.tx.rollback().await?;
                return Ok(Some(Err(reason)));
            }
            Grant::Busy { retry_in, turn } => {
                // The name's row may be new.
                claim.tx.commit().await?;
                return Ok(Some(Ok(Claimed::Busy { retry_in, head: turn })));
            }
            Grant::Join(i) => match claim.join(i).await? {
                Some(granted) => granted,
                None => {
                    claim.tx.rollback().await?;
                    return Ok(None);
                }
            },
            Grant::New { write, room } => claim.grant_new(write, room).await?,
        };
        // The guard after the hold's writes, so that its lease (from a
        // later clock reading) covers the hold's.
        if let Some(retry_in) = self.take_guard(&mut claim.tx, req).await? {
            // Held as another kind: nothing of this claim stays.
            claim.tx.rollback().await?;
            return Ok(Some(Ok(Claimed::Busy {
                retry_in: Some(retry_in),
                head: true,
            })));
        }
        claim.commit(&granted).await?;
        if granted.room {
            self.waiters.remember(&key, granted.seq);
            if !queued {
                // In line, the waiter's place wakes the next as it goes.
                self.waiters.wake(&key);
            }
        }
        Ok(Some(Ok(Claimed::Held {
            count: granted.count,
            token: granted.token as u64,
            remaining: granted.remaining,
            room: granted.room,
        })))
    }
}

/// One claim's open transaction, and what it read of the name.
struct Claiming<'c> {
    /// The transaction, which holds the lock on the name's row.
    tx: Tx,
    /// The statements, and the request they claim for.
    k: &'c KindStatements,
    req: &'c AcquireRequest<'c>,
    /// The name's line key.
    key: &'c [u8],
    /// The attempt has a place in line (taken out by the claim that
    /// grants it).
    queued: bool,
    /// What the transaction read of the name.
    state: NameState,
}

/// A grant written in a claim's transaction, and what is left to do
/// before its commit.
struct Granted {
    /// The request now holds it `count` times under `token`, for
    /// `remaining`.
    count: u32,
    token: i64,
    remaining: Duration,
    /// The new hold's `seq`, which names it in notifications (0: none).
    seq: i64,
    /// Room for another: the next in line looks at once.
    room: bool,
    /// The served place and the notification are written already
    /// (Postgres's `grant`).
    written: bool,
}

/// A new hold, as a claim inserts it in `<table>_holds`.
struct NewHold {
    /// One past the name's last token.
    seq: i64,
    /// The hold's token, and whether it is the writer's.
    token: i64,
    write: bool,
    /// The name's last write token after the grant.
    last_write: i64,
}

impl Claiming<'_> {
    /// The permit count the name's row records: the request's if it names
    /// one, else the name's.
    fn permits(&self) -> i64 {
        let asked = permits_of(self.req.kind);
        if asked != 0 { asked } else { self.state.permits }
    }

    /// Joins (re-enters or repeats) the hold at index `i` of the holds:
    /// `None` when the hold went since the read.
    async fn join(&mut self, i: usize) -> Result<Option<Granted>, sqlx::Error> {
        let (k, req) = (self.k, self.req);
        let row = &self.state.holds[i];
        let [fam, name] = name_args(req);
        // A repeated attempt is the same share, counted once.
        let (a, seq) = (Arg::Text(Some(req.attempt)), Arg::Int(row.seq));
        let ttl = Arg::Int(us(req.ttl));
        if self.tx.exec(&k.join, &[a, a, ttl, fam, name, seq]).await?.rows == 0 {
            return Ok(None);
        }
        // The shares now (a release may have taken one out since the
        // read); the row is locked by the update.
        let shares = self.tx.fetch(&k.shares_of, &[fam, name, seq], &[Col::Text]).await?;
        let attempts = shares
            .into_iter()
            .next()
            .map_or_else(String::new, |mut r| text(r.remove(0)));
        let asked = permits_of(req.kind);
        if asked != 0 && asked != self.state.permits {
            let (t, w) = (self.state.last_token, self.state.last_write);
            let args = [Arg::Int(asked), Arg::Int(t), Arg::Int(w), fam, name];
            self.tx.exec(&k.set_name, &args).await?;
        }
        Ok(Some(Granted {
            count: share_count(&attempts),
            token: row.token,
            remaining: row.remaining.max(req.ttl),
            seq: 0,
            room: false,
            written: false,
        }))
    }

    /// A new hold: a permit's or a writer's token is its `seq`, a reader's
    /// the name's last write token. `room`: the rules leave room for
    /// another beside it.
    async fn grant_new(&mut self, write: bool, room: bool) -> Result<Granted, sqlx::Error> {
        let state = &self.state;
        let seq = state.last_token + 1;
        let token = if self.req.kind == LockKind::Read {
            state.last_write
        } else {
            seq
        };
        let last_write = if write { seq } else { state.last_write };
        // Room for another: the next in line looks at once (Postgres:
        // every process's first waiter, by `NOTIFY`).
        let room = room && state.line.others;
        let hold = NewHold {
            seq,
            token,
            write,
            last_write,
        };
        let written = match &self.k.grant {
            Some(grant) => {
                self.grant_at_once(grant, &hold, room).await?;
                true
            }
            None => {
                self.insert_next(&hold).await?;
                false
            }
        };
        Ok(Granted {
            count: 1,
            token,
            remaining: self.req.ttl,
            seq,
            room,
            written,
        })
    }

    /// Postgres: the new hold, the served place and the notification of
    /// room left in one statement, `grant` (each round trip is one more
    /// the name's row stays locked).
    async fn grant_at_once(&mut self, grant: &Arc<str>, hold: &NewHold, room: bool) -> Result<(), sqlx::Error> {
        let req = self.req;
        let [fam, name] = name_args(req);
        let args = [
            Arg::Int(self.permits()),
            Arg::Int(hold.seq),
            Arg::Int(hold.last_write),
            fam,
            name,
            Arg::Int(hold.seq),
            Arg::Bytes(req.owner.as_bytes()),
            Arg::Int(hold.token),
            Arg::Int(i64::from(hold.write)),
            Arg::Text(Some(req.attempt)),
            Arg::Int(us(req.ttl)),
            Arg::Int(i64::from(self.queued)),
            Arg::Int(i64::from(room)),
            Arg::Bytes(self.key),
        ];
        self.tx.exec(grant, &args).await?;
        Ok(())
    }

    /// Inserts the new hold, after the name's row in `<table>_kinds`
    /// records its `seq`, the last write token and the permits.
    async fn insert_next(&mut self, hold: &NewHold) -> Result<(), sqlx::Error> {
        let (k, req) = (self.k, self.req);
        let [fam, name] = name_args(req);
        let args = [
            Arg::Int(self.permits()),
            Arg::Int(hold.seq),
            Arg::Int(hold.last_write),
            fam,
            name,
        ];
        self.tx.exec(&k.set_name, &args).await?;
        let args = [
            fam,
            name,
            Arg::Int(hold.seq),
            Arg::Bytes(req.owner.as_bytes()),
            Arg::Int(hold.token),
            Arg::Int(i64::from(hold.write)),
            Arg::Int(0),
            Arg::Text(Some(req.attempt)),
            Arg::Int(us(req.ttl)),
        ];
        self.tx.exec(&k.insert, &args).await?;
        Ok(())
    }

    /// Takes a served place out of the line and tells the line that the
    /// grant left room, where `granted` did not write both already; commits.
    async fn commit(mut self, granted: &Granted) -> Result<(), sqlx::Error> {
        let k = self.k;
        // Served: the place in line goes in the same transaction.
        if self.queued && !granted.written {
            self.tx.exec(&k.served, &[Arg::Text(Some(self.req.attempt))]).await?;
        }
        if granted.room
            && !granted.written
            && let Some(notify) = &k.notify
        {
            let id = granted.seq.to_string();
            let args = [Arg::Bytes(self.key), Arg::Bytes(self.key), Arg::Text(Some(&id))];
            self.tx.exec(notify, &args).await?;
        }
        self.tx.commit().await
    }
}
