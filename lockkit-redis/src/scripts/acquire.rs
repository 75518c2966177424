//! The acquire script ([`ACQUIRE`]): its call, its reply, and how an attempt
//! takes part in the waiter queue ([`Queueing`]).

use std::sync::LazyLock;

use lockkit_core::LockKind;
use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use super::call::{ClockReading, Publish, Replicas, Tail, pipelined};
use super::kinds;
use super::reply::{int, text, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;
use crate::turn::{FALLBACK, Turn, TurnOf};

/// Acquire, re-enter, or report the holder's remaining lease.
///
/// KEYS: lock, counter, queue, turn, the lease ends of the name's
/// semaphore and read-write lock holds (a name is one lock: refused while
/// they stand, looked at again after 200 ms at most). ARGV:
/// 1. owner, 2. ttl ms,
/// 3. the attempt id (its share is recorded in the hold; a repeat
///    of the attempt is recognised by it and changes nothing),
/// 4. token proposal (`''`: none; Redlock proposes the same value to every
///    node so that they agree on the token without a second round trip; a
///    node takes it only as a floor, and only when it is less than a minute
///    ahead of its own clock),
/// 5. the caller's waiter id (`''`: no queue), 6. flags: `w` join the queue
///    when busy, `s` (semaphores and read-write locks) keep the place in
///    line after acquiring (more readers woken by this turn come), `k` stay
///    in it after acquiring (others of the same client
///    still wait: to the back of the line), `f` fair: a free name is taken
///    only by the queue's head (or when nobody queued), 7. a waiter id to
///    drop from the queue (one that was given the turn and did not take it;
///    `''`: none), 8. `PUBLISH`/`SPUBLISH` to announce a taken lock to the
///    queue (`''`: never), 9. the caller's place in the queue when it joins
///    (µs; `''`: the server's time — Redlock gives every node the same
///    place, the time its waiting began, so that the nodes' queues agree),
///    10. where a waiting client's channel differs from the lock key (see
///    [`Keys::waiter_mark`]), 11. where a grant sends the caller when more
///    of its waiters wait (µs; `''`: the server's time), 12. the fallback
///    delay (ms): the head named in 7 is dropped only once it was told its
///    turn here at least that long ago (the turn key).
///
/// Returns `{1, token, count, pttl, KIND}` when the caller holds it (`KIND`
/// `n`: a new hold, `r`: this attempt re-entered the owner's hold, `p`: this
/// attempt was already counted in it; from the kinds' script, a permit's
/// slot follows, -1 for none), `{0, '', 0, pttl}` when another
/// owner holds it, or `{0, '', 0, -2, HEAD, BEHIND}` when it is free but it
/// is the turn of the waiting client `HEAD` (fair only), with `BEHIND`
/// clients queued between it and the caller (and, from the kinds' script,
/// `{2, SLOT}`: see [`AcquireReply::OtherSlot`]). With the restart guard
/// on, the marker is the last key (the 7th; the kinds' 8th), and `{-3, MS}` a refusal by it (see
/// [`AcquireReply::Guarded`]).
pub(super) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/announce.lua"),
        include_str!("../lua/token.lua"),
        include_str!("../lua/hold.lua"),
        include_str!("../lua/guard.lua"),
        include_str!("../lua/one_name.lua"),
        include_str!("../lua/acquire.lua")
    ))
});

/// How an acquisition found the caller's hold on one server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// A new hold, made by this attempt.
    New,
    /// The owner's existing hold, re-entered by this attempt.
    Reentered,
    /// The owner's existing hold, in which this attempt was already counted
    /// (a repeat).
    Repeated,
}

