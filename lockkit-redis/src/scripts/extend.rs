//! The extend script ([`EXTEND`]): many holds per call, in one pipeline.

use redis::Value;
use redis::aio::ConnectionLike;

use super::{Replicas, SCRIPTS, int, pipelined, unexpected};
use crate::error::{Fault, UnexpectedReply};

/// Extend holds to at least their ttl from now (never shorter).
///
/// KEYS: lock keys. ARGV: owner, token, ttl ms — three per key.
/// Returns one entry per key: the remaining lease in ms, or -3 when owner
/// and token do not match.
pub(super) const EXTEND: &str = include_str!("../lua/extend.lua");

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

/// One hold to extend: its lock key, owner, token and ttl in ms.
pub(crate) struct ExtendItem<'a> {
    pub key: Vec<u8>,
    pub owner: &'a str,
    pub token: u64,
    pub ttl_ms: u64,
}

/// Extends holds on one server (or one cluster slot): one `EVALSHA` per
/// [`EXTEND_CHUNK`] holds, all in one pipeline, so one round trip; with
/// `replicas`, a `WAIT` ends that pipeline. Returns the remaining lease per
/// hold, `None` where it is not held, and how many replicas acknowledged
/// (`None` without `replicas`).
pub(crate) async fn extend<C: ConnectionLike + Send>(
    conn: &mut C,
    items: &[ExtendItem<'_>],
    replicas: Option<Replicas>,
) -> Result<(Vec<Option<i64>>, Option<u32>), Fault> {
    if items.is_empty() {
        return Ok((Vec::new(), None));
    }
    let invocations: Vec<_> = items
        .chunks(EXTEND_CHUNK)
        .map(|chunk| {
            let mut inv = SCRIPTS.extend.prepare_invoke();
            for item in chunk {
                inv.key(&item.key).arg(item.owner).arg(item.token).arg(item.ttl_ms);
            }
            inv
        })
        .collect();
    let (replies, acked) = match (invocations.as_slice(), replicas) {
        ([one], None) => (vec![one.invoke_async(conn).await?], None),
        _ => pipelined(conn, &SCRIPTS.extend, &invocations, replicas).await?,
    };
    let mut out = Vec::with_capacity(items.len());
    for (reply, chunk) in replies.iter().zip(items.chunks(EXTEND_CHUNK)) {
        out.extend(parse_extend(reply, chunk.len())?);
    }
    if out.len() != items.len() {
        return Err(UnexpectedReply(format!("{} replies to extend {} holds", out.len(), items.len())).into());
    }
    Ok((out, acked))
}
