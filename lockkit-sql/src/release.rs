//! Giving a lock back: a release takes out its attempt's share of a hold,
//! a forced release deletes the hold whatever its count.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::raw::{Backoff, Hold, ReleaseOutcome};
use lockkit_core::{LockError, LockInfo, LockKind};

#[cfg(feature = "mysql")]
use crate::config::Dialect;
use crate::handle::{Inner, SqlBackend};
#[cfg(feature = "mysql")]
use crate::sql::mysql_inline;
use crate::value::{Arg, Col, count};

/// How often a release looks again when the hold changed under it. Tasks
/// of one owner that re-enter and give back one hold as fast as they can
/// make its count cross between one and more between a round's statements
/// about one round in four: a few rounds in a row are common under load,
/// so the rounds are many and spread out by [`round_pause`].
const RELEASE_ROUNDS: u32 = 40;

/// The pause between two rounds of a release: short and jittered, so the
/// rounds of tasks that keep changing one hold fall out of step.
fn round_pause() -> Backoff {
    Backoff::new(Duration::from_micros(200), Duration::from_millis(20))
}

impl Inner {
    /// The arguments of a delete statement (see [`delete`](Self::delete)):
    /// the hold's, then the attempt if given; use the first `len`.
    pub(crate) fn delete_args<'a>(hold: &'a Hold, attempt: Option<&'a str>) -> ([Arg<'a>; 4], usize) {
        let [a, b, c] = Self::hold_args(hold);
        ([a, b, c, Arg::Text(attempt)], if attempt.is_some() { 4 } else { 3 })
    }

    pub(crate) fn hold_args<'a>(hold: &'a Hold) -> [Arg<'a>; 3] {
        [
            Arg::Bytes(hold.name.as_bytes()),
            Arg::Bytes(hold.owner.as_bytes()),
            Arg::Int(hold.token as i64),
        ]
    }

    /// Deletes a hold (`sql` takes the hold's name, owner and token, and
    /// `attempt` after them if given) — or, when it deleted nothing and
    /// `queued` is given, frees a hold's row that the line waits on (see
    /// [`Statements::release_last`](crate::sql::Statements::release_last)); tried again after a lost connection,
    /// as both are idempotent. Returns whether the hold went, and whether
    /// an earlier try may have removed it unseen.
    pub(crate) async fn delete(
        &self,
        operation: &'static str,
        (sql, queued): (&Arc<str>, Option<&Arc<str>>),
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        #[cfg(feature = "mysql")]
        if let Some(queued) = queued
            && self.config.dialect == Dialect::Mysql
            && self.waiters.has_line(hold.name.as_bytes())
        {
            return self.delete_batched(operation, (sql, queued), hold, attempt).await;
        }
        let (gone, unsure) = self.delete_once(operation, sql, hold, attempt).await?;
        match queued {
            Some(queued) if !gone => {
                let (freed, lost) = self.delete_once(operation, queued, hold, attempt).await?;
                Ok((freed, unsure || lost))
            }
            _ => Ok((gone, unsure)),
        }
    }

    /// MySQL, when this process has waiters in the name's line (so the row
    /// is most likely marked): both statements of [`delete`](Self::delete)
    /// in one round trip, each its own autocommit — the update finds no row
    /// after a delete that took it.
    #[cfg(feature = "mysql")]
    async fn delete_batched(
        &self,
        operation: &'static str,
        (sql, queued): (&Arc<str>, &Arc<str>),
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        let (all, len) = Self::delete_args(hold, attempt);
        let args = &all[..len];
        let batch = format!("{}; {}", mysql_inline(sql, args), mysql_inline(queued, args));
        let n = Some(hold.name.as_str());
        let ((done, _), unsure) = self
            .retry_if(operation, n, true, || self.db.mysql_batch(batch.clone(), &[]))
            .await?;
        let gone = done.iter().any(|d| d.rows > 0);
        if gone {
            self.waiters.released(hold.name.as_bytes(), hold.token as i64);
        }
        Ok((gone, unsure))
    }

    /// One statement of [`delete`](Self::delete).
    async fn delete_once(
        &self,
        operation: &'static str,
        sql: &Arc<str>,
        hold: &Hold,
        attempt: Option<&str>,
    ) -> Result<(bool, bool), LockError> {
        let (all, len) = Self::delete_args(hold, attempt);
        let args = &all[..len];
        let n = Some(hold.name.as_str());
        let (deleted, unsure) = if self.sql.deletes_return_rows {
            let (rows, unsure) = self
                .retry_if(operation, n, true, || self.db.fetch(sql, args, &[Col::Int]))
                .await?;
            (rows.len() as u64, unsure)
        } else {
            let (done, unsure) = self.retry_if(operation, n, true, || self.db.exec(sql, args)).await?;
            (done.rows, unsure)
        };
        if deleted > 0 {
            self.waiters.released(hold.name.as_bytes(), hold.token as i64);
        }
        Ok((deleted > 0, unsure))
    }

    /// Takes `attempt`'s share out of `hold`: deletes the row if it was the
    /// last share, else removes the id; if neither applied, the share was
    /// already gone (a repeated release: the holds left are reported again)
    /// or the hold is. Every statement is idempotent by the attempt id, so
    /// each is tried again after a lost connection; a lost try that may
    /// have deleted the row makes a hold found gone afterwards "released".
    pub(crate) async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        if hold.kind != LockKind::Mutex {
            return self.kind_release(hold, attempt).await;
        }
        let [name, owner, token] = Self::hold_args(hold);
        let share_args = [Arg::Text(Some(attempt)), name, owner, token];
        let steps = ShareSteps {
            last: LastShare::Mutex { hold, attempt },
            one: (&self.sql.release_one, &share_args),
            returns_rows: self.sql.updates_return_rows,
            share: (&self.sql.share, &share_args),
        };
        self.release_rounds(&hold.name, steps).await
    }

    /// The rounds of a release, of any kind: `steps.last` deletes the
    /// hold if the attempt's share is its last; else the other steps take
    /// the share out of a hold of more, or find the share gone already (a
    /// repeat) or the hold. More than one round only when the hold changed
    /// between the statements (a twin owner's release of another share).
    pub(crate) async fn release_rounds(&self, name: &str, steps: ShareSteps<'_>) -> Result<ReleaseOutcome, LockError> {
        let n = Some(name);
        let mut unsure = false;
        let mut pause = round_pause();
        for round in 0..RELEASE_ROUNDS {
            if round > 0 {
                tokio::time::sleep(pause.next_delay()).await;
            }
            let (deleted, lost) = match steps.last {
                LastShare::Mutex { hold, attempt } => {
                    let statements = (&self.sql.release_last, self.sql.release_last_queued.as_ref());
                    self.delete("release", statements, hold, Some(attempt)).await?
                }
                LastShare::Kind { args, key } => self.kind_release_last(name, args, key).await?,
            };
            unsure |= lost;
            if deleted {
                return Ok(ReleaseOutcome::Released { remaining: 0 });
            }
            let (one, args) = steps.one;
            let (remaining, lost) = if steps.returns_rows {
                let (row, lost) = self
                    .retry_if("release", n, true, || self.db.fetch_one(one, args, &[Col::Int]))
                    .await?;
                (row.map(|r| count(r[0].int())), lost)
            } else {
                let (done, lost) = self.retry_if("release", n, true, || self.db.exec(one, args)).await?;
                ((done.rows == 1).then_some(done.last_id as u32), lost)
            };
            unsure |= lost;
            if let Some(remaining) = remaining {
                return Ok(ReleaseOutcome::Released { remaining });
            }
            let (share, args) = steps.share;
            let (row, lost) = self
                .retry_if("release", n, true, || {
                    self.db.fetch_one(share, args, &[Col::Int, Col::Int])
                })
                .await?;
            unsure |= lost;
            match row.as_deref() {
                None if unsure => return Ok(ReleaseOutcome::Released { remaining: 0 }),
                None => return Ok(ReleaseOutcome::NotHeld),
                Some([c, has_share]) if has_share.int() == 0 => {
                    return Ok(ReleaseOutcome::Released {
                        remaining: count(c.int()),
                    });
                }
                _ => {}
            }
        }
        Err(LockError::backend(
            self.kind,
            "release",
            n,
            true,
            "the hold kept changing between the release's statements",
        ))
    }
}

