//! Taking holds back: the release script ([`RELEASE`]), the operator's
//! forced release ([`FORCE`]) and Redlock's undo of a failed attempt
//! ([`UNDO`]).

use std::sync::LazyLock;

use lockkit_core::LockKind;
use lockkit_core::raw::Hold;
use redis::aio::ConnectionLike;
use redis::{Script, Value};

use super::call::Publish;
use super::inspect::Stored;
use super::inspect::parse_inspect;
use super::reply::{int, parse_flag, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

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
/// KEYS: lock, queue, turn. ARGV: owner, token, channel, `PUBLISH` or `SPUBLISH`,
/// `q` when every waiter queues (then an unmarked hold publishes nothing;
/// `''`: publish even so, for Redlock, whose nodes may have missed the
/// mark), 6. the attempt id whose share this is, 7. where a waiting
/// client's channel differs from the lock channel (see
/// [`Keys::waiter_mark`]).
/// Returns the holds left, or -1 when owner and token do not match; a
/// release that published returns the message instead (its holds left are
/// 0), for the releasing client to hand to the waiters of its own process.
pub(super) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/announce.lua"),
        include_str!("../lua/hold.lua"),
        include_str!("../lua/release.lua")
    ))
});

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

/// Which share of which hold a release takes back: `attempt`'s share of
/// `owner`'s hold of `kind` on `name` under `token`. Built once per
/// release and sent as it is to every server it goes to (each try, and
/// each Redlock node).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseOf<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// What kind of hold: the mutex's script or the kinds' one.
    pub kind: LockKind,
    /// Whose hold.
    pub owner: &'a str,
    /// The hold's token: a hold under another token is not this one.
    pub token: u64,
    /// The acquisition attempt whose share goes.
    pub attempt: &'a str,
}

impl<'a> ReleaseOf<'a> {
    /// `attempt`'s share of `hold`.
    pub fn new(hold: &'a Hold, attempt: &'a str) -> Self {
        ReleaseOf {
            name: &hold.name,
            kind: hold.kind,
            owner: &hold.owner,
            token: hold.token,
            attempt,
        }
    }
}

/// How a release tells the waiters that the name is free.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Telling<'a> {
    /// `PUBLISH` or `SPUBLISH`.
    pub publish: Publish,
    /// Every waiter of this name joins the queue (and marks the hold), so
    /// a mutex's release nobody queued for publishes nothing (Redlock:
    /// see `Inner::queued` in `redlock::release`).
    pub queued: bool,
    /// The nonce of the turn messages of semaphores and read-write locks
    /// (the same on every Redlock node: see `kinds::nonce`).
    pub nonce: &'a str,
}

/// One release of a share of a mutex's hold on one server (see
/// [`RELEASE`]): holds left, or `None` when not held.
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &ReleaseOf<'_>,
    telling: &Telling<'_>,
) -> Result<Released, Fault> {
    let key = keys.lock(of.name);
    let v: Value = RELEASE
        .key(&key)
        .key(keys.queue(of.name))
        .key(keys.turn(of.name))
        .arg(of.owner)
        .arg(of.token)
        .arg(&key)
        .arg(telling.publish.command())
        .arg(if telling.queued { "q" } else { "" })
        .arg(of.attempt)
        .arg(keys.waiter_mark())
        .invoke_async(conn)
        .await?;
    Ok(parse_release(&v)?)
}

/// Removes a hold whoever holds it (operator override) and publishes the
/// release (a name clients queue for stays theirs: see `FREE` in
/// `lua/hold.lua`). KEYS: lock, queue. ARGV: channel, `PUBLISH` or `SPUBLISH`.
/// Returns what was removed, like [`INSPECT`], or `{}`.
pub(super) static FORCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/hold.lua"),
        include_str!("../lua/force.lua")
    ))
});

