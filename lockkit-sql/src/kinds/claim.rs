//! One attempt at a semaphore's permit or a read-write lock's hold (one
//! transaction).

use std::time::{Duration, Instant};

use lockkit_core::raw::{AcquireRequest, Lease, TryAcquire, ttl_millis};
use lockkit_core::{LockError, LockKind};

use super::hold::{name_args, share_count};
use super::rules::{Grant, Line, Row, decide, permits_of};
use crate::conn::{Tx, sent};
use crate::handle::Inner;
use crate::sql::KindStatements;
use crate::value::{Arg, Col, Val, text, us};
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

/// What the transaction found of the name: its row in `<table>_kinds`
/// (locked), its live holds in `<table>_holds` and its line.
struct NameState {
    permits: i64,
    last_token: i64,
    last_write: i64,
    holds: Vec<Row>,
    line: Line,
}

/// A hold that a claim inserts in `<table>_holds`; see [`insert_next`].
struct NextRow<'a> {
    token: i64,
    write: bool,
    /// How long the hold lives (`us`).
    lease: Arg<'a>,
}

/// Inserts `row` for `req` under `seq` (one past the name's last token),
/// after the name's row in `<table>_kinds` records `seq`, `last_write` and
/// the permits (the request's count if it names one, else the name's).
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
        Arg::Int(0),
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
async fn lock_name(tx: &mut Tx, k: &KindStatements, args: &[Arg<'_>]) -> Result<Option<Vec<Val>>, sqlx::Error> {
    Ok(tx.fetch(&k.lock_name, args, &[Col::Int; 3]).await?.pop())
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

    fn conflict(&self, name: &str, reason: String) -> LockError {
        LockError::Conflict {
            backend: self.kind,
            name: name.to_owned(),
            reason,
        }
    }

    /// Opens the transaction and reads the name (making its row if it is
    /// missing) and its line (`key`).
    async fn read_name(&self, req: &AcquireRequest<'_>, key: &[u8]) -> Result<(Tx, NameState), sqlx::Error> {
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
        let mut rows = self.line_and_holds(&mut tx, req, key).await?.into_iter();
        let line = rows.next().map(Line::from_vals).unwrap_or_default();
        let state = NameState {
            permits: found[0].int(),
            last_token: found[1].int(),
            last_write: found[2].int(),
            holds: rows.map(Row::from_vals).collect(),
            line,
        };
        Ok((tx, state))
    }

    /// The rows of `req`'s name in `tx`: its line's (`key`) first (`seq`
    /// -1), then the holds. Sorted here: a sorted UNION makes MariaDB write
    /// a temporary table per read (on disk, for the TEXT column).
    async fn line_and_holds(
        &self,
        tx: &mut Tx,
        req: &AcquireRequest<'_>,
        key: &[u8],
    ) -> Result<Vec<Vec<Val>>, sqlx::Error> {
        let (key, attempt) = (Arg::Bytes(key), Arg::Text(Some(req.attempt)));
        let [fam, name] = name_args(req);
        let args = [key, attempt, key, attempt, key, fam, name];
        let cols = [Col::Int, Col::Bytes, Col::Int, Col::Int, Col::Text, Col::Int];
        let mut rows = tx.fetch(&self.ksql.rows, &args, &cols).await?;
        rows.sort_by_key(|r| r.first().map_or(0, Val::int));
        Ok(rows)
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
        let k = &self.ksql;
        let key = line_key(req.name, req.kind);
        let (mut tx, state) = self.read_name(req, &key).await?;
        let [fam, name] = name_args(req);
        let asked = permits_of(req.kind);
        let ttl = Arg::Int(us(req.ttl));
        // `seq`: the new hold's, which names it in notifications (0: none);
        // `written`: the served place and the notification too (Postgres).
        let (held, seq, room, written) = match decide(req, state.permits, &state.holds, &state.line) {
            Grant::Conflict(reason) => {
                tx.rollback().await?;
                return Ok(Some(Err(reason)));
            }
            Grant::Busy { retry_in, turn } => {
                // The name's row may be new.
                tx.commit().await?;
                return Ok(Some(Ok(Claimed::Busy { retry_in, head: turn })));
            }
            Grant::Join(i) => {
                let row = &state.holds[i];
                // A repeated attempt is the same share, counted once.
                let (a, seq) = (Arg::Text(Some(req.attempt)), Arg::Int(row.seq));
                if tx.exec(&k.join, &[a, a, ttl, fam, name, seq]).await?.rows == 0 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                // The shares now (a release may have taken one out since
                // the read); the row is locked by the update.
                let shares = tx.fetch(&k.shares_of, &[fam, name, seq], &[Col::Text]).await?;
                let attempts = shares
                    .into_iter()
                    .next()
                    .map_or_else(String::new, |mut r| text(r.remove(0)));
                if asked != 0 && asked != state.permits {
                    let (t, w) = (state.last_token, state.last_write);
                    let args = [Arg::Int(asked), Arg::Int(t), Arg::Int(w), fam, name];
                    tx.exec(&k.set_name, &args).await?;
                }
                let held = (share_count(&attempts), row.token, row.remaining.max(req.ttl));
                (held, 0, false, false)
            }
            Grant::New { write, room } => {
                let seq = state.last_token + 1;
                let token = if req.kind == LockKind::Read {
                    state.last_write
                } else {
                    seq
                };
                let last_write = if write { seq } else { state.last_write };
                // Room for another: the next in line looks at once
                // (Postgres: every process's first waiter, by `NOTIFY`).
                let room = room && state.line.others;
                let row = NextRow {
                    token,
                    write,
                    lease: ttl,
                };
                let written = match &k.grant {
                    Some(grant) => {
                        let asked = permits_of(req.kind);
                        let permits = if asked != 0 { asked } else { state.permits };
                        let args = [
                            Arg::Int(permits),
                            Arg::Int(seq),
                            Arg::Int(last_write),
                            fam,
                            name,
                            Arg::Int(seq),
                            Arg::Bytes(req.owner.as_bytes()),
                            Arg::Int(token),
                            Arg::Int(i64::from(write)),
                            Arg::Text(Some(req.attempt)),
                            ttl,
                            Arg::Int(i64::from(queued)),
                            Arg::Int(i64::from(room)),
                            Arg::Bytes(&key),
                        ];
                        tx.exec(grant, &args).await?;
                        true
                    }
                    None => {
                        insert_next(&mut tx, k, req, &state, seq, last_write, row).await?;
                        false
                    }
                };
                ((1, token, req.ttl), seq, room, written)
            }
        };
        // Served: the place in line goes in the same transaction.
        if queued && !written {
            tx.exec(&k.served, &[Arg::Text(Some(req.attempt))]).await?;
        }
        let (count, token, remaining) = held;
        if room
            && !written
            && let Some(notify) = &k.notify
        {
            let id = seq.to_string();
            let args = [Arg::Bytes(&key), Arg::Bytes(&key), Arg::Text(Some(&id))];
            tx.exec(notify, &args).await?;
        }
        tx.commit().await?;
        if room {
            self.waiters.remember(&key, seq);
            if !queued {
                // In line, the waiter's place wakes the next as it goes.
                self.waiters.wake(&key);
            }
        }
        Ok(Some(Ok(Claimed::Held {
            count,
            token: token as u64,
            remaining,
            room,
        })))
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lockkit_core::LockKind;
    use lockkit_core::raw::{AcquireRequest, LockBackend};
    use lockkit_core::testkit::server_url;

    use crate::SqlBackend;
    use crate::config::{Dialect, SqlConfig};
    use crate::conn::Tx;
    use crate::value::{Col, text};
    use crate::wait::line_key;

    async fn temporary_tables(tx: &mut Tx) -> i64 {
        let status: Arc<str> = "SHOW SESSION STATUS LIKE 'Created_tmp_tables'".into();
        let mut rows = tx.fetch(&status, &[], &[Col::Text, Col::Text]).await.unwrap();
        text(rows.remove(0).remove(1)).parse().unwrap()
    }

    /// Reading a name's state makes no temporary table on MariaDB. With a
    /// sorted UNION it made one per read, on disk (Aria: the row carries a
    /// TEXT column) — about 150 a second under a crowd, and MariaDB 10.11
    /// died of a SIGSEGV in `ha_maria::drop_table` in one such run.
    #[tokio::test]
    async fn reading_a_name_makes_no_temporary_table() {
        let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
            return;
        };
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Mysql, url)).await.unwrap();
        let name = format!("tmp-tables-{}-{:?}", std::process::id(), std::time::SystemTime::now());
        let kind = LockKind::Permit { permits: 2 };
        let req = AcquireRequest {
            name: &name,
            owner: "a",
            ttl: Duration::from_secs(30),
            attempt: "00000000000000a1",
            fair: true,
            kind,
        };
        assert!(backend.try_acquire(&req).await.unwrap().token().is_some());
        let inner = &backend.inner;
        let key = line_key(&name, kind);
        let (mut tx, state) = inner.read_name(&req, &key).await.unwrap();
        assert_eq!(state.holds.len(), 1, "the permit taken is read back");
        let before = temporary_tables(&mut tx).await;
        let rows = inner.line_and_holds(&mut tx, &req, &key).await.unwrap();
        assert_eq!(rows.len(), 2, "the line's row and the hold");
        assert_eq!(temporary_tables(&mut tx).await, before, "no temporary table per read");
        tx.rollback().await.unwrap();
    }
}
