//! The scripts of semaphores and read-write locks: acquire ([`KINDS_ACQUIRE`]),
//! release ([`KINDS_RELEASE`]), extend ([`KINDS_EXTEND`]) and the holders
//! ([`KINDS_HOLDERS`]). The mutex keeps its own scripts, unchanged.

use lockkit_core::backend::{LockInfo, LockKind};
use redis::aio::ConnectionLike;
use redis::{ScriptInvocation, Value};

use super::release::parse_release;
use super::{Publish, Released, SCRIPTS, UndoThen, int, parse_flag, text, unexpected};
use crate::error::{Fault, UnexpectedReply};
use crate::layout::Keys;

/// Acquire a permit, a read or a write hold: the mutex's acquire script
/// ([`ACQUIRE`](super::acquire::ACQUIRE)) for the other kinds, with the
/// same arguments and replies, and its queue rules (a reader passes no
/// writer waiting ahead of it, fair or not).
///
/// KEYS: holds, their lease ends, counter, queue, waiting writers. ARGV:
/// 1–10 as for the mutex (10, where a waiter's channel differs, is not
/// used: these names wake every listener), 11. the kind (`p`, `r`, `w`),
/// 12. a semaphore's permit count, 13. Redlock: the permit slot to take
/// (`''`: any permit; see below).
///
/// Replies as the mutex's, and `{-1, N}` when the semaphore has `N`
/// permits, not the request's, `{-2}` when the owner reads and asks to
/// write, `{2, K}` when a permit is free but not the slot asked for (`K`
/// is the lowest free slot).
///
/// Slots are how Redlock bounds a semaphore: each of the N permits is a
/// slot that a permit takes on a quorum of nodes, as a mutex would. Two
/// permits in one slot would need a node that admitted both, so at most N
/// stand. Counting permits per node alone does not bound them: on 5 nodes,
/// 3 permits of 2 can each stand on 3 nodes (9 shares in 10 places).
pub(super) const KINDS_ACQUIRE: &str = concat!(
    include_str!("../lua/token.lua"),
    include_str!("../lua/holds.lua"),
    include_str!("../lua/kinds_acquire.lua")
);

/// Release one share of a permit, a read or a write hold, as the mutex's
/// release does; a hold that goes wakes every listener when clients queue.
///
/// KEYS: holds, lease ends, queue. ARGV: owner, token, attempt id, kind,
/// `PUBLISH`/`SPUBLISH`. Replies as the mutex's release.
pub(super) const KINDS_RELEASE: &str = concat!(
    include_str!("../lua/holds.lua"),
    include_str!("../lua/kinds_release.lua")
);

/// Redlock: take back what one failed attempt did on a node, as the
/// mutex's [`UNDO`](super::release::UNDO) does: its share, found by the
/// attempt id (of any of the owner's holds of the name); a waiting caller
/// goes back to its place in line (a writer marked as one again); a hold
/// that went wakes the listeners unless silent.
///
/// KEYS: holds, lease ends, queue, waiting writers. ARGV: owner, attempt
/// id, kind, `PUBLISH`, waiter id (`''`: none), place, `s` or `''`.
/// Returns 1 when something was undone.
pub(super) const KINDS_UNDO: &str = concat!(include_str!("../lua/holds.lua"), include_str!("../lua/kinds_undo.lua"));

/// Extend holds of these kinds to at least their ttl from now.
///
/// KEYS: holds and lease ends, two per hold. ARGV: kind, owner, token, ttl
/// ms — four per hold. Replies as the mutex's extend.
pub(super) const KINDS_EXTEND: &str = concat!(
    include_str!("../lua/holds.lua"),
    include_str!("../lua/kinds_extend.lua")
);

/// The live holds of one kind, in the order granted. KEYS: holds, lease
/// ends. ARGV: kind. Returns `{owner, count, token, pttl}` per hold.
pub(super) const KINDS_HOLDERS: &str = concat!(
    include_str!("../lua/holds.lua"),
    include_str!("../lua/kinds_holders.lua")
);

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
    let mut inv = SCRIPTS.kinds_acquire.key(&holds);
    inv.key(keys.expiries(&holds))
        .key(keys.counter(name))
        .key(keys.queue_of_lock(&holds))
        .key(keys.writers(&holds));
    inv
}

/// One release of `attempt`'s share of a hold of `kind`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    kind: LockKind,
    owner: &str,
    token: u64,
    attempt: &str,
    publish: Publish,
) -> Result<Released, Fault> {
    let holds = keys.holds(name, kind);
    let v: Value = SCRIPTS
        .kinds_release
        .key(&holds)
        .key(keys.expiries(&holds))
        .key(keys.queue_of_lock(&holds))
        .arg(owner)
        .arg(token)
        .arg(attempt)
        .arg(flag(kind))
        .arg(publish.command())
        .invoke_async(conn)
        .await?;
    Ok(parse_release(&v)?)
}

/// Redlock: undoes one failed attempt at a hold of `kind` on one node.
pub(crate) async fn undo<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    claim: (&str, &str, &str, LockKind),
    then: UndoThen<'_>,
) -> Result<bool, Fault> {
    let (name, owner, attempt, kind) = claim;
    let holds = keys.holds(name, kind);
    let (waiter, place) = then.requeue.map_or(("", String::new()), |(w, p)| (w, p.to_string()));
    let v: Value = SCRIPTS
        .kinds_undo
        .key(&holds)
        .key(keys.expiries(&holds))
        .key(keys.queue_of_lock(&holds))
        .key(keys.writers(&holds))
        .arg(owner)
        .arg(attempt)
        .arg(flag(kind))
        .arg(Publish::Classic.command())
        .arg(waiter)
        .arg(place)
        .arg(if then.announce { "" } else { "s" })
        .invoke_async(conn)
        .await?;
    Ok(parse_flag("undo", &v)?)
}

/// The live holds of `kind` on `name`, in the order granted.
pub(crate) async fn holders<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    name: &str,
    kind: LockKind,
) -> Result<Vec<LockInfo>, Fault> {
    let holds = keys.holds(name, kind);
    let v: Value = SCRIPTS
        .kinds_holders
        .key(&holds)
        .key(keys.expiries(&holds))
        .arg(flag(kind))
        .invoke_async(conn)
        .await?;
    Ok(parse_holders(name, &v)?)
}

fn parse_holders(name: &str, v: &Value) -> Result<Vec<LockInfo>, UnexpectedReply> {
    let bad = || unexpected("holders", v);
    let Value::Array(items) = v else { return Err(bad()) };
    items
        .iter()
        .map(|item| match item {
            Value::Array(f) => match f.as_slice() {
                [owner, count, token, pttl] => Ok(LockInfo {
                    name: name.to_owned(),
                    owner: text(owner).ok_or_else(bad)?,
                    hold_count: int(count).and_then(|c| u32::try_from(c).ok()).ok_or_else(bad)?,
                    token: int(token).and_then(|t| u64::try_from(t).ok()).ok_or_else(bad)?,
                    remaining: Some(super::millis(int(pttl).ok_or_else(bad)?)),
                }),
                _ => Err(bad()),
            },
            _ => Err(bad()),
        })
        .collect()
}