/// Removes the hold on `name` whoever holds it; what was removed.
pub(crate) async fn force_release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    publish: Publish,
) -> Result<Option<Stored>, Fault> {
    let key = keys.lock(name);
    let v: Value = FORCE
        .key(&key)
        .key(keys.queue(name))
        .arg(&key)
        .arg(publish.command())
        .invoke_async(conn)
        .await?;
    Ok(parse_inspect(&v)?)
}

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
/// KEYS: lock, queue, turn. ARGV: owner, attempt id, channel, `PUBLISH`, waiter id
/// (`''`: none), place, where a waiting client's channel differs from the
/// lock channel (see [`Keys::waiter_mark`]), `s` or `''`.
/// Returns 1 when something was undone.
pub(super) static UNDO: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/announce.lua"),
        include_str!("../lua/hold.lua"),
        include_str!("../lua/undo.lua")
    ))
});

/// What an undo does besides taking the attempt back (see [`UNDO`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UndoThen<'a> {
    /// The waiting caller's id and place, to put it back in the queue.
    pub requeue: Option<(&'a str, u64)>,
    /// Announce a freed name to the queue (or to everybody).
    pub announce: bool,
    /// The nonce of the turn messages of semaphores and read-write locks
    /// (the same on every node; see `kinds::nonce`).
    pub nonce: &'a str,
    /// The waiting client whose grant stands on a quorum, and where the
    /// grant moved its line entry — done here too, on a node outside the
    /// quorum, so that the nodes' lines agree.
    pub moved: Option<(&'a str, LineAfter)>,
}

impl UndoThen<'_> {
    /// The undo scripts' waiter id and place arguments: the waiting
    /// caller's id (also when only its entry moves) and its place to go
    /// back to (`''`: no requeue).
    pub(crate) fn waiter_and_place(&self) -> (&str, String) {
        match (self.requeue, self.moved) {
            (Some((w, p)), _) => (w, p.to_string()),
            (None, Some((w, _))) => (w, String::new()),
            (None, None) => ("", String::new()),
        }
    }

    /// The undo scripts' move argument (see [`LineAfter::arg`]; `''`:
    /// none).
    pub(crate) fn moved_arg(&self) -> String {
        self.moved.map(|(_, after)| after.arg()).unwrap_or_default()
    }
}

/// Whose failed attempt an undo takes back: `owner`'s attempt `attempt`
/// at a hold of `kind` on `name` (found by the attempt id alone, whatever
/// the token).
#[derive(Debug, Clone, Copy)]
pub(crate) struct UndoOf<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// What kind of hold: the mutex's script or the kinds' one.
    pub kind: LockKind,
    /// Whose attempt.
    pub owner: &'a str,
    /// The attempt id.
    pub attempt: &'a str,
}

/// Where a grant moved the caller's line entry (see [`UndoThen::moved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LineAfter {
    /// To the back, at this place (µs): more of its waiters wait.
    Back(u64),
    /// Out of the line.
    Out,
}

impl LineAfter {
    /// The undo scripts' argument: `x` out, `kPLACE` to the back.
    pub(crate) fn arg(self) -> String {
        match self {
            LineAfter::Back(back) => format!("k{back}"),
            LineAfter::Out => "x".to_owned(),
        }
    }
}

/// Redlock: undoes one failed attempt at a mutex on one node (see
/// [`UNDO`]).
pub(crate) async fn undo<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &UndoOf<'_>,
    then: UndoThen<'_>,
) -> Result<bool, Fault> {
    let key = keys.lock(of.name);
    let (waiter, place) = then.waiter_and_place();
    let v: Value = UNDO
        .key(&key)
        .key(keys.queue(of.name))
        .key(keys.turn(of.name))
        .arg(of.owner)
        .arg(of.attempt)
        .arg(&key)
        .arg(Publish::Classic.command())
        .arg(waiter)
        .arg(place)
        .arg(keys.waiter_mark())
        .arg(if then.announce { "" } else { "s" })
        .arg(then.moved_arg())
        .invoke_async(conn)
        .await?;
    Ok(parse_flag("undo", &v)?)
}
