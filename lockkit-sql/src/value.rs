//! The plain values statements take and give, whichever the database: a
//! statement's arguments ([`Arg`]), the type of a result column ([`Col`]),
//! a decoded result value ([`Val`]), and the conversions of durations,
//! text and counts to and from them.

use std::time::Duration;

/// A statement argument.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    Bytes(&'a [u8]),
    Int(i64),
    Text(Option<&'a str>),
}

/// The type of a result column.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col {
    Int,
    Bytes,
    Text,
}

/// A decoded result value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Val {
    Int(i64),
    Bytes(Vec<u8>),
    Text(String),
}

impl Val {
    pub fn int(&self) -> i64 {
        match self {
            Val::Int(i) => *i,
            _ => 0,
        }
    }

    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Val::Bytes(b) => b,
            Val::Text(t) => t.into_bytes(),
            Val::Int(_) => Vec::new(),
        }
    }
}

/// A duration in whole microseconds, as statements take it.
pub(crate) fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds a statement returned, as a duration (below zero: zero).
pub(crate) fn from_us(v: i64) -> Duration {
    Duration::from_micros(v.max(0) as u64)
}

/// A text or bytes value as a string (lossy where not UTF-8).
pub(crate) fn text(v: Val) -> String {
    String::from_utf8(v.into_bytes()).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A count a statement returned, as a `u32` (clamped).
pub(crate) fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}
