//! Sending script calls: in one pipeline with the `WAIT` for replicas,
//! loading a script a server does not know yet; how turns are published.

use std::time::Instant;

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, ServerErrorKind, Value};

use super::reply::{int, unexpected};
use crate::error::{Fault, UnexpectedReply};

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

/// A reading of a server's clock ([`TIME`](https://redis.io/commands/time)),
/// with when the request that read it was sent and answered.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClockReading {
    pub sent: Instant,
    pub received: Instant,
    pub server_ms: i64,
}

/// What follows a pipeline's script calls: `TIME` (the clock read right
/// after them), then `WAIT` for `replicas`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Tail {
    pub clock: bool,
    pub replicas: Option<Replicas>,
}

/// A pipeline's answers: one reply per script call, how many replicas
/// acknowledged (with [`Tail::replicas`]), the server's clock (with
/// [`Tail::clock`]).
#[derive(Debug)]
pub(crate) struct Piped {
    pub replies: Vec<Value>,
    pub acked: Option<u32>,
    pub clock: Option<ClockReading>,
}

/// Script calls of `scripts` in one pipeline (one round trip), followed
/// by `tail`. A server that does not know a script yet (`NOSCRIPT`) is
/// sent their bodies and the pipeline again.
pub(super) async fn pipelined<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &[&Script],
    calls: &[ScriptInvocation<'_>],
    tail: Tail,
) -> Result<Piped, Fault> {
    let Tail { clock, replicas } = tail;
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in calls {
        pipe.invoke_script(call);
    }
    if clock {
        pipe.cmd("TIME");
    }
    if let Some(r) = replicas {
        pipe.cmd("WAIT").arg(r.n).arg(r.timeout_ms.max(1));
    }
    let mut sent = Instant::now();
    let mut replies: Vec<Value> = pipe.query_async(conn).await?;
    let noscript = |v: &Value| matches!(v, Value::ServerError(e) if e.kind() == Some(ServerErrorKind::NoScript));
    if replies.iter().any(noscript) {
        for script in scripts {
            script.load_async(conn).await?;
        }
        sent = Instant::now();
        replies = pipe.query_async(conn).await?;
    }
    let received = Instant::now();
    let expected = calls.len() + usize::from(clock) + usize::from(replicas.is_some());
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
    let clock = match clock {
        false => None,
        true => {
            let v = replies.pop().unwrap_or(Value::Nil);
            Some(ClockReading {
                sent,
                received,
                server_ms: time_ms(&v).ok_or_else(|| unexpected("time", &v))?,
            })
        }
    };
    Ok(Piped { replies, acked, clock })
}

/// Reads a server's clock on its own.
pub(crate) async fn read_clock<C: ConnectionLike + Send>(conn: &mut C) -> Result<ClockReading, Fault> {
    let sent = Instant::now();
    let v: Value = redis::cmd("TIME").query_async(conn).await?;
    Ok(ClockReading {
        sent,
        received: Instant::now(),
        server_ms: time_ms(&v).ok_or_else(|| unexpected("time", &v))?,
    })
}

/// A `TIME` reply (seconds, microseconds) in ms.
fn time_ms(v: &Value) -> Option<i64> {
    let Value::Array(parts) = v else { return None };
    let (s, us) = (int(parts.first()?)?, int(parts.get(1)?)?);
    s.checked_mul(1000)?.checked_add(us / 1000)
}
