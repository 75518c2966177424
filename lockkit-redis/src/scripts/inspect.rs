//! Reading holds: the inspect script ([`INSPECT`]), the stored hold it
//! reports ([`Stored`]), and the key scan behind `list`.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Script, Value};

use super::reply::{int, text, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

/// Who holds a lock. KEYS: lock. Returns `{owner, count, token, pttl}` or `{}`.
pub(super) static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/hold.lua"),
        include_str!("../lua/inspect.lua")
    ))
});

/// A hold as the server stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stored {
    pub owner: String,
    pub count: u32,
    pub token: u64,
    /// Remaining lease in ms (negative: no expiry).
    pub pttl: i64,
}

impl Stored {
    /// What `inspect` reports for this hold of `name`.
    pub(crate) fn into_info(self, name: &str) -> lockkit_core::LockInfo {
        lockkit_core::LockInfo {
            name: name.to_owned(),
            owner: self.owner,
            hold_count: self.count,
            token: self.token,
            remaining: (self.pttl >= 0).then(|| super::reply::millis(self.pttl)),
            kind: lockkit_core::LockKind::Mutex,
        }
    }
}

pub(crate) fn parse_inspect(v: &Value) -> Result<Option<Stored>, UnexpectedReply> {
    let bad = || unexpected("inspect", v);
    let Value::Array(items) = v else { return Err(bad()) };
    match items.as_slice() {
        [] => Ok(None),
        [owner, count, token, pttl] => Ok(Some(Stored {
            owner: text(owner).ok_or_else(bad)?,
            count: int(count).and_then(|c| u32::try_from(c).ok()).ok_or_else(bad)?,
            token: int(token).and_then(|t| u64::try_from(t).ok()).ok_or_else(bad)?,
            pttl: int(pttl).ok_or_else(bad)?,
        })),
        _ => Err(bad()),
    }
}

/// Who holds `name` on one server.
pub(crate) async fn inspect<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
) -> Result<Option<Stored>, Fault> {
    let v: Value = INSPECT.key(keys.lock(name)).invoke_async(conn).await?;
    Ok(parse_inspect(&v)?)
}

/// The lock keys matching `pattern` on one server (`SCAN`, so it does not
/// block the server); `exec` sends one command to that server.
pub(crate) async fn scan<F, Fut>(pattern: &[u8], mut exec: F) -> Result<Vec<Vec<u8>>, Fault>
where
    F: FnMut(redis::Cmd) -> Fut,
    Fut: std::future::Future<Output = redis::RedisResult<Value>>,
{
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(1000);
        let reply = exec(cmd).await?;
        let bad = || unexpected("scan", &reply);
        let Value::Array(parts) = &reply else {
            return Err(bad().into());
        };
        let [next, Value::Array(batch)] = parts.as_slice() else {
            return Err(bad().into());
        };
        cursor = int(next).and_then(|c| u64::try_from(c).ok()).ok_or_else(bad)?;
        keys.extend(batch.iter().filter_map(|k| match k {
            Value::BulkString(b) => Some(b.clone()),
            _ => None,
        }));
        if cursor == 0 {
            return Ok(keys);
        }
    }
}