/// What one acquire script call found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The caller holds it now.
    Acquired {
        /// The hold's token on this server.
        token: u64,
        /// The hold count after this acquisition.
        count: u32,
        /// The remaining lease in ms.
        pttl: i64,
        /// How this attempt took part in the hold.
        share: Share,
        /// Redlock's semaphores: the permit slot the hold stands in.
        slot: Option<u32>,
        /// The message naming the clients this attempt told their turn
        /// (semaphores and read-write locks), for this process's own
        /// waiters.
        told: Option<Vec<u8>>,
    },
    /// Another owner holds it for `pttl` more ms (negative: unknown), or it
    /// is free but another client's turn.
    Busy {
        /// The holder's remaining lease in ms.
        pttl: i64,
        /// Free, but another waiting client's turn (fair only).
        turn_of: Option<TurnOf>,
        /// A read-write lock's last write token on this server, told to a
        /// refused reader.
        last_write: Option<u64>,
    },
    /// Redlock's semaphores: a permit is free on this server, but not the
    /// slot the claim asked for; `free` is the lowest free one.
    OtherSlot {
        /// A slot free on this server.
        free: u32,
    },
    /// Refused whoever holds it (semaphores and read-write locks): the
    /// request does not fit the name's state.
    Conflict {
        /// Why, for the error.
        reason: String,
    },
    /// Refused by the restart guard (see `guard`): the server lost its
    /// data and is quarantined for `left_ms` more (`None`: it has no
    /// marker yet; the client sets its quarantine).
    Guarded {
        /// The quarantine left, in ms.
        left_ms: Option<u64>,
    },
}

pub(crate) fn parse_acquire(v: &Value) -> Result<AcquireReply, UnexpectedReply> {
    let bad = || unexpected("acquire", v);
    let Value::Array(items) = v else { return Err(bad()) };
    match (items.first().and_then(int), items.get(1).and_then(text)) {
        (Some(-1), Some(permits)) => {
            return Ok(AcquireReply::Conflict {
                reason: format!("the semaphore has {permits} permits, the request says otherwise"),
            });
        }
        (Some(2), _) => {
            let free = items.get(1).and_then(int).and_then(|s| u32::try_from(s).ok());
            return free.map(|free| AcquireReply::OtherSlot { free }).ok_or_else(bad);
        }
        (Some(-3), _) => {
            let left = items.get(1).and_then(int).ok_or_else(bad)?;
            return Ok(AcquireReply::Guarded {
                left_ms: u64::try_from(left).ok(),
            });
        }
        (Some(-2), _) => {
            return Ok(AcquireReply::Conflict {
                reason: "the owner holds it for reading: a read hold cannot be upgraded; release it first".to_owned(),
            });
        }
        _ => {}
    }
    let (flag, token, count, pttl, rest) = match items.as_slice() {
        [flag, token, count, pttl, rest @ ..] => (flag, token, count, pttl, rest),
        _ => return Err(bad()),
    };
    let pttl = int(pttl).ok_or_else(bad)?;
    let u64_of = |v: &Value| int(v).and_then(|t| u64::try_from(t).ok()).ok_or_else(bad);
    match int(flag) {
        Some(1) => Ok(AcquireReply::Acquired {
            token: u64_of(token)?,
            count: int(count).and_then(|c| u32::try_from(c).ok()).ok_or_else(bad)?,
            pttl,
            share: match rest.first().and_then(text).as_deref() {
                Some("n") => Share::New,
                Some("r") => Share::Reentered,
                Some("p") => Share::Repeated,
                _ => return Err(bad()),
            },
            // A permit's slot (an integer, -1: none), then the message.
            slot: match rest.get(1) {
                Some(Value::Int(k)) => u32::try_from(*k).ok(),
                _ => None,
            },
            told: match rest {
                [_] | [_, Value::Int(_)] => None,
                [_, Value::BulkString(m)] | [_, Value::Int(_), Value::BulkString(m)] => Some(m.clone()),
                _ => return Err(bad()),
            },
        }),
        Some(0) => match rest {
            [] => Ok(AcquireReply::Busy {
                pttl,
                turn_of: None,
                last_write: int(token).and_then(|t| u64::try_from(t).ok()),
            }),
            [head, behind] => Ok(AcquireReply::Busy {
                pttl,
                last_write: int(token).and_then(|t| u64::try_from(t).ok()),
                turn_of: Some(TurnOf {
                    head: text(head).ok_or_else(bad)?,
                    behind: int(behind).and_then(|b| u32::try_from(b).ok()).ok_or_else(bad)?,
                }),
            }),
            _ => Err(bad()),
        },
        _ => Err(bad()),
    }
}

