//! Looking at locks without taking them: one name's hold, the holds under
//! a prefix, and how many wait in a name's line.

use lockkit_core::{LockError, LockInfo};

use crate::handle::{Inner, SqlBackend};
use crate::sql::is_guard_owner;
use crate::value::{Arg, Col, Val, count, from_us, text};

/// The smallest byte string above every name that starts with `prefix`
/// (UTF-8 never contains 0xFF).
pub(crate) fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xFF {
            end.push(last + 1);
            return end;
        }
    }
    vec![0xFF]
}

impl Inner {
    pub(crate) fn info(name: String, owner: Val, hold_count: &Val, token: &Val, remaining: &Val) -> LockInfo {
        LockInfo {
            name,
            owner: text(owner),
            hold_count: count(hold_count.int()),
            token: token.int() as u64,
            remaining: Some(from_us(remaining.int())),
            kind: lockkit_core::LockKind::Mutex,
        }
    }

    /// The mutex's hold of `name`, if one stands (the guard row of a
    /// semaphore or read-write lock is not one: see `kinds/guard.rs`).
    pub(crate) async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        Ok(self.inspect_row(name).await?.and_then(|(owner, info)| {
            let guard = is_guard_owner(&owner);
            (!guard).then_some(info)
        }))
    }

    /// What holds `name`, whatever the kind: the mutex's hold, or the
    /// first hold of the semaphore or read-write lock whose guard holds it.
    pub(crate) async fn inspect_any(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        match self.inspect_row(name).await? {
            Some((owner, _)) if is_guard_owner(&owner) => self.guarded_by(name, &owner).await,
            row => Ok(row.map(|(_, info)| info)),
        }
    }

    /// The live row of `name` in the lock table: its owner's bytes, and
    /// the row as a mutex's hold.
    async fn inspect_row(&self, name: &str) -> Result<Option<(Vec<u8>, LockInfo)>, LockError> {
        let args = [Arg::Bytes(name.as_bytes())];
        let cols = [Col::Bytes, Col::Int, Col::Int, Col::Int];
        let row = self
            .retry("inspect", Some(name), || {
                self.db.fetch_one(&self.sql.inspect, &args, &cols)
            })
            .await?;
        Ok(row.map(|mut r| {
            let owner = std::mem::replace(&mut r[0], Val::Int(0)).into_bytes();
            let info = Self::info(name.to_owned(), Val::Bytes(owner.clone()), &r[1], &r[2], &r[3]);
            (owner, info)
        }))
    }
}

impl SqlBackend {
    /// How many live waiters stand in `name`'s line (`waiting`).
    pub(crate) async fn count_waiting(&self, name: &str) -> Result<usize, LockError> {
        let inner = &self.inner;
        let args = [Arg::Bytes(name.as_bytes())];
        let row = inner
            .retry("waiting", Some(name), || {
                inner.db.fetch_one(&inner.sql.waiting, &args, &[Col::Int])
            })
            .await?;
        Ok(row.map_or(0, |r| usize::try_from(r[0].int()).unwrap_or(0)))
    }

    /// The holds whose names start with `prefix`, at most `limit` (`list`).
    pub(crate) async fn list_prefix(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = &self.inner;
        let end = prefix_end(prefix);
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let args = [Arg::Bytes(prefix.as_bytes()), Arg::Bytes(&end), Arg::Int(limit)];
        let cols = [Col::Bytes, Col::Bytes, Col::Int, Col::Int, Col::Int];
        let rows = inner
            .retry("list", None, || inner.db.fetch(&inner.sql.list, &args, &cols))
            .await?;
        let mut held = Vec::with_capacity(rows.len());
        for r in rows {
            let mut r = r.into_iter();
            let name = text(r.next().unwrap_or(Val::Int(0)));
            let owner = r.next().unwrap_or(Val::Int(0)).into_bytes();
            let rest: Vec<Val> = r.collect();
            // A guard row stands for the semaphore's or read-write lock's
            // holds of its name.
            let info = match is_guard_owner(&owner) {
                true => inner.guarded_by(&name, &owner).await?,
                false => Some(Inner::info(name, Val::Bytes(owner), &rest[0], &rest[1], &rest[2])),
            };
            held.extend(info);
        }
        Ok(held)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        assert_eq!(prefix_end("ab"), b"ac".to_vec());
        assert_eq!(prefix_end(""), vec![0xFF]);
        assert_eq!(prefix_end("锁"), {
            let mut v = "锁".as_bytes().to_vec();
            *v.last_mut().unwrap() += 1;
            v
        });
    }
}
