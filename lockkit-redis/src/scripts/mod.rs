//! The Lua scripts: every change to a lock is one script call, so one
//! round trip and atomic. Semaphores and read-write locks have scripts of
//! their own (`kinds`), with the same arguments and replies where they
//! can; the mutex's are untouched by them. The scripts' sources are the files in `lua/`;
//! their arguments and replies are documented here, on each constant (one
//! file per family: acquire, release, extend, inspect). The keys they
//! work on are described in `layout`.
//!
//! # Attempts
//!
//! Every acquisition attempt carries an id (one per `lock` call); the hold
//! keeps one share per attempt (`ID:AT,` in a mutex's value, an `a:ID`
//! field of a semaphore's or read-write lock's hash), so the count is
//! their number. An attempt whose share is already there is a repeat —
//! lockkit's retry after a lost reply, or a command a client library sent
//! again — and changes nothing; a release takes its attempt's share out,
//! and a release whose share is gone changes nothing either. Every script is therefore safe to run twice.
//!
//! # Tokens
//!
//! A first acquisition takes `max(counter + 1, server time in µs)` from the
//! name's counter. Tokens therefore grow strictly per name, and even a server
//! that lost its counter (restart without persistence, failover to a lagging
//! replica) keeps issuing greater tokens — unless its clock is behind the
//! clock that issued the old ones. Tokens stay below 2^53 (until the year
//! 2255), so Lua's doubles hold them exactly.

mod acquire;
mod extend;
mod inspect;
mod kinds;
mod release;

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, ServerErrorKind, Value};

use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

pub(crate) use acquire::{AcquireReply, Claim, Queueing, Share, Slot, TurnOf, acquire, acquire_replicated};
pub(crate) use extend::{ExtendItem, extend};
pub(crate) use inspect::{Stored, inspect, scan};
pub(crate) use kinds::{KindRelease, holders, leave as leave_kind, nonce, release as release_kind, undo as undo_kind};
pub(crate) use release::{LineAfter, Released, UndoThen, force_release, release, undo};

use acquire::ACQUIRE;
use extend::EXTEND;
use inspect::INSPECT;
use kinds::{KINDS_ACQUIRE, KINDS_EXTEND, KINDS_HOLDERS, KINDS_LEAVE, KINDS_RELEASE, KINDS_UNDO};
use release::{FORCE, RELEASE, UNDO};

/// The scripts, hashed once; [`redis::ScriptInvocation`] sends `EVALSHA` and
/// loads the body only when a server answers `NOSCRIPT`.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub release: Script,
    pub extend: Script,
    pub inspect: Script,
    pub force: Script,
    pub undo: Script,
    pub kinds_acquire: Script,
    pub kinds_release: Script,
    pub kinds_extend: Script,
    pub kinds_holders: Script,
    pub kinds_undo: Script,
    pub kinds_leave: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(ACQUIRE),
    release: Script::new(RELEASE),
    extend: Script::new(EXTEND),
    inspect: Script::new(INSPECT),
    force: Script::new(FORCE),
    undo: Script::new(UNDO),
    kinds_acquire: Script::new(KINDS_ACQUIRE),
    kinds_release: Script::new(KINDS_RELEASE),
    kinds_extend: Script::new(KINDS_EXTEND),
    kinds_holders: Script::new(KINDS_HOLDERS),
    kinds_undo: Script::new(KINDS_UNDO),
    kinds_leave: Script::new(KINDS_LEAVE),
});

fn unexpected(what: &str, v: &Value) -> UnexpectedReply {
    UnexpectedReply(format!("{what}: {v:?}"))
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

pub(crate) fn parse_flag(what: &str, v: &Value) -> Result<bool, UnexpectedReply> {
    match int(v) {
        Some(0) => Ok(false),
        Some(1) => Ok(true),
        _ => Err(unexpected(what, v)),
    }
}

/// `PUBLISH` on a single server, `SPUBLISH` (sharded, to the slot's node
/// only) in a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Publish {
    Classic,
    Sharded,
}

impl Publish {
    pub fn command(self) -> &'static str {
        match self {
            Publish::Classic => "PUBLISH",
            Publish::Sharded => "SPUBLISH",
        }
    }
}

/// Waiting for replicas after a change: `WAIT n timeout_ms`, sent in the
/// same pipeline as the script call, so on the same connection (a `WAIT`
/// covers the writes of its own connection only) and, in a cluster, to the
/// same node: a pipeline goes to the slot of its first keyed command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Replicas {
    /// Replicas that must acknowledge.
    pub n: u32,
    /// How long the master waits for them, in ms (at least 1: 0 is forever).
    pub timeout_ms: u64,
}

/// Script calls of `scripts` in one pipeline (one round trip), followed
/// by `WAIT` when `replicas` is given: the calls' replies, and the number
/// of replicas that acknowledged. A server that does not know a script
/// yet (`NOSCRIPT`) is sent their bodies and the pipeline again.
async fn pipelined<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &[&Script],
    calls: &[ScriptInvocation<'_>],
    replicas: Option<Replicas>,
) -> Result<(Vec<Value>, Option<u32>), Fault> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in calls {
        pipe.invoke_script(call);
    }
    if let Some(r) = replicas {
        pipe.cmd("WAIT").arg(r.n).arg(r.timeout_ms.max(1));
    }
    let mut replies: Vec<Value> = pipe.query_async(conn).await?;
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript));
    if replies.iter().any(noscript) {
        for script in scripts {
            script.load_async(conn).await?;
        }
        replies = pipe.query_async(conn).await?;
    }
    let expected = calls.len() + usize::from(replicas.is_some());
    if replies.len() != expected {
        return Err(UnexpectedReply(format!(
            "{} replies to a pipeline of {expected} commands",
            replies.len()
        ))
        .into());
    }
    // A script's error first: a demoted master answers READONLY (retryable)
    // to the script and a plain error to its WAIT.
    if let Some(Value::ServerError(e)) = replies.iter().find(|v| matches!(v, Value::ServerError(_))) {
        return Err(Fault::from(redis::RedisError::from(e.clone())));
    }
    let acked = match replicas {
        None => None,
        Some(_) => replies.pop().map(|v| {
            int(&v)
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| unexpected("wait", &v))
        }),
    }
    .transpose()?;
    Ok((replies, acked))
}

