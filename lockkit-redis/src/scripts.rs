//! The key layout and the Lua scripts: every change to a lock is one script
//! call, so one round trip and atomic. The scripts' sources are the files in
//! `lua/`; their arguments and replies are documented here, on each constant.
//!
//! # Keys
//!
//! For a prefix `P` (default `lockkit:`) and a lock name `N`:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `P{TAG}:N` | hash, with the lease as its expiry | `o` owner, `c` hold count, `t` fencing token, `w` present once a client queued for this hold, `a:ID` one field per share of the hold: the attempt id of the acquisition that made it |
//! | `P{TAG}fence` | string | the fencing counter of every name with this `TAG` |
//! | `P{TAG}q:N` | sorted set | the clients (processes) waiting for `N`, by the server time (µs) they joined: oldest first |
//!
//! and a release is published, with the id of the waiting client whose turn
//! it is (the queue's head), on the own channels of the head and of the
//! next in line only (`P{TAG}wID:N` for waiter `ID`, in the lock's slot):
//! the head retries at once, the next only if nobody took the lock within
//! a fallback delay — so a hand-off costs the same few commands and
//! messages however many processes wait. A release nobody queued for
//! goes to everybody on the channel named like the lock key. Fair (the default), a free name is taken only by the
//! head (or by anybody when nobody queued): a client that just released
//! queues behind the others, and the head leaves the queue when it takes
//! the lock (or goes to its back, when more of its waiters wait). A head
//! that let its turn pass — dead, or gone — is dropped by the next fair
//! attempt after the fallback delay, which then tells the new head. A client joins the
//! queue in the same script call that finds the lock busy, and marks the
//! hold (`w`) there; a hold taken while the queue exists is marked from the
//! start. A release of an unmarked hold has nobody to tell and publishes
//! nothing (two commands instead of four).
//! `TAG` is three hex digits of the FNV-1a hash of `N` (4096 buckets), so the
//! lock key, its counter and its channel hash to one cluster slot whatever
//! `N` contains — braces, NUL, newlines, any UTF-8 are stored as they are,
//! after the tag. A fixed number of counters (instead of one per name) keeps
//! memory bounded when names are ever-new (`order:<id>`); tokens still grow
//! per name, since each name always draws from the same counter.
//!
//! # Attempts
//!
//! Every acquisition attempt carries an id (one per `lock` call); the hold
//! keeps one `a:ID` field per share, so `c` is their number. An attempt
//! whose field is already there is a repeat — lockkit's retry after a lost
//! reply, or a command a client library sent again — and changes nothing;
//! a release deletes its attempt's field, and a release whose field is gone
//! changes nothing either. Every script is therefore safe to run twice.
//!
//! # Tokens
//!
//! A first acquisition takes `max(counter + 1, server time in µs)` from the
//! name's counter. Tokens therefore grow strictly per name, and even a server
//! that lost its counter (restart without persistence, failover to a lagging
//! replica) keeps issuing greater tokens — unless its clock is behind the
//! clock that issued the old ones. Tokens stay below 2^53 (until the year
//! 2255), so Lua's doubles hold them exactly.

use std::sync::LazyLock;

use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, ServerErrorKind, Value};

use crate::error::{Fault, UnexpectedReply};
use crate::waiters::Turn;

/// Number of hash-tag buckets, and so of fencing counters per prefix.
const TAG_BUCKETS: u32 = 4096;

/// Builds the keys of lock names under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: Vec<u8>,
}

