//! Claims: a contender that comes to hold after it waited writes its node
//! (version 0 to 1, its data as it is), so that nobody takes it for a dead
//! waiter's.
//!
//! A node is written only by its holder (a claim, a re-entry, a join by
//! another process of the owner, a downgrade, a release), never while it
//! waits. So a node still at version 0 that was ever seen waiting has not
//! been claimed, whatever its place in the line: the waiter behind it may
//! delete it (versioned: version 0) once its session's liveness record has
//! gone stale (see [`crate::dead`]). A claim and such a delete exclude each
//! other: whichever the server runs first makes the other fail. A node that
//! held from its create on (the listing behind its create shows it
//! granted, with nothing changed in between, see `Queued::at_creation`) is
//! never seen waiting and holds unwritten.
//!
//! **When.** Before the hold is handed out: a hold never rests on
//! anything but its session, so a holder whose process stalls (for less
//! than its session timeout) keeps it. The hand-off after a wait costs one
//! write more than it would unclaimed; a claim deferred until the hold had
//! lasted a while cost less but lost holds whose process stalled.

use zookeeper_client::{Client, Error as ZkError};

use crate::change::Known;
use crate::error::is_connection_loss;
use crate::queue::read;
use crate::result::ZkResult;

/// Claims the node at `path` (as `known`) for its holder before the hold
/// is handed out. `None`: the node is gone (deleted as a dead waiter's, or
/// its session ended) — the hold was never taken. A node that held from
/// its create on (`at_creation`) or was written already (claimed, or
/// written by its owner's other process joining it as a hold) needs no
/// claim.
pub(crate) async fn claim(client: &Client, path: &str, known: &Known, at_creation: bool) -> ZkResult<Option<Known>> {
    if at_creation || known.version > 0 {
        return Ok(Some(known.clone()));
    }
    let encoded = known.data.encode();
    loop {
        match client.set_data(path, &encoded, Some(0)).await {
            Ok(stat) => {
                return Ok(Some(Known {
                    version: stat.version,
                    ..known.clone()
                }));
            }
            Err(ZkError::NoNode) => return Ok(None),
            // Written meanwhile (by the holder's side, or by this claim
            // whose answer was lost): the node as it is says.
            Err(e) if e == ZkError::BadVersion || is_connection_loss(&e) => match read(client, path).await? {
                None | Some((None, _)) => return Ok(None),
                Some((Some(data), stat)) if stat.version > 0 => return Ok(Some(Known::read(data, &stat))),
                Some(_) => {}
            },
            Err(e) => return Err(e),
        }
    }
}
