//! The extend script ([`EXTEND`]): many holds per call, in one pipeline.

use std::sync::LazyLock;
use std::time::Duration;

use lockkit_core::LockKind;
use lockkit_core::raw::{Hold, ttl_millis};
use redis::aio::ConnectionLike;
use redis::{Script, Value};

use super::call::{ClockReading, Replicas, Tail, pipelined};
use super::guard::{MARKER, MarkerChange, marker_call};
use super::kinds;
use super::reply::{int, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

/// Extend holds to at least their ttl from now (never shorter).
///
/// KEYS: lock keys. ARGV: owner, token, ttl ms — three per key.
/// Returns one entry per key: the remaining lease in ms, or -3 when owner
/// and token do not match.
pub(super) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/hold.lua"),
        include_str!("../lua/extend.lua")
    ))
});

/// The most holds one `EXTEND` call carries; more go in further calls of
/// the same pipeline, so a script never blocks the server for long.
pub(crate) const EXTEND_CHUNK: usize = 500;

/// One remaining lease (ms) per extended key; `None` where not held.
pub(crate) fn parse_extend(v: &Value, expected: usize) -> Result<Vec<Option<i64>>, UnexpectedReply> {
    let bad = || unexpected("extend", v);
    let Value::Array(items) = v else { return Err(bad()) };
    if items.len() != expected {
        return Err(bad());
    }
    items
        .iter()
        .map(|i| match int(i) {
            Some(-3) => Ok(None),
            Some(p) => Ok(Some(p)),
            None => Err(bad()),
        })
        .collect()
}

/// One hold to extend: its key (the lock key, or the holds key of a
/// semaphore or read-write lock, with its lease ends), owner, token, ttl
/// in ms and kind.
#[derive(Debug, Clone)]
pub(crate) struct ExtendItem<'a> {
    pub key: Vec<u8>,
    /// The lease ends' key (kinds other than the mutex).
    pub expiries: Vec<u8>,
    pub kind: LockKind,
    pub owner: &'a str,
    pub token: u64,
    pub ttl_ms: u64,
}

impl<'a> ExtendItem<'a> {
    /// The item that extends `hold` to `ttl`.
    pub fn new(keys: &Keys, hold: &'a Hold, ttl: Duration) -> Self {
        let key = keys.holds(&hold.name, hold.kind);
        ExtendItem {
            expiries: match hold.kind {
                LockKind::Mutex => Vec::new(),
                _ => keys.expiries(&key),
            },
            key,
            kind: hold.kind,
            owner: &hold.owner,
            token: hold.token,
            ttl_ms: ttl_millis(ttl),
        }
    }
}

/// Extends holds on one server (or one cluster slot): one `EVALSHA` per
/// [`EXTEND_CHUNK`] holds (mutexes with [`EXTEND`], the other kinds with
/// [`KINDS_EXTEND`](super::kinds::KINDS_EXTEND)), all in one pipeline, so
/// one round trip; with `guard` (the restart guard's marker), the server's
/// clock is read after them; with `replicas`, a `WAIT` ends that pipeline.
pub(crate) async fn extend<C: ConnectionLike + Send>(
    conn: &mut C,
    guard: Option<&Keys>,
    items: &[ExtendItem<'_>],
    replicas: Option<Replicas>,
) -> Result<Extended, Fault> {
    if items.is_empty() {
        return Ok(Extended::default());
    }
    let mut invocations = Vec::new();
    // The restart guard's lease bound covers the extensions before they
    // are made (see `guard`); its reply is not needed.
    if let Some(keys) = guard {
        let longest = items.iter().map(|i| i.ttl_ms).max().unwrap_or(0);
        let change = MarkerChange {
            extend_ms: Some(longest),
            ..MarkerChange::default()
        };
        invocations.push(marker_call(keys, change));
    }
    let skip = invocations.len();
    let (mutexes, others): (Vec<usize>, Vec<usize>) = (0..items.len()).partition(|&i| items[i].kind == LockKind::Mutex);
    let mut chunks: Vec<&[usize]> = Vec::new();
    for chunk in mutexes.chunks(EXTEND_CHUNK) {
        let mut inv = EXTEND.prepare_invoke();
        for item in chunk.iter().map(|&i| &items[i]) {
            inv.key(&item.key).arg(item.owner).arg(item.token).arg(item.ttl_ms);
        }
        invocations.push(inv);
        chunks.push(chunk);
    }
    for chunk in others.chunks(EXTEND_CHUNK) {
        let mut inv = kinds::KINDS_EXTEND.prepare_invoke();
        for item in chunk.iter().map(|&i| &items[i]) {
            inv.key(&item.key)
                .key(&item.expiries)
                .arg(kinds::flag(item.kind))
                .arg(item.owner)
                .arg(item.token)
                .arg(item.ttl_ms);
        }
        invocations.push(inv);
        chunks.push(chunk);
    }
    let tail = Tail {
        clock: guard.is_some(),
        replicas,
    };
    let (replies, acked, clock) = match (invocations.as_slice(), tail.clock || replicas.is_some()) {
        ([one], false) => (vec![one.invoke_async(conn).await?], None, None),
        _ => {
            let piped = pipelined(conn, &[&MARKER, &EXTEND, &kinds::KINDS_EXTEND], &invocations, tail).await?;
            (piped.replies, piped.acked, piped.clock)
        }
    };
    let mut out = vec![None; items.len()];
    let mut answered = 0;
    for (reply, chunk) in replies.iter().skip(skip).zip(chunks) {
        for (&i, lease) in chunk.iter().zip(parse_extend(reply, chunk.len())?) {
            out[i] = lease;
            answered += 1;
        }
    }
    if answered != items.len() {
        return Err(UnexpectedReply(format!("{answered} replies to extend {} holds", items.len())).into());
    }
    Ok(Extended {
        leases: out,
        acked,
        clock,
    })
}

/// One server's answer to [`extend`].
#[derive(Debug, Default)]
pub(crate) struct Extended {
    /// The remaining lease per hold (ms), `None` where it is not held.
    pub leases: Vec<Option<i64>>,
    /// How many replicas acknowledged (with `replicas`).
    pub acked: Option<u32>,
    /// The server's clock after the extensions (with `guard`).
    pub clock: Option<ClockReading>,
}