/// FNV-1a, 32 bits. Part of the key format: changing it would let two
/// versions of lockkit hold the same name at once.
fn fnv1a32(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

impl Keys {
    pub fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.as_bytes().to_vec(),
        }
    }

    /// The hash tag of a name, braces included: `{a3f}`.
    pub fn tag(name: &str) -> [u8; 5] {
        let bucket = fnv1a32(name.as_bytes()) % TAG_BUCKETS;
        let hex = |n: u32| b"0123456789abcdef"[(n & 0xf) as usize];
        [b'{', hex(bucket >> 8), hex(bucket >> 4), hex(bucket), b'}']
    }

    /// `P{TAG}:NAME`, also the name of the release channel.
    pub fn lock(&self, name: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 6 + name.len());
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&Self::tag(name));
        k.push(b':');
        k.extend_from_slice(name.as_bytes());
        k
    }

    /// A `SCAN MATCH` pattern for the lock keys of names starting with
    /// `name_prefix` (glob characters escaped).
    pub fn scan_pattern(&self, name_prefix: &str) -> Vec<u8> {
        let mut p = Vec::with_capacity(self.prefix.len() + name_prefix.len() + 8);
        let escape = |p: &mut Vec<u8>, bytes: &[u8]| {
            for b in bytes {
                if matches!(b, b'*' | b'?' | b'[' | b']' | b'\\') {
                    p.push(b'\\');
                }
                p.push(*b);
            }
        };
        escape(&mut p, &self.prefix);
        p.extend_from_slice(b"{???}:");
        escape(&mut p, name_prefix.as_bytes());
        p.push(b'*');
        p
    }

    /// The name a lock key belongs to, if it is one of this prefix's lock
    /// keys and its name is UTF-8.
    pub fn name_of(&self, key: &[u8]) -> Option<String> {
        let rest = key.strip_prefix(self.prefix.as_slice())?;
        let name = rest
            .get(6..)
            .filter(|_| rest.first() == Some(&b'{') && rest.get(4..6) == Some(b"}:"))?;
        let name = String::from_utf8(name.to_vec()).ok()?;
        (self.lock(&name) == key).then_some(name)
    }

    /// `P{TAG}q:NAME`: the waiting clients.
    pub fn queue(&self, name: &str) -> Vec<u8> {
        let mut k = self.lock(name);
        k.splice(self.prefix.len() + 5..self.prefix.len() + 5, [b'q']);
        k
    }

    /// The queue key of a lock key (see [`queue`](Self::queue)).
    pub fn queue_of_lock(&self, lock_key: &[u8]) -> Vec<u8> {
        let mut k = lock_key.to_vec();
        k.insert(self.prefix.len() + 5, b'q');
        k
    }

    /// Where a waiting client's own channel differs from the lock key: the
    /// byte after `P{TAG}` (the scripts insert `w` and the client's id
    /// there).
    pub fn waiter_mark(&self) -> usize {
        self.prefix.len() + 5
    }

    /// `P{TAG}wID:NAME`, the channel of waiting client `waiter` on the lock
    /// whose key (and broadcast channel) is `lock_key`: where a release
    /// tells that client its turn has come.
    pub fn waiter_channel(&self, lock_key: &[u8], waiter: &str) -> Vec<u8> {
        let mark = self.waiter_mark().min(lock_key.len());
        let mut c = Vec::with_capacity(lock_key.len() + 1 + waiter.len());
        c.extend_from_slice(&lock_key[..mark]);
        c.push(b'w');
        c.extend_from_slice(waiter.as_bytes());
        c.extend_from_slice(&lock_key[mark..]);
        c
    }

    /// The lock key of a channel of waiting client `waiter` (see
    /// [`waiter_channel`](Self::waiter_channel)), if it is one.
    pub fn lock_of_waiter_channel(&self, channel: &[u8], waiter: &str) -> Option<Vec<u8>> {
        let mark = self.waiter_mark();
        let end = mark + 1 + waiter.len();
        let own = channel.get(mark..end)?;
        (own[0] == b'w' && &own[1..] == waiter.as_bytes()).then(|| [&channel[..mark], &channel[end..]].concat())
    }

    /// `P{TAG}fence`.
    pub fn counter(&self, name: &str) -> Vec<u8> {
        let mut k = Vec::with_capacity(self.prefix.len() + 10);
        k.extend_from_slice(&self.prefix);
        k.extend_from_slice(&Self::tag(name));
        k.extend_from_slice(b"fence");
        k
    }
}

