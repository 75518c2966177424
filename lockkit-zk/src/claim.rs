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
//! **When.** A writer's hold is claimed before it is handed out (with its
//! write token's record). Any other hold is claimed *later* ([`defer`]),
//! and only if it lasts [`CLAIM_AFTER`] (a semaphore's permit
//! [`PERMIT_CLAIM_AFTER`]: its claim, or its release, is what moves the
//! waiter behind it up to first waiter, who watches its data): until then
//! the lease rests on the session's liveness record as well as on the
//! session ([`Session::cap`]), so a holder whose process stalls past the
//! staleness bound knows itself lost before its node could be taken. Most
//! holds of a crowd are shorter: the hand-off costs one write (the
//! release), as it did before claims; a longer hold one write more, off
//! the hand-off's path. (Claimed at once, a mutex's hand-off took two
//! commits in a row: 215 against 405 hand-offs/s in alternating runs of
//! the 200-waiter crowd.)

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, Error as ZkError};

use crate::change::Known;
use crate::conn::Session;
use crate::conn::liveness::{Cap, LiveGuard};
use crate::error::is_connection_loss;
use crate::queue::{ZkResult, read};

/// How long a mutex's or a reader's hold granted after a wait lives
/// unclaimed.
pub(crate) const CLAIM_AFTER: Duration = Duration::from_millis(50);

/// How long a semaphore's permit granted after a wait lives unclaimed: its
/// claim (or its release) moves the next waiter up to first waiter, so a
/// permit that comes free meanwhile waits at most this long for it.
pub(crate) const PERMIT_CLAIM_AFTER: Duration = Duration::ZERO;

/// Claims the node at `path` (as `known`) for its holder. `None`: the node
/// is gone (deleted as a dead waiter's, or its session ended) — the hold
/// was never taken. A node written already (claimed, or written by its
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

/// A hold granted after a wait, not claimed yet: its lease's deadline is
/// `cap`'s, and `live` keeps the session's liveness record fresh until it
/// is claimed.
pub(crate) struct Unclaimed {
    pub(crate) cap: Cap,
    pub(crate) live: LiveGuard,
}

impl Unclaimed {
    /// A hold of `session` granted after a wait on a node whose create was
    /// first sent at `created` (`None` when nobody can take the session for
    /// dead: nothing to claim).
    pub(crate) fn new(session: &Arc<Session>, created: std::time::Instant) -> Option<Self> {
        session.has_liveness().then(|| Unclaimed {
            cap: session.cap(created),
            live: session.live(),
        })
    }
}

/// Claims the held node at `path` (as `known`) once it has been held for
/// `after`, unless it was released before; then lifts the lease's
/// cap and hands the claimed node to `claimed` (the backend's record of
/// its holds). The lease is lost if the cap passes first or the node is
/// gone.
pub(crate) fn defer(
    session: &Arc<Session>,
    path: &str,
    known: Known,
    unclaimed: Unclaimed,
    after: Duration,
    claimed: impl FnOnce(Known) + Send + 'static,
) {
    let (session, path) = (Arc::downgrade(session), path.to_owned());
    tokio::spawn(async move {
        let Unclaimed { cap, live } = unclaimed;
        let claim_at = Instant::now() + after;
        let outcome = loop {
            let Some(s) = session.upgrade() else { return };
            if !s.holds_node(&path) {
                return;
            }
            let dead = s.dead_signal();
            let working = Instant::now() >= claim_at;
            let claiming = async {
                match working {
                    true => Some(claim(&s.client, &path, &known).await),
                    false => None,
                }
            };
            let until = Instant::from_std(cap.deadline.get());
            tokio::select! {
                Some(r) = claiming => break r,
                _ = tokio::time::sleep_until(claim_at), if !working => {}
                _ = tokio::time::sleep_until(until) => {
                    if cap.deadline.passed() {
                        break Ok(None);
                    }
                }
                _ = dead.cancelled() => return,
            }
        };
        let Some(s) = session.upgrade() else { return };
        match outcome {
            Ok(Some(node)) => {
                cap.deadline.lift_cap();
                claimed(node);
            }
            Ok(None) => s.node_lost(
                &path,
                "its claim came too late: the node may be taken for a dead waiter's",
            ),
            Err(e) => s.node_lost(&path, &format!("claiming the node failed: {e}")),
        }
        drop(live);
    });
}