/// How an acquire attempt takes part in the waiter queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queueing {
    /// This client's waiter id (`None`: no queue).
    pub waiter: Option<String>,
    /// Join the queue when busy.
    pub join: bool,
    /// Stay in the queue after acquiring: more of this client's waiters wait.
    pub stay: bool,
    /// Keep the place in line after acquiring: more of this client's
    /// readers woken by the same turn come (read-write locks; see
    /// [`Turn::batch_follows`]).
    pub in_place: bool,
    /// A waiter that was given the turn and did not take it.
    pub stale: Option<String>,
    /// A free name goes to the queue's head only (see [`AcquireRequest::fair`]).
    ///
    /// [`AcquireRequest::fair`]: lockkit_core::raw::AcquireRequest::fair
    pub fair: bool,
    /// How to announce a taken lock (`None`: never).
    pub publish: Option<Publish>,
    /// The place in the queue when joining, in µs (`None`: the server's
    /// time).
    pub place: Option<u64>,
    /// The back of the line, in µs, where a client whose other waiters
    /// wait goes after a grant (`None`: the server's time). Redlock gives every node the time of the
    /// attempt, so that their lines agree.
    pub back: Option<u64>,
}

impl Queueing {
    /// How an attempt takes part in the waiter queue: a waiting one (with
    /// its `turn`, as client `waiter`) joins it — with `caller_places`
    /// (Redlock), at the client's place of the turn, and after a grant to
    /// the back at the turn's time, so that every node's line agrees —;
    /// every acquisition announces itself with `publish`; a fair one takes
    /// a free name only when the queue is empty or its head is this client.
    pub fn new(waiter: Option<&str>, turn: Option<Turn>, fair: bool, publish: Publish, caller_places: bool) -> Self {
        let publish = Some(publish);
        match turn {
            Some(turn) => Queueing {
                waiter: waiter.map(str::to_owned),
                join: true,
                stay: turn.others_wait,
                in_place: turn.batch_follows,
                stale: turn.stale,
                fair,
                publish,
                place: caller_places.then_some(turn.place),
                back: caller_places.then_some(turn.back),
            },
            None => Queueing {
                fair,
                publish,
                ..Queueing::default()
            },
        }
    }
}

/// Which permit slot a claim takes (Redlock's semaphores: see
/// [`KINDS_ACQUIRE`](super::kinds::KINDS_ACQUIRE)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Any permit (a single server: permits have no slots).
    Any,
    /// The slot the server assigns: the r-th free one, r the caller's
    /// place among the clients the line lets in — the same on every node
    /// whose line and holds agree, and different for clients let in
    /// together.
    Assigned,
    /// This slot.
    Exact(u32),
}

impl Slot {
    fn arg(self) -> String {
        match self {
            Slot::Any => String::new(),
            Slot::Assigned => "*".to_owned(),
            Slot::Exact(k) => k.to_string(),
        }
    }
}

/// One attempt's arguments to the acquire script: `owner`'s attempt
/// `attempt` at `name` for `ttl_ms`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Claim<'a> {
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) ttl_ms: u64,
    pub(crate) attempt: &'a str,
    /// Redlock: the token every node is to issue, unless it issued more.
    pub(crate) proposal: Option<u64>,
    pub(crate) queueing: &'a Queueing,
    /// What kind of hold.
    pub(crate) kind: LockKind,
    /// Redlock's semaphores: the permit slot to take (see
    /// [`KINDS_ACQUIRE`](super::kinds::KINDS_ACQUIRE)).
    pub(crate) slot: Slot,
    /// The nonce of the turn messages the claim sends (semaphores and
    /// read-write locks; the same on every Redlock node: see
    /// [`nonce`](super::kinds::nonce)).
    pub(crate) nonce: &'a str,
    /// The restart guard is on: the server's marker is checked (see
    /// `guard`).
    pub(crate) guarded: bool,
}

