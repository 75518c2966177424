//! Claims: a semaphore's waiter that comes to hold a permit writes its
//! node (version 0 to 1, its data as it is) before it takes the permit.
//!
//! The waiter behind it watches its predecessor's data: the claim is what
//! tells that waiter it is the first one now, and should watch the
//! parent's children (any permit that goes lets it in). Without it, only
//! the predecessor's going would, and a permit freed meanwhile would stand
//! idle. One write per permit granted after a wait; a permit free at its
//! create (the listing behind the create shows it granted, with nothing
//! changed in between, see `Queued::at_creation`) needs none: nobody
//! waits behind a node that never waited.

use zookeeper_client::{Client, Error as ZkError};

use crate::change::Known;
use crate::error::is_connection_loss;
use crate::queue::{ZkResult, read};

/// Claims the node at `path` (as `known`) for its holder. `None`: the node
/// is gone (its session ended) — the hold was never taken. A node written already (claimed, or written by its
/// owner's other process joining it as a hold) needs no claim.
pub(crate) async fn claim(client: &Client, path: &str, known: &Known) -> ZkResult<Option<Known>> {
    if known.version > 0 {
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
