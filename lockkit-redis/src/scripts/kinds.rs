//! The scripts of semaphores and read-write locks: acquire ([`KINDS_ACQUIRE`]),
//! release ([`KINDS_RELEASE`]), extend ([`KINDS_EXTEND`]) and the holders
//! ([`KINDS_HOLDERS`]). The mutex keeps its own scripts, unchanged.

use std::sync::LazyLock;

use lockkit_core::{LockInfo, LockKind};
use redis::aio::ConnectionLike;
use redis::{Script, ScriptInvocation, Value};

use super::call::Publish;
use super::release::{ReleaseOf, Released, Telling, UndoOf, UndoThen, parse_release};
use super::reply::{int, parse_flag, text, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

/// Acquire a permit, a read or a write hold: the mutex's acquire script
/// ([`ACQUIRE`](super::acquire::ACQUIRE)) for the other kinds, with the
/// same arguments and replies, and the line's rule
/// (`lockkit_core::raw::admitted`): a waiting client takes a hold when
/// it is among the clients the line admits (a semaphore of N: the first
/// N − held; a read-write lock: the readers before the first waiting
/// writer, or that writer alone once nobody holds), not only when it is
/// first; a reader passes no waiting writer, fair or not.
///
/// Every change that lets clients in tells those clients, and only them,
/// on their own channels (see `admit` in `lua/holds.lua`): a crowd costs
/// each hand-off the same messages and attempts as two waiters. A client
/// told its turn that does not come within the fallback delay is dropped
/// by the next fallback attempt (ARGV 7, which names the client it saw
/// given the turn), and a client whose channel has no listener (its
/// process died) at once.
///
/// KEYS: holds, their lease ends, counter, line, the entries told their
/// turn, the name's mutex lock key and the lease ends of its other kind's
/// holds (a name is one lock: a new hold is refused while they stand, and
/// looks again after 200 ms at most). ARGV: 1–10 as for the mutex, 11. the kind
/// (`p`, `r`, `w`), 12. a semaphore's permit count, 13. Redlock: the
/// permit slot to take (`''`: any permit, `*`: the one the server assigns;
/// see below), 14. the nonce of the turn messages it sends (the same on
/// every Redlock node).
///
/// Replies as the mutex's, and `{-1, N}` when the semaphore has `N`
/// permits, not the request's, `{-2}` when the owner reads and asks to
/// write, `{2, K}` when a permit is free but not the slot asked for (`K`
/// is the slot the server would assign). A permit's grant names its slot
/// (-1: none) after the share; a grant that told clients their turn adds
/// the message naming them (for this process's own waiters).
///
/// Slots are how Redlock bounds a semaphore: each of the N permits is a
/// slot that a permit takes on a quorum of nodes, as a mutex would. Two
/// permits in one slot would need a node that admitted both, so at most N
/// stand. Counting permits per node alone does not bound them: on 5 nodes,
/// 3 permits of 2 can each stand on 3 nodes (9 shares in 10 places). A
/// waiting client asks for the slot each node assigns it: the r-th free
/// slot, r its place among the clients the line lets in, which differs for
/// clients let in together and is the same on every node whose line and
/// holds agree, whatever order the attempts reach it in.
pub(super) static KINDS_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/token.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/guard.lua"),
        include_str!("../lua/one_name.lua"),
        include_str!("../lua/kinds_acquire.lua")
    ))
});

/// Release one share of a permit, a read or a write hold, as the mutex's
/// release does; a hold that goes tells the clients it lets in.
///
/// KEYS: holds, lease ends, line, told. ARGV: owner,
/// token, attempt id, kind, `PUBLISH`/`SPUBLISH`, where a waiter's channel
/// differs from the holds key, message nonce. Replies as the mutex's
/// release: the holds left, -1, or the message naming the clients told.
pub(super) static KINDS_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/kinds_release.lua")
    ))
});

/// Redlock: take back what one failed attempt did on a node, as the
/// mutex's [`UNDO`](super::release::UNDO) does: its share, found by the
/// attempt id (of any of the owner's holds of the name); a waiting caller
/// goes back to its place in line (a writer marked as one again); a hold
/// that went wakes the listeners unless silent.
///
/// After a grant that stands on a quorum (ARGV 10: `k` and a place, or
/// `x`), the caller's entry is moved as the grant moved it on the quorum:
/// to the back, or out of the line — on every node, also where nothing
/// was taken.
///
/// KEYS: holds, lease ends, line, told. ARGV: owner, attempt id, kind,
/// `PUBLISH`, waiter id (`''`: none), place (`''`: no requeue), `s` or
/// `''`, where a waiter's channel differs from the holds key, message
/// nonce, the move (`''`: none). Returns 1 when something was undone.
pub(super) static KINDS_UNDO: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/kinds_undo.lua")
    ))
});

/// A waiting client leaves the line of a semaphore or read-write lock
/// (its last waiter there gave up): its entries (to read and to write) out
/// of the line, and the entries it stood in the way of (or whose turn it
/// was given) are told.
///
/// With ARGV 6 (an entry: the client's entry to read), only that entry
/// leaves, and only if it was told its turn and no attempt of its client
/// came since: a reader's entry left in line after its turn, when its
/// client has no reader waiting any more (a reader that joins meanwhile
/// clears the mark, and keeps the entry).
///
/// KEYS: holds, lease ends, line, told. ARGV: waiter id, kind (`p` or
/// `r`), `PUBLISH`/`SPUBLISH`, where a waiter's channel differs from the
/// holds key, message nonce, the entry (`''`: all). Returns how many
/// entries left.
pub(super) static KINDS_LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/kinds_leave.lua")
    ))
});