impl Claim<'_> {
    /// The script the claim runs.
    fn script(&self) -> &'static Script {
        match self.kind {
            LockKind::Mutex => &ACQUIRE,
            _ => &kinds::KINDS_ACQUIRE,
        }
    }
}

/// The acquire script call of one attempt on one server.
fn acquire_call(keys: &Keys, claim: &Claim<'_>) -> ScriptInvocation<'static> {
    let (name, queueing) = (claim.name, claim.queueing);
    let mut flags = String::with_capacity(3);
    let flags_of = [
        (queueing.join, 'w'),
        (queueing.stay, 'k'),
        (queueing.fair, 'f'),
        (queueing.in_place, 's'),
    ];
    for (on, flag) in flags_of {
        if on {
            flags.push(flag);
        }
    }
    let mut inv = match claim.kind {
        LockKind::Mutex => {
            let mut inv = ACQUIRE.key(keys.lock(name));
            inv.key(keys.counter(name)).key(keys.queue(name)).key(keys.turn(name));
            // One name, one lock: the lease ends of its other kinds' holds.
            for other in [LockKind::Permit { permits: 1 }, LockKind::Read] {
                inv.key(keys.expiries(&keys.holds(name, other)));
            }
            inv
        }
        kind => kinds::acquire_call(keys, name, kind),
    };
    if claim.guarded {
        inv.key(keys.marker());
    }
    inv.arg(claim.owner)
        .arg(claim.ttl_ms)
        .arg(claim.attempt)
        .arg(claim.proposal.map(|p| p.to_string()).unwrap_or_default())
        .arg(queueing.waiter.as_deref().unwrap_or(""))
        .arg(flags)
        .arg(queueing.stale.as_deref().unwrap_or(""))
        .arg(queueing.publish.map_or("", Publish::command))
        .arg(queueing.place.map(|p| p.to_string()).unwrap_or_default())
        .arg(keys.waiter_mark());
    match claim.kind {
        LockKind::Mutex => {
            inv.arg(queueing.back.map(|p| p.to_string()).unwrap_or_default())
                .arg(FALLBACK.as_millis().to_string());
        }
        LockKind::Permit { permits } => {
            inv.arg(kinds::flag(claim.kind))
                .arg(permits)
                .arg(claim.slot.arg())
                .arg(claim.nonce)
                .arg(queueing.back.map(|p| p.to_string()).unwrap_or_default());
        }
        kind => {
            inv.arg(kinds::flag(kind))
                .arg(0)
                .arg("")
                .arg(claim.nonce)
                .arg(queueing.back.map(|p| p.to_string()).unwrap_or_default());
        }
    }
    inv
}

/// One acquire attempt's answer from one server.
#[derive(Debug)]
pub(crate) struct Answer {
    pub reply: AcquireReply,
    /// How many replicas acknowledged the connection's writes up to it
    /// (with `replicas`).
    pub acked: Option<u32>,
    /// The server's clock right after (with the restart guard on).
    pub clock: Option<ClockReading>,
}

/// One acquire attempt on one server, followed in the same round trip by
/// `TIME` when the claim is guarded (the restart guard also watches the
/// server's clock) and by `WAIT` for `replicas`. Without either, a single
/// `EVALSHA`.
pub(crate) async fn acquire<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    claim: &Claim<'_>,
    replicas: Option<Replicas>,
) -> Result<Answer, Fault> {
    let call = acquire_call(keys, claim);
    let tail = Tail {
        clock: claim.guarded,
        replicas,
    };
    if !tail.clock && tail.replicas.is_none() {
        let v: Value = call.invoke_async(conn).await?;
        return Ok(Answer {
            reply: parse_acquire(&v)?,
            acked: None,
            clock: None,
        });
    }
    let piped = pipelined(conn, &[claim.script()], std::slice::from_ref(&call), tail).await?;
    let reply = piped
        .replies
        .first()
        .ok_or_else(|| UnexpectedReply("no reply to acquire".into()))?;
    Ok(Answer {
        reply: parse_acquire(reply)?,
        acked: piped.acked,
        clock: piped.clock,
    })
}