/// A waiting client leaving a line: see [`leave_line`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Leaving<'a> {
    /// The name's key (and channel): a lock key, or a semaphore's or
    /// read-write lock's holds key.
    pub channel: &'a [u8],
    /// The client's waiter id.
    pub id: &'a str,
    /// Only this entry of a read-write lock's line, and only if it was told
    /// its turn and nobody came since (`None`: all of the client's).
    pub entry: Option<&'a str>,
    /// How turns are told (semaphores and read-write locks).
    pub publish: Publish,
}

/// Takes a waiting client out of a line, in one round trip: a mutex's
/// queue, or a semaphore's or read-write lock's line (telling the entries
/// that lets in: see [`leave_kind`]). Errors are ignored: a client left in
/// line is dropped by the next one once its turn passes.
pub(crate) async fn leave_line<C: ConnectionLike + Send>(conn: &mut C, keys: &Keys, leave: &Leaving<'_>) {
    if keys.is_family(leave.channel) {
        let _ = leave_kind(conn, keys, leave).await;
        return;
    }
    let _: redis::RedisResult<()> = redis::cmd("ZREM")
        .arg(keys.queue_of_lock(leave.channel))
        .arg(leave.id)
        .query_async(conn)
        .await;
}

/// A remaining lease in ms as a [`Duration`] (negative: zero).
pub(crate) fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::acquire::parse_acquire;
    use super::extend::parse_extend;
    use super::inspect::parse_inspect;
    use super::release::parse_release;
    use super::*;

    #[test]
    fn replies() {
        let acquired = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"1700000000000123".to_vec()),
            Value::Int(2),
            Value::Int(999),
            Value::BulkString(b"r".to_vec()),
        ]);
        assert_eq!(
            parse_acquire(&acquired).unwrap(),
            AcquireReply::Acquired {
                token: 1_700_000_000_000_123,
                count: 2,
                pttl: 999,
                share: Share::Reentered,
                slot: None,
                told: None,
            }
        );
        let permit = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
            Value::Int(2),
            Value::BulkString(b"k00|a".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&permit).unwrap(),
            AcquireReply::Acquired { slot: Some(2), told: Some(m), .. } if m == b"k00|a"
        ));
        let told = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
            Value::BulkString(b"k00|a b".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&told).unwrap(),
            AcquireReply::Acquired { told: Some(m), .. } if m == b"k00|a b"
        ));
        let new = Value::Array(vec![
            Value::Int(1),
            Value::BulkString(b"7".to_vec()),
            Value::Int(1),
            Value::Int(999),
            Value::BulkString(b"n".to_vec()),
        ]);
        assert!(matches!(
            parse_acquire(&new).unwrap(),
            AcquireReply::Acquired { share: Share::New, .. }
        ));
        let busy = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(vec![]),
            Value::Int(0),
            Value::Int(5),
        ]);
        assert_eq!(
            parse_acquire(&busy).unwrap(),
            AcquireReply::Busy {
                pttl: 5,
                turn_of: None,
                last_write: None
            }
        );
        let turn = Value::Array(vec![
            Value::Int(0),
            Value::BulkString(vec![]),
            Value::Int(0),
            Value::Int(-2),
            Value::BulkString(b"00c0ffee00c0ffee".to_vec()),
            Value::Int(3),
        ]);
        assert_eq!(
            parse_acquire(&turn).unwrap(),
            AcquireReply::Busy {
                pttl: -2,
                last_write: None,
                turn_of: Some(TurnOf {
                    head: "00c0ffee00c0ffee".to_owned(),
                    behind: 3
                })
            }
        );
        assert!(parse_acquire(&Value::Nil).is_err());
        let permits = Value::Array(vec![Value::Int(-1), Value::BulkString(b"3".to_vec())]);
        assert!(matches!(
            parse_acquire(&permits).unwrap(),
            AcquireReply::Conflict { reason } if reason.contains("3 permits")
        ));
        assert!(matches!(
            parse_acquire(&Value::Array(vec![Value::Int(-2)])).unwrap(),
            AcquireReply::Conflict { .. }
        ));
        assert_eq!(
            parse_acquire(&Value::Array(vec![Value::Int(2), Value::Int(1)])).unwrap(),
            AcquireReply::OtherSlot { free: 1 }
        );
        assert!(parse_acquire(&Value::Array(vec![Value::Int(2)])).is_err());
        assert_eq!(parse_release(&Value::Int(-1)).unwrap().remaining, None);
        assert_eq!(parse_release(&Value::Int(0)).unwrap().remaining, Some(0));
        assert_eq!(
            parse_release(&Value::BulkString(b"7|c1".to_vec())).unwrap(),
            Released {
                remaining: Some(0),
                published: Some(b"7|c1".to_vec())
            }
        );
        assert_eq!(
            parse_extend(&Value::Array(vec![Value::Int(-3), Value::Int(10)]), 2).unwrap(),
            vec![None, Some(10)]
        );
        assert!(parse_extend(&Value::Array(vec![]), 1).is_err());
        assert_eq!(parse_inspect(&Value::Array(vec![])).unwrap(), None);
    }
}