/// Acquire, re-enter, or report the holder's remaining lease.
///
/// KEYS: lock, counter, queue. ARGV:
/// 1. owner, 2. ttl ms,
/// 3. the attempt id (its share is recorded as the field `a:ID`; a repeat
///    of the attempt is recognised by it and changes nothing),
/// 4. token proposal (`''`: none; Redlock proposes the same value to every
///    node so that they agree on the token without a second round trip; a
///    node takes it only as a floor, and only when it is less than a minute
///    ahead of its own clock),
/// 5. the caller's waiter id (`''`: no queue), 6. flags: `w` join the queue
///    when busy, `k` stay in it after acquiring (others of the same client
///    still wait: to the back of the line), `f` fair: a free name is taken
///    only by the queue's head (or when nobody queued), 7. a waiter id to
///    drop from the queue (one that was given the turn and did not take it;
///    `''`: none), 8. `PUBLISH`/`SPUBLISH` to announce a taken lock to the
///    queue (`''`: never), 9. the caller's place in the queue when it joins
///    (µs; `''`: the server's time — Redlock gives every node the same
///    place, the time its waiting began, so that the nodes' queues agree),
///    10. where a waiting client's channel differs from the lock key (see
///    [`Keys::waiter_mark`]).
///
/// Returns `{1, token, count, pttl, KIND}` when the caller holds it (`KIND`
/// `n`: a new hold, `r`: this attempt re-entered the owner's hold, `p`: this
/// attempt was already counted in it), `{0, '', 0, pttl}` when another
/// owner holds it, or `{0, '', 0, -2, HEAD, BEHIND}` when it is free but it
/// is the turn of the waiting client `HEAD` (fair only), with `BEHIND`
/// clients queued between it and the caller.
const ACQUIRE: &str = concat!(include_str!("lua/waiter_channel.lua"), include_str!("lua/acquire.lua"));

/// Release one share of a hold: delete its attempt's field and decrement;
/// a share already gone (a repeated release) changes nothing and reports
/// the holds left; at zero delete the hold and publish
/// `TOKEN|HEAD` — `HEAD` the waiting client whose turn it is (the queue's
/// head; it leaves the queue, or goes to its back, when it takes the lock)
/// — on the own channels of the head and of the next in line only, or
/// `TOKEN|` on the lock's channel (to everybody) when nobody queued.
/// Publishing uses `pcall`: a user without pub/sub permission still
/// releases.
///
/// KEYS: lock, queue. ARGV: owner, token, channel, `PUBLISH` or `SPUBLISH`,
/// `q` when every waiter queues (then an unmarked hold publishes nothing;
/// `''`: publish even so, for Redlock, whose nodes may have missed the
/// mark), 6. the attempt id whose share this is, 7. where a waiting
/// client's channel differs from the lock channel (see
/// [`Keys::waiter_mark`]).
/// Returns the holds left, or -1 when owner and token do not match; a
/// release that published returns the message instead (its holds left are
/// 0), for the releasing client to hand to the waiters of its own process.
const RELEASE: &str = concat!(
    include_str!("lua/waiter_channel.lua"),
    include_str!("lua/announce.lua"),
    include_str!("lua/release.lua")
);

/// Extend holds to at least their ttl from now (never shorter).
///
/// KEYS: lock keys. ARGV: owner, token, ttl ms — three per key.
/// Returns one entry per key: the remaining lease in ms, or -3 when owner
/// and token do not match.
const EXTEND: &str = include_str!("lua/extend.lua");

/// Who holds a lock. KEYS: lock. Returns `{owner, count, token, pttl}` or `{}`.
const INSPECT: &str = include_str!("lua/inspect.lua");

/// Removes a hold whoever holds it (operator override) and publishes the
/// release. KEYS: lock. ARGV: channel, `PUBLISH` or `SPUBLISH`.
/// Returns what was removed, like [`INSPECT`], or `{}`.
const FORCE: &str = include_str!("lua/force.lua");

/// Redlock: take back what one failed attempt did on a node — the hold it
/// created or the share it added — found by the attempt's field, so an
/// undo that runs twice, or before a straggling acquire, is harmless.
///
/// A waiting caller (ARGV[5]) goes back to its place in the queue (ARGV[6],
/// µs), which taking the hold here had taken it out of. A freed name is
/// then announced as a release is — to the queue's head and the next in
/// line (never the caller), or to everybody when nobody queued — unless
/// ARGV[8] is `s` (silent: the caller holds the name on a quorum, or tries
/// again at once).
///
/// KEYS: lock, queue. ARGV: owner, attempt id, channel, `PUBLISH`, waiter id
/// (`''`: none), place, where a waiting client's channel differs from the
/// lock channel (see [`Keys::waiter_mark`]), `s` or `''`.
/// Returns 1 when something was undone.
const UNDO: &str = concat!(
    include_str!("lua/waiter_channel.lua"),
    include_str!("lua/announce.lua"),
    include_str!("lua/undo.lua")
);

