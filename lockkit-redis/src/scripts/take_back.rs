//! Taking an attempt's share back whatever the hold's kind: a release of
//! one share of a hold, and Redlock's undo of a failed attempt, each sent
//! to the mutex's script or to the kinds' one. The callers (one server,
//! every Redlock node) then need not tell the kinds apart.

use lockkit_core::LockKind;
use redis::aio::ConnectionLike;

use super::kinds;
use super::release::{self, ReleaseOf, Released, Telling, UndoOf, UndoThen};
use crate::error::Fault;
use crate::layout::Keys;

/// One release of `of`'s share on one server: the holds left (`None`:
/// not held), and the message it published, if it did.
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &ReleaseOf<'_>,
    telling: &Telling<'_>,
) -> Result<Released, Fault> {
    match of.kind {
        LockKind::Mutex => release::release(conn, keys, of, telling).await,
        _ => kinds::release(conn, keys, of, telling).await,
    }
}

/// Redlock: undoes one failed attempt on one node; whether something was
/// undone.
pub(crate) async fn undo<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &Keys,
    of: &UndoOf<'_>,
    then: UndoThen<'_>,
) -> Result<bool, Fault> {
    match of.kind {
        LockKind::Mutex => release::undo(conn, keys, of, then).await,
        _ => kinds::undo(conn, keys, of, then).await,
    }
}
