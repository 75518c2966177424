//! One name, one lock ([the contract](lockkit_core::contract#one-name-one-lock)):
//! a semaphore's or read-write lock's holds keep the mutex, and each
//! other, off their name through the name's guard row in the lock table
//! (`sql/guard.rs`). A claim takes the guard in its transaction, under the
//! lock on its name's row in `<table>_kinds`, after it wrote the hold (so
//! the guard's lease, read from a later clock, covers the hold's) and
//! before it commits: a live row of another owner (a mutex's hold, the
//! other family's guard) makes it busy and rolls it back. The last release of a name's holds frees the guard under
//! the same lock on the name's row, so no claim adds a hold meanwhile; a
//! batch extension extends the guards of the holds it extended. A guard
//! whose holds ended without a release (a crashed holder) lasts as long as
//! the longest of their leases.

use std::time::Duration;

use lockkit_core::raw::AcquireRequest;
use lockkit_core::{LockInfo, LockKind};

use super::name::lock_name;
use crate::conn::Tx;
use crate::handle::Inner;
use crate::sql::{family, guard_owner, is_guard_owner};
use crate::value::{Arg, Col, from_us, us};

/// How often a claim makes the name's row again when it went before the
/// claim could lock it.
const GUARD_ROUNDS: usize = 3;

impl Inner {
    /// Takes the guard of `req`'s name for its family in `tx` (which holds
    /// the lock on the name's row in `<table>_kinds`): `Some(remaining)` of
    /// the hold in the way when the name is held as another kind.
    pub(super) async fn take_guard(
        &self,
        tx: &mut Tx,
        req: &AcquireRequest<'_>,
    ) -> Result<Option<Duration>, sqlx::Error> {
        let g = &self.ksql.guard;
        let owner = guard_owner(family(req.kind));
        let (mine, name) = (Arg::Bytes(&owner), Arg::Bytes(req.name.as_bytes()));
        // The row `ensure` found (a mutex's hold, say) may be deleted before
        // `lock` reads it: the lock then finds none (Postgres reads the row
        // anew once its deleter commits), and `take` would change nothing
        // while the claim goes on unguarded. So the row is made again.
        for _ in 0..GUARD_ROUNDS {
            tx.exec(&g.ensure, &[name, mine]).await?;
            let Some(mut row) = tx.fetch(&g.lock, &[name], &[Col::Bytes, Col::Int]).await?.pop() else {
                continue;
            };
            let remaining = row[1].int();
            let holder = std::mem::replace(&mut row[0], crate::value::Val::Int(0)).into_bytes();
            if remaining > 0 && holder != owner {
                return Ok(Some(from_us(remaining)));
            }
            tx.exec(&g.take, &[mine, Arg::Int(us(req.ttl)), mine, name]).await?;
            return Ok(None);
        }
        // The name's row kept going: busy, and soon tried again.
        Ok(Some(Duration::from_millis(10)))
    }

    /// Frees the guard of `name` for `kind`'s family unless a live hold of
    /// the family still stands, under the lock on the name's row (a claim
    /// that adds a hold holds it to its commit). A failure leaves the guard
    /// to end with its lease.
    pub(super) async fn free_guard(&self, name: &str, kind: LockKind) {
        let freed = self
            .retry("release", Some(name), || async {
                let g = &self.ksql.guard;
                let fam = family(kind);
                let owner = guard_owner(fam);
                let name_arg = Arg::Bytes(name.as_bytes());
                let mut tx = self.db.begin().await?;
                lock_name(&mut tx, &self.ksql, &[Arg::Int(fam), name_arg]).await?;
                let args = [Arg::Bytes(&owner), Arg::Int(fam), name_arg, name_arg];
                tx.exec(&g.free, &args).await?;
                tx.commit().await
            })
            .await;
        if let Err(e) = freed {
            tracing::warn!(backend = self.kind, lock = %name, error = %e,
                "the guard of a released semaphore or read-write lock stays until its lease ends");
        }
    }

    /// Extends the guards of `held` (holds of a semaphore or read-write
    /// lock that an extension found live) to at least `ttl` from now.
    pub(crate) async fn extend_guards(
        &self,
        ttl: Duration,
        held: &[(i64, &str)],
    ) -> Result<(), lockkit_core::LockError> {
        let mut names: Vec<([u8; 2], &str)> = held.iter().map(|&(fam, name)| (guard_owner(fam), name)).collect();
        names.sort_unstable();
        names.dedup();
        if names.is_empty() {
            return Ok(());
        }
        let update = self.ksql.guard.extend_many(names.len());
        let mut args = vec![Arg::Int(us(ttl))];
        for (owner, name) in &names {
            args.extend([Arg::Bytes(owner), Arg::Bytes(name.as_bytes())]);
        }
        self.retry("extend", None, || self.renew_db.exec(&update, &args))
            .await?;
        Ok(())
    }

    /// The first hold of the semaphore or read-write lock whose guard
    /// holds `name` (`owner`: the guard row's owner), as `inspect` says it.
    pub(crate) async fn guarded_by(
        &self,
        name: &str,
        owner: &[u8],
    ) -> Result<Option<LockInfo>, lockkit_core::LockError> {
        if !is_guard_owner(owner) {
            return Ok(None);
        }
        if i64::from(owner[1]) == family(LockKind::Read) {
            let writer = self.kind_holders(name, LockKind::Write).await?;
            let readers = || self.kind_holders(name, LockKind::Read);
            let first = match writer.into_iter().next() {
                Some(w) => Some(w),
                None => readers().await?.into_iter().next(),
            };
            return Ok(first);
        }
        let permits = self.permits_of(name).await?;
        Ok(self
            .kind_holders(name, LockKind::Permit { permits })
            .await?
            .into_iter()
            .next())
    }

    /// The permit count `name`'s semaphore records (1 if none).
    async fn permits_of(&self, name: &str) -> Result<u32, lockkit_core::LockError> {
        let args = [
            Arg::Int(family(LockKind::Permit { permits: 1 })),
            Arg::Bytes(name.as_bytes()),
        ];
        let rows = self
            .retry("inspect", Some(name), || {
                self.db.fetch(&self.ksql.lock_name, &args, &[Col::Int; 3])
            })
            .await?;
        let n = rows.first().map_or(1, |r| r[0].int());
        Ok(u32::try_from(n).unwrap_or(1).max(1))
    }
}