/// Extend holds of these kinds to at least their ttl from now.
///
/// KEYS: holds and lease ends, two per hold. ARGV: kind, owner, token, ttl
/// ms — four per hold. Replies as the mutex's extend.
pub(super) static KINDS_EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/kinds_extend.lua")
    ))
});

/// The live holds of one kind, in the order granted. KEYS: holds, lease
/// ends. ARGV: kind. Returns `{owner, count, token, pttl, slot, permits}`
/// per hold (`slot`: Redlock's permit slot, -1 none; `permits`: a
/// semaphore's count, -1 for the other kinds).
pub(super) static KINDS_HOLDERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/clock.lua"),
        include_str!("../lua/waiter_channel.lua"),
        include_str!("../lua/holds.lua"),
        include_str!("../lua/kinds_holders.lua")
    ))
});

/// The scripts' name of a kind (not the mutex).
pub(crate) fn flag(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Permit { .. } => "p",
        LockKind::Read => "r",
        _ => "w",
    }
}

/// The acquire script's call of a kind other than the mutex, with its
/// keys (the arguments follow: see [`KINDS_ACQUIRE`]).
pub(super) fn acquire_call(keys: &Keys, name: &str, kind: LockKind) -> ScriptInvocation<'static> {
    let holds = keys.holds(name, kind);
    let other = match kind {
        LockKind::Permit { .. } => LockKind::Read,
        _ => LockKind::Permit { permits: 1 },
    };
    let mut inv = KINDS_ACQUIRE.key(&holds);
    inv.key(keys.expiries(&holds))
        .key(keys.counter(name))
        .key(keys.queue_of_lock(&holds))
        .key(keys.told(&holds))
        .key(keys.lock(name))
        .key(keys.expiries(&keys.holds(name, other)));
    inv
}

/// A nonce for the turn messages of one change (16 hex digits): the same
/// for every Redlock node the change runs on, so a client hears it once.
pub(crate) fn nonce() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// One release of a share of a hold of these kinds (see
/// [`KINDS_RELEASE`]).
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &ReleaseOf<'_>,
    telling: &Telling<'_>,
) -> Result<Released, Fault> {
    let holds = keys.holds(of.name, of.kind);
    let v: Value = KINDS_RELEASE
        .key(&holds)
        .key(keys.expiries(&holds))
        .key(keys.queue_of_lock(&holds))
        .key(keys.told(&holds))
        .arg(of.owner)
        .arg(of.token)
        .arg(of.attempt)
        .arg(flag(of.kind))
        .arg(telling.publish.command())
        .arg(keys.waiter_mark())
        .arg(telling.nonce)
        .invoke_async(conn)
        .await?;
    Ok(parse_release(&v)?)
}

/// Redlock: undoes one failed attempt at a hold of these kinds on one
/// node (see [`KINDS_UNDO`]).
pub(crate) async fn undo<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &UndoOf<'_>,
    then: UndoThen<'_>,
) -> Result<bool, Fault> {
    let holds = keys.holds(of.name, of.kind);
    let (waiter, place) = then.waiter_and_place();
    let v: Value = KINDS_UNDO
        .key(&holds)
        .key(keys.expiries(&holds))
        .key(keys.queue_of_lock(&holds))
        .key(keys.told(&holds))
        .arg(of.owner)
        .arg(of.attempt)
        .arg(flag(of.kind))
        .arg(Publish::Classic.command())
        .arg(waiter)
        .arg(place)
        .arg(if then.announce { "" } else { "s" })
        .arg(keys.waiter_mark())
        .arg(then.nonce)
        .arg(then.moved_arg())
        .invoke_async(conn)
        .await?;
    Ok(parse_flag("undo", &v)?)
}

/// The live holds of `kind` on `name`, in the order granted, each with
/// the permit slot it stands in (Redlock's semaphores; `None`: no slot).
pub(crate) async fn holders<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    kind: LockKind,
) -> Result<Vec<(LockInfo, Option<u32>)>, Fault> {
    let holds = keys.holds(name, kind);
    let v: Value = KINDS_HOLDERS
        .key(&holds)
        .key(keys.expiries(&holds))
        .arg(flag(kind))
        .invoke_async(conn)
        .await?;
    Ok(parse_holders(name, kind, &v)?)
}

/// Parses the holders script's reply (see [`KINDS_HOLDERS`]).
fn parse_holders(name: &str, kind: LockKind, v: &Value) -> Result<Vec<(LockInfo, Option<u32>)>, UnexpectedReply> {
    let bad = || unexpected("holders", v);
    let Value::Array(items) = v else { return Err(bad()) };
    items
        .iter()
        .map(|item| match item {
            Value::Array(f) => match f.as_slice() {
                [owner, count, token, pttl, slot, permits] => Ok((
                    LockInfo {
                        name: name.to_owned(),
                        owner: text(owner).ok_or_else(bad)?,
                        hold_count: int(count).and_then(|c| u32::try_from(c).ok()).ok_or_else(bad)?,
                        token: int(token).and_then(|t| u64::try_from(t).ok()).ok_or_else(bad)?,
                        remaining: Some(super::reply::millis(int(pttl).ok_or_else(bad)?)),
                        kind: match (kind, int(permits).and_then(|n| u32::try_from(n).ok())) {
                            (LockKind::Permit { .. }, Some(permits)) => LockKind::Permit { permits },
                            _ => kind,
                        },
                    },
                    int(slot).and_then(|k| u32::try_from(k).ok()),
                )),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}