/// The scripts, hashed once; [`redis::ScriptInvocation`] sends `EVALSHA` and
/// loads the body only when a server answers `NOSCRIPT`.
pub(crate) struct Scripts {
    pub acquire: Script,
    pub release: Script,
    pub extend: Script,
    pub inspect: Script,
    pub force: Script,
    pub undo: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: Script::new(ACQUIRE),
    release: Script::new(RELEASE),
    extend: Script::new(EXTEND),
    inspect: Script::new(INSPECT),
    force: Script::new(FORCE),
    undo: Script::new(UNDO),
});

/// The most holds one `EXTEND` call carries; more go in further calls of
/// the same pipeline, so a script never blocks the server for long.
pub(crate) const EXTEND_CHUNK: usize = 500;

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
    },
    /// Another owner holds it for `pttl` more ms (negative: unknown), or it
    /// is free but another client's turn.
    Busy {
        /// The holder's remaining lease in ms.
        pttl: i64,
        /// Free, but another waiting client's turn (fair only).
        turn_of: Option<TurnOf>,
    },
}

/// A free lock that is another waiting client's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnOf {
    /// The client whose turn it is (the queue's head).
    pub head: String,
    /// How many clients wait between the head and the caller (0: the
    /// caller is next in line).
    pub behind: u32,
}

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

