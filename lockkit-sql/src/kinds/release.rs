//! Releasing, extending and inspecting semaphores' permits and read-write
//! locks' holds.

use std::time::{Duration, Instant};

use lockkit_core::raw::{ExtendOutcome, Hold, ReleaseOutcome, valid_until};
use lockkit_core::{LockError, LockInfo, LockKind};

use super::hold::{hold_args, share_count};
use crate::conn::sent;
use crate::handle::Inner;
use crate::release::{LastShare, ShareSteps};
use crate::sql::family;
use crate::value::{Arg, Col, Val, from_us, text, us};
use crate::wait::line_key;

impl Inner {
    /// Takes `attempt`'s share out of `hold` (a permit, a read or the write
    /// hold) by the rounds of a mutex's release ([`Inner::release_rounds`]):
    /// at none left the hold goes, and the first waiter of the name's line
    /// in this process looks again (Postgres: of every process), which
    /// wakes the next if there is room for it too; the last hold of the
    /// name's family frees the name's guard (`guard.rs`).
    pub(crate) async fn kind_release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let k = &self.ksql;
        let key = line_key(&hold.name, hold.kind);
        let [fam, name, owner, token, writer] = hold_args(hold);
        let a = Arg::Text(Some(attempt));
        let last_args = [fam, name, owner, token, writer, a, Arg::Bytes(&key), Arg::Bytes(&key)];
        // Postgres notifies in the same statement.
        let last_args = if k.notify.is_some() {
            &last_args[..]
        } else {
            &last_args[..6]
        };
        let one_args = [a, fam, name, owner, token, writer, a, a];
        let steps = ShareSteps {
            last: LastShare::Kind {
                args: last_args,
                key: &key,
            },
            one: (&k.release_one, &one_args),
            returns_rows: k.returns_rows,
            share: (&k.share, &one_args[..6]),
        };
        let released = self.release_rounds(&hold.name, steps).await?;
        if released == (ReleaseOutcome::Released { remaining: 0 }) {
            self.free_guard(&hold.name, hold.kind).await;
        }
        Ok(released)
    }

    /// The first step of [`kind_release`](Self::kind_release): deletes the
    /// hold if `args` name its last share, and wakes the line `key`.
    /// Whether it did, and whether a lost try may have.
    pub(crate) async fn kind_release_last(
        &self,
        name: &str,
        args: &[Arg<'_>],
        key: &[u8],
    ) -> Result<(bool, bool), LockError> {
        let (k, n) = (&self.ksql, Some(name));
        let (gone, lost) = if k.returns_rows {
            let (rows, lost) = self
                .retry_if("release", n, true, || self.db.fetch(&k.release_last, args, &[Col::Int]))
                .await?;
            (rows.first().map(|r| r[0].int()), lost)
        } else {
            let (done, lost) = self
                .retry_if("release", n, true, || self.db.exec(&k.release_last, args))
                .await?;
            ((done.rows > 0).then_some(0), lost)
        };
        if let Some(seq) = gone {
            self.waiters.released(key, seq);
        }
        Ok((gone.is_some(), lost))
    }

    /// Extends semaphore and read-write holds (one ttl) in one statement
    /// and a read-back; the remaining lease of each that still stands.
    pub(crate) async fn kind_extend_chunk(
        &self,
        ttl: Duration,
        holds: &[&Hold],
    ) -> Result<Vec<Option<Duration>>, LockError> {
        let k = &self.ksql;
        let (update, select) = (k.extend_many(holds.len()), k.read_back(holds.len()));
        let tuples: Vec<Arg<'_>> = holds.iter().flat_map(|h| hold_args(h)).collect();
        let mut args = vec![Arg::Int(us(ttl))];
        args.extend(tuples.iter().copied());
        self.retry("extend", None, || self.renew_db.exec(&update, &args))
            .await?;
        let cols = [Col::Int, Col::Bytes, Col::Bytes, Col::Int, Col::Int, Col::Int];
        let found = self
            .retry("extend", None, || self.renew_db.fetch(&select, &tuples, &cols))
            .await?;
        // The guards of the names whose holds stand last as long.
        let live: Vec<(i64, &str)> = holds
            .iter()
            .filter(|h| {
                found
                    .iter()
                    .any(|r| r[0].int() == family(h.kind) && r[1] == Val::Bytes(h.name.as_bytes().to_vec()))
            })
            .map(|h| (family(h.kind), h.name.as_str()))
            .collect();
        self.extend_guards(ttl, &live).await?;
        Ok(holds
            .iter()
            .map(|h| {
                let key = [
                    Val::Int(family(h.kind)),
                    Val::Bytes(h.name.as_bytes().to_vec()),
                    Val::Bytes(h.owner.as_bytes().to_vec()),
                    Val::Int(h.token as i64),
                    Val::Int(i64::from(h.kind == LockKind::Write)),
                ];
                found.iter().find(|r| r[..5] == key).map(|r| from_us(r[5].int()))
            })
            .collect())
    }

    /// `extend` of one semaphore or read-write hold.
    pub(crate) async fn kind_extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let called = Instant::now();
        let (remaining, sent) = sent::timed(self.kind_extend_chunk(ttl, &[hold])).await;
        let sent_at = sent.unwrap_or(called);
        Ok(match remaining?.pop().flatten() {
            Some(r) => ExtendOutcome::Extended {
                valid_until: Some(valid_until(sent_at, r)),
            },
            None => ExtendOutcome::NotHeld,
        })
    }

    /// The live holds of `kind` on `name`, in the order granted.
    pub(crate) async fn kind_holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        let args = [
            Arg::Int(family(kind)),
            Arg::Bytes(name.as_bytes()),
            Arg::Int(i64::from(kind == LockKind::Write)),
        ];
        let cols = [Col::Bytes, Col::Text, Col::Int, Col::Int];
        let rows = self
            .retry("inspect", Some(name), || {
                self.db.fetch(&self.ksql.holders, &args, &cols)
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let owner = text(r.next().unwrap_or(Val::Int(0)));
                let attempts = text(r.next().unwrap_or(Val::Int(0)));
                LockInfo {
                    name: name.to_owned(),
                    owner,
                    hold_count: share_count(&attempts),
                    token: r.next().map_or(0, |v| v.int() as u64),
                    remaining: Some(from_us(r.next().map_or(0, |v| v.int()))),
                    kind,
                }
            })
            .collect())
    }

    /// How many wait in the line of `name` (readers and writers share one).
    pub(crate) async fn kind_waiting(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let key = line_key(name, kind);
        let args = [Arg::Bytes(&key)];
        let row = self
            .retry("waiting", Some(name), || {
                self.db.fetch_one(&self.sql.waiting, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(0, |r| r[0].int().max(0) as usize))
    }
}
