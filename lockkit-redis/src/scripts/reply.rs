//! Reading the scripts' replies: integers, texts, flags, remaining
//! leases.

use std::time::Duration;

use redis::Value;

use crate::error::UnexpectedReply;

/// The error for a reply `v` to `what` that is not what the script returns.
pub(super) fn unexpected(what: &str, v: &Value) -> UnexpectedReply {
    UnexpectedReply(format!("{what}: {v:?}"))
}

/// An integer reply (or a number sent as text).
pub(super) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A text reply (or a number, as text).
pub(super) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

/// A 0 or 1 reply as a flag.
pub(crate) fn parse_flag(what: &str, v: &Value) -> Result<bool, UnexpectedReply> {
    match int(v) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(unexpected(what, v)),
    }
}

/// A remaining lease in ms as a [`Duration`] (negative: zero).
pub(crate) fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