pub(crate) fn parse_acquire(v: &Value) -> Result<AcquireReply, UnexpectedReply> {
    let bad = || unexpected("acquire", v);
    let Value::Array(items) = v else { return Err(bad()) };
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
            share: match rest {
                [kind] => match text(kind).as_deref() {
                    Some("n") => Share::New,
                    Some("r") => Share::Reentered,
                    Some("p") => Share::Repeated,
                    _ => return Err(bad()),
                },
                _ => return Err(bad()),
            },
        }),
        Some(0) => match rest {
            [] => Ok(AcquireReply::Busy { pttl, turn_of: None }),
            [head, behind] => Ok(AcquireReply::Busy {
                pttl,
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

/// What a release did: the holds left (`None`: it was not held), and the
/// message it published, if it did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Released {
    pub remaining: Option<u32>,
    pub published: Option<Vec<u8>>,
}

/// Parses the release script's reply (see [`RELEASE`]).
pub(crate) fn parse_release(v: &Value) -> Result<Released, UnexpectedReply> {
    let remaining = |n| Released {
        remaining: n,
        published: None,
    };
    match (v, int(v)) {
        (Value::BulkString(m), _) => Ok(Released {
            remaining: Some(0),
            published: Some(m.clone()),
        }),
        (_, Some(-1)) => Ok(remaining(None)),
        (_, Some(n)) if n >= 0 => Ok(remaining(Some(u32::try_from(n).unwrap_or(u32::MAX)))),
        _ => Err(unexpected("release", v)),
    }
}

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
            remaining: (self.pttl >= 0).then(|| crate::backend::millis(self.pttl)),
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

/// How an acquire attempt takes part in the waiter queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Queueing {
    /// This client's waiter id (`None`: no queue).
    pub waiter: Option<String>,
    /// Join the queue when busy.
    pub join: bool,
    /// Stay in the queue after acquiring: more of this client's waiters wait.
    pub stay: bool,
    /// A waiter that was given the turn and did not take it.
    pub stale: Option<String>,
    /// A free name goes to the queue's head only (see [`AcquireRequest::fair`]).
    ///
    /// [`AcquireRequest::fair`]: lockkit_core::backend::AcquireRequest::fair
    pub fair: bool,
    /// How to announce a taken lock (`None`: never).
    pub publish: Option<Publish>,
    /// The place in the queue when joining, in µs (`None`: the server's
    /// time).
    pub place: Option<u64>,
}

impl Queueing {
    /// How an attempt takes part in the waiter queue: a waiting one (with
    /// its `turn`, as client `waiter`) joins it, at `place` if given; every
    /// acquisition announces itself with `publish`; a fair one takes a free
    /// name only when the queue is empty or its head is this client.
    pub fn new(waiter: Option<&str>, turn: Option<Turn>, fair: bool, publish: Publish, place: Option<u64>) -> Self {
        let publish = Some(publish);
        match turn {
            Some(turn) => Queueing {
                waiter: waiter.map(str::to_owned),
                join: true,
                stay: turn.others_wait,
                stale: turn.stale,
                fair,
                publish,
                place,
            },
            None => Queueing {
                fair,
                publish,
                ..Queueing::default()
            },
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

/// The acquire script call of one attempt on one server.
#[allow(clippy::too_many_arguments)]
fn acquire_call(
    keys: &Keys,
    name: &str,
    owner: &str,
    ttl_ms: u64,
    attempt: &str,
    proposal: Option<u64>,
    queueing: &Queueing,
) -> ScriptInvocation<'static> {
    let mut flags = String::with_capacity(3);
    for (on, flag) in [(queueing.join, 'w'), (queueing.stay, 'k'), (queueing.fair, 'f')] {
        if on {
            flags.push(flag);
        }
    }
    let mut inv = SCRIPTS.acquire.key(keys.lock(name));
    inv.key(keys.counter(name))
        .key(keys.queue(name))
        .arg(owner)
        .arg(ttl_ms)
        .arg(attempt)
        .arg(proposal.map(|p| p.to_string()).unwrap_or_default())
        .arg(queueing.waiter.as_deref().unwrap_or(""))
        .arg(flags)
        .arg(queueing.stale.as_deref().unwrap_or(""))
        .arg(queueing.publish.map_or("", Publish::command))
        .arg(queueing.place.map(|p| p.to_string()).unwrap_or_default())
        .arg(keys.waiter_mark());
    inv
}

/// One acquire attempt on one server.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn acquire<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    owner: &str,
    ttl_ms: u64,
    attempt: &str,
    proposal: Option<u64>,
    queueing: &Queueing,
) -> Result<AcquireReply, Fault> {
    let v: Value = acquire_call(keys, name, owner, ttl_ms, attempt, proposal, queueing)
        .invoke_async(conn)
        .await?;
    Ok(parse_acquire(&v)?)
}

/// One acquire attempt on one server followed by `WAIT` for `replicas`, in
/// one round trip: the reply, and how many replicas acknowledged the
/// connection's writes up to it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn acquire_replicated<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    owner: &str,
    ttl_ms: u64,
    attempt: &str,
    queueing: &Queueing,
    replicas: Replicas,
) -> Result<(AcquireReply, u32), Fault> {
    let call = acquire_call(keys, name, owner, ttl_ms, attempt, None, queueing);
    let (replies, acked) = pipelined(conn, &SCRIPTS.acquire, std::slice::from_ref(&call), Some(replicas)).await?;
    let reply = replies
        .first()
        .ok_or_else(|| UnexpectedReply("no reply to acquire".into()))?;
    Ok((parse_acquire(reply)?, acked.unwrap_or(0)))
}

/// Script calls of one `script` in one pipeline (one round trip), followed
/// by `WAIT` when `replicas` is given: the calls' replies, and the number
/// of replicas that acknowledged. A server that does not know the script
/// yet (`NOSCRIPT`) is sent its body and the pipeline again.
async fn pipelined<C: ConnectionLike + Send>(
    conn: &mut C,
    script: &Script,
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
        script.load_async(conn).await?;
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
        return Err(Fault::Redis(e.clone().into()));
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

/// One release of `attempt`'s share on one server: holds left, or `None`
/// when not held. `queued`: every waiter of this name joins the queue (and
/// marks the hold), so a release nobody queued for publishes nothing.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    owner: &str,
    token: u64,
    attempt: &str,
    publish: Publish,
    queued: bool,
) -> Result<Released, Fault> {
    let key = keys.lock(name);
    let v: Value = SCRIPTS
        .release
        .key(&key)
        .key(keys.queue(name))
        .arg(owner)
        .arg(token)
        .arg(&key)
        .arg(publish.command())
        .arg(if queued { "q" } else { "" })
        .arg(attempt)
        .arg(keys.waiter_mark())
        .invoke_async(conn)
        .await?;
    Ok(parse_release(&v)?)
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

/// Who holds `name` on one server.
pub(crate) async fn inspect<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
) -> Result<Option<Stored>, Fault> {
    let v: Value = SCRIPTS.inspect.key(keys.lock(name)).invoke_async(conn).await?;
    Ok(parse_inspect(&v)?)
}

/// Removes the hold on `name` whoever holds it; what was removed.
pub(crate) async fn force_release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    publish: Publish,
) -> Result<Option<Stored>, Fault> {
    let key = keys.lock(name);
    let v: Value = SCRIPTS
        .force
        .key(&key)
        .arg(&key)
        .arg(publish.command())
        .invoke_async(conn)
        .await?;
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

/// What an undo does besides taking the attempt back (see [`UNDO`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UndoThen<'a> {
    /// The waiting caller's id and place, to put it back in the queue.
    pub requeue: Option<(&'a str, u64)>,
    /// Announce a freed name to the queue (or to everybody).
    pub announce: bool,
}

/// Redlock: undoes one failed attempt on one node.
pub(crate) async fn undo<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    owner: &str,
    attempt: &str,
    then: UndoThen<'_>,
) -> Result<bool, Fault> {
    let key = keys.lock(name);
    let (waiter, place) = then.requeue.map_or(("", String::new()), |(w, p)| (w, p.to_string()));
    let v: Value = SCRIPTS
        .undo
        .key(&key)
        .key(keys.queue(name))
        .arg(owner)
        .arg(attempt)
        .arg(&key)
        .arg(Publish::Classic.command())
        .arg(waiter)
        .arg(place)
        .arg(keys.waiter_mark())
        .arg(if then.announce { "" } else { "s" })
        .invoke_async(conn)
        .await?;
    Ok(parse_flag("undo", &v)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_standard_one() {
        assert_eq!(fnv1a32(b""), 0x811c_9dc5);
        assert_eq!(fnv1a32(b"a"), 0xe40c_292c);
        assert_eq!(fnv1a32(b"foobar"), 0xbf9c_f968);
    }

    #[test]
    fn key_layout_is_stable() {
        let k = Keys::new("lockkit:");
        assert_eq!(k.lock("a"), b"lockkit:{92c}:a");
        assert_eq!(k.counter("a"), b"lockkit:{92c}fence");
        assert_eq!(k.queue("a"), b"lockkit:{92c}q:a");
        assert_eq!(k.queue_of_lock(&k.lock("a")), k.queue("a"));
        assert_eq!(k.lock("foobar"), b"lockkit:{968}:foobar");
        // Braces and NUL in a name stay after the tag and change nothing.
        let odd = "x{y}z\0{";
        let key = k.lock(odd);
        assert!(key.starts_with(b"lockkit:{"));
        assert_eq!(&key[8..13], &Keys::tag(odd));
        assert!(key.ends_with(odd.as_bytes()));
        assert_eq!(Keys::new("").lock("a"), b"{92c}:a");
        assert_eq!(k.name_of(&k.lock(odd)).as_deref(), Some(odd));
        assert_eq!(k.name_of(b"lockkit:{92c}:b"), None, "wrong tag for the name");
        assert_eq!(k.name_of(&k.counter("a")), None);
        assert_eq!(k.name_of(&k.queue("a")), None);
        assert_eq!(k.scan_pattern("a*[b]"), b"lockkit:{???}:a\\*\\[b\\]*");
    }

    #[test]
    fn waiter_channels_sit_in_the_lock_slot_and_map_back() {
        let k = Keys::new("lockkit:");
        let id = "00c0ffee00c0ffee";
        let own = k.waiter_channel(&k.lock("a"), id);
        assert_eq!(own, b"lockkit:{92c}w00c0ffee00c0ffee:a");
        assert_eq!(k.lock_of_waiter_channel(&own, id), Some(k.lock("a")));
        // Another client's channel, the lock channel itself, and a name that
        // looks like a waiter channel are not this client's.
        assert_eq!(k.lock_of_waiter_channel(&own, "1111111111111111"), None);
        assert_eq!(k.lock_of_waiter_channel(&k.lock("a"), id), None);
        let lookalike = k.lock("w00c0ffee00c0ffee:a");
        assert_eq!(k.lock_of_waiter_channel(&lookalike, id), None);
        assert_eq!(k.name_of(&own), None, "a waiter channel is no lock key");
    }

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
            }
        );
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
            AcquireReply::Busy { pttl: 5, turn_of: None }
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
                turn_of: Some(TurnOf {
                    head: "00c0ffee00c0ffee".to_owned(),
                    behind: 3
                })
            }
        );
        assert!(parse_acquire(&Value::Nil).is_err());
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
