//! Looking at locks without taking them: one name's hold, the holds under
//! a prefix, and how many wait in a name's line.

use lockkit_core::{LockError, LockInfo};

use crate::handle::{Inner, SqlBackend};
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
        }
    }

    pub(crate) async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let args = [Arg::Bytes(name.as_bytes())];
        let cols = [Col::Bytes, Col::Int, Col::Int, Col::Int];
        let row = self
            .retry("inspect", Some(name), || {
                self.db.fetch_one(&self.sql.inspect, &args, &cols)
            })
            .await?;
        Ok(row.map(|mut r| {
            let owner = std::mem::replace(&mut r[0], Val::Int(0));
            Self::info(name.to_owned(), owner, &r[1], &r[2], &r[3])
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
        Ok(rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let name = text(r.next().unwrap_or(Val::Int(0)));
                let owner = r.next().unwrap_or(Val::Int(0));
                let rest: Vec<Val> = r.collect();
                Inner::info(name, owner, &rest[0], &rest[1], &rest[2])
            })
            .collect())
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