/// The statements of a release (see [`Inner::release_rounds`]), each with
/// its arguments.
pub(crate) struct ShareSteps<'a> {
    /// Deletes the hold if the attempt's share is its last.
    pub last: LastShare<'a>,
    /// Takes the attempt's share out of a hold of more than one → the
    /// shares left (as a row, or, without `returns_rows`, MySQL's insert
    /// id of an update that matched one row).
    pub one: (&'a Arc<str>, &'a [Arg<'a>]),
    pub returns_rows: bool,
    /// → `(shares, has_share)` of the live hold.
    pub share: (&'a Arc<str>, &'a [Arg<'a>]),
}

/// The first step of a release: a mutex's (see [`Inner::delete`]), or a
/// semaphore's or read-write lock's (`kinds/release.rs`), with the
/// arguments of its statement and the line key it wakes.
#[derive(Clone, Copy)]
pub(crate) enum LastShare<'a> {
    Mutex { hold: &'a Hold, attempt: &'a str },
    Kind { args: &'a [Arg<'a>], key: &'a [u8] },
}

impl SqlBackend {
    /// Deletes the hold on `name` whoever holds it (`force_release`): what
    /// it held, if anything.
    pub(crate) async fn force_release_name(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        for _ in 0..5 {
            let Some(info) = inner.inspect(name).await? else {
                return Ok(None);
            };
            let hold = Hold {
                name: name.to_owned(),
                owner: info.owner.clone(),
                token: info.token,
                kind: lockkit_core::LockKind::Mutex,
            };
            // Idempotent: retried after a lost connection; a try that may
            // have deleted it unseen counts as deleted (it is gone either way).
            let (deleted, unsure) = inner
                .delete(
                    "force release",
                    (&inner.sql.delete_hold, inner.sql.delete_hold_queued.as_ref()),
                    &hold,
                    None,
                )
                .await?;
            if deleted || unsure {
                return Ok(Some(info));
            }
        }
        Ok(None)
    }
}
