//! Releasing, extending and inspecting semaphores' permits and read-write
//! locks' holds.

use std::time::{Duration, Instant};

use lockkit_core::backend::{ExtendOutcome, Hold, LockInfo, LockKind, ReleaseOutcome};
use lockkit_core::{LockError, lease};

use super::claim::lock_name;
use super::{family, hold_args, line_key, share_count, shares};
use crate::backend::Inner;
use crate::conn::{Arg, Col, Val, count, from_us, sent, text, us};

impl Inner {
    /// Takes `attempt`'s share out of `hold` (a permit, a read or the write
    /// hold); at none left the hold goes and the line looks again.
    pub(crate) async fn kind_release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let n = Some(hold.name.as_str());
        let (released, unsure) = self
            .retry_if("release", n, true, || self.kind_release_once(hold, attempt))
            .await?;
        Ok(match released {
            Some((remaining, gone)) => {
                if gone {
                    self.waiters.wake(&line_key(&hold.name, hold.kind));
                }
                ReleaseOutcome::Released { remaining }
            }
            // An earlier try may have taken the last share unseen.
            None if unsure => ReleaseOutcome::Released { remaining: 0 },
            None => ReleaseOutcome::NotHeld,
        })
    }

    /// One try: the shares left and whether the hold went, or `None` when
    /// no such hold stands.
    async fn kind_release_once(&self, hold: &Hold, attempt: &str) -> Result<Option<(u32, bool)>, sqlx::Error> {
        let k = &self.ksql;
        let (fam, name) = (Arg::Int(family(hold.kind)), Arg::Bytes(hold.name.as_bytes()));
        let mut tx = self.db.begin().await?;
        let found = match lock_name(&mut tx, k, &[fam, name]).await? {
            Some(_) => tx.fetch(&k.hold, &hold_args(hold), &[Col::Int, Col::Text]).await?.pop(),
            None => None,
        };
        let Some(mut found) = found else {
            tx.rollback().await?;
            return Ok(None);
        };
        let attempts = text(found.pop().unwrap_or(Val::Int(0)));
        let seq = Arg::Int(found.pop().map_or(0, |v| v.int()));
        let left: Vec<&str> = shares(&attempts).filter(|a| *a != attempt).collect();
        let gone = left.is_empty();
        if gone {
            tx.exec(&k.delete, &[fam, name, seq]).await?;
            if let Some(notify) = &k.notify {
                let key = line_key(&hold.name, hold.kind);
                tx.exec(notify, &[Arg::Bytes(&key), fam, name]).await?;
            }
        } else if left.len() < shares(&attempts).count() {
            let joined = left.join(" ");
            tx.exec(&k.set_attempts, &[Arg::Text(Some(&joined)), fam, name, seq])
                .await?;
        }
        tx.commit().await?;
        Ok(Some((count(left.len() as i64), gone)))
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
                valid_until: Some(lease::valid_until(sent_at, r)),
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
                }
            })
            .collect())
    }

    /// How many wait in the line of `name` (readers and writers share one).
    pub(crate) async fn kind_waiting(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let args = [Arg::Int(family(kind)), Arg::Bytes(name.as_bytes())];
        let row = self
            .retry("waiting", Some(name), || {
                self.db.fetch_one(&self.ksql.waiting, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(0, |r| r[0].int().max(0) as usize))
    }
}
