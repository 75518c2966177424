//! Dead waiters: a waiter whose process died leaves its ephemeral node in
//! line until the server ends its session (the session timeout, seconds).
//! The waiter behind it takes it out instead, once the dead one's session
//! has stopped refreshing its liveness record (see `conn::liveness`).
//!
//! Every waiter looks at the nodes it waits for ([`Suspects`]) every
//! [`CHECK_EVERY`] while it waits. A node may be taken out only when all
//! of these hold:
//!
//! - this waiter saw it *waiting* in one of its listings (so it did not
//!   hold from its create on, and holds only once claimed, see
//!   [`crate::claim`]), and has known it for [`STALE_AFTER`]. A waiter
//!   that came to the line only once a dead one's turn had come never saw
//!   it wait: that node is left to its session's end, as a dead holder's;
//! - its session is not this one, and that session's liveness record has
//!   stood at one version for [`STALE_AFTER`] since this backend first
//!   read it, while this backend's own refreshes went through (see
//!   [`Liveness::stale`]: a slow server or an observer that did not run
//!   does not pass for the other's death);
//! - it is unclaimed: it is deleted with a `multi` that checks the node is
//!   at version 0 *and* the liveness record still at the version judged
//!   stale. A claim or a refresh that the server runs first makes the
//!   delete fail.
//!
//! So a node is never deleted under a holder: a node that came to hold
//! after it was seen waiting is claimed (version 1) before its holder uses
//! it, and one that held from its create on was never seen waiting. A live but
//! slow waiter whose node was taken out finds it gone at its next look and
//! queues again at the back (`Waited::Restart`): it is never granted on the
//! deleted node, and never twice.
//!
//! **The bound**: a dead waiter costs the waiter behind it at most about
//! [`STALE_AFTER`] + [`CHECK_EVERY`] + a few round trips after the dead
//! one's last refresh — when it died just before its turn, that much after
//! the release. What sets it is [`STALE_AFTER`], which is also how long a
//! live process may fall silent before its waiters lose their places.
//! What it costs: one write per [`REFRESH_EVERY`] per session that has
//! waiters (a quorum commit on an ensemble), and reads of the records of
//! the sessions waited for, one per session per [`CHECK_EVERY`] per
//! backend. A holder's crash is not covered: its hold ends with its
//! session ([the contract](lockkit_core::contract#crash-release)).
//!
//! [`REFRESH_EVERY`]: crate::conn::liveness::REFRESH_EVERY

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::{Client, Error as ZkError};

use crate::conn::counters::Counters;
use crate::conn::liveness::{LIVE_TAG, REFRESH_EVERY, STALE_AFTER};
use crate::conn::session::{SESSIONS, Session};
use crate::error::BACKEND;
use crate::result::ZkResult;

/// How often a waiter looks whether the nodes it waits for are dead
/// waiters'.
pub(crate) const CHECK_EVERY: Duration = Duration::from_millis(50);

/// An observation forgotten after this long without a read.
const FORGET: Duration = Duration::from_secs(30);

/// The path of session `id`'s marker (its liveness record).
fn marker(id: i64) -> String {
    format!("{SESSIONS}/{id:016x}")
}

/// What this backend saw of one session's liveness record.
#[derive(Debug, Clone, Copy)]
struct Seen {
    /// Its version; `None`: not a record a live session refreshes (gone,
    /// or an earlier lockkit's marker): never stale.
    version: Option<i32>,
    /// When this backend first read that version.
    since: Instant,
    /// The last read.
    read: Instant,
}

/// The liveness records this backend reads, shared by its waiters: one
/// read per session per [`CHECK_EVERY`] however many of them wait behind
/// that session's nodes.
#[derive(Debug, Default)]
pub(crate) struct Liveness {
    seen: Mutex<HashMap<i64, Seen>>,
}

impl Liveness {
    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Seen>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The version of session `id`'s record if it has stood unchanged for
    /// [`STALE_AFTER`] since this backend first read it, while the server
    /// answered a refresh of this backend's own record sent
    /// [`STALE_AFTER`] − [`REFRESH_EVERY`] after that read or later
    /// (`mine`: the send time of its last answered refresh); `None`
    /// otherwise.
    ///
    /// The second condition keeps a slow server, or a process that did not
    /// run, from passing for another session's death: the refreshes that
    /// session would have sent in between reached the server before this
    /// one's, and would have been answered first.
    pub(crate) async fn stale(
        &self,
        client: &Client,
        id: i64,
        mine: Option<std::time::Instant>,
    ) -> ZkResult<Option<i32>> {
        let now = Instant::now();
        let cached = self.seen().get(&id).copied();
        let seen = match cached {
            Some(seen) if now - seen.read < CHECK_EVERY * 9 / 10 => seen,
            _ => {
                let version = match client.get_data(&marker(id)).await {
                    Ok((data, stat)) => (data == LIVE_TAG).then_some(stat.version),
                    Err(ZkError::NoNode) => None,
                    Err(e) => return Err(e),
                };
                let now = Instant::now();
                let mut all = self.seen();
                all.retain(|_, s| now - s.read < FORGET);
                let since = match all.get(&id) {
                    Some(s) if s.version == version => s.since,
                    _ => now,
                };
                let seen = Seen {
                    version,
                    since,
                    read: now,
                };
                all.insert(id, seen);
                seen
            }
        };
        let proven = mine.is_some_and(|t| Instant::from_std(t) >= seen.since + (STALE_AFTER - REFRESH_EVERY));
        Ok(seen.version.filter(|_| seen.read - seen.since >= STALE_AFTER && proven))
    }
}

/// A node a waiter waits for.
#[derive(Debug, Clone)]
struct Suspect {
    name: String,
    seq: i64,
    /// Its session, once known.
    session: Option<i64>,
    /// When this waiter first waited for it.
    since: Instant,
    /// Seen claimed: a holder's.
    claimed: bool,
}

/// The nodes one waiter waits for, and what it saw of them: looked at on
/// every tick of its wait (see [`Suspects::check`]).
pub(crate) struct Suspects {
    session: Arc<Session>,
    parent: String,
    /// The lowest sequence this waiter saw waiting: every node of its line
    /// from there on was a waiter once.
    waiting_from: i64,
    nodes: Vec<Suspect>,
    /// Every node it has waited for, and since when.
    known: HashMap<String, Instant>,
}

impl Suspects {
    pub(crate) fn new(session: &Arc<Session>, parent: &str) -> Self {
        Suspects {
            session: session.clone(),
            parent: parent.to_owned(),
            waiting_from: i64::MAX,
            nodes: Vec::new(),
            known: HashMap::new(),
        }
    }

    /// A listing showed the node of sequence `seq` and every one after it
    /// waiting.
    pub(crate) fn saw_waiting(&mut self, seq: Option<i64>) {
        if let Some(seq) = seq {
            self.waiting_from = self.waiting_from.min(seq);
        }
    }

    /// The wait now waits for these nodes (name, sequence, session if
    /// known).
    pub(crate) fn waiting_for(&mut self, nodes: impl IntoIterator<Item = (String, i64, Option<i64>)>) {
        let now = Instant::now();
        self.nodes = nodes
            .into_iter()
            .map(|(name, seq, session)| {
                let since = *self.known.entry(name.clone()).or_insert(now);
                Suspect {
                    name,
                    seq,
                    session,
                    since,
                    claimed: false,
                }
            })
            .collect();
    }

    /// Takes out the nodes waited for that are dead waiters' (see the
    /// module docs); its watch then fires. Errors are left to the wait's
    /// own next step.
    pub(crate) async fn check(&mut self, liveness: &Liveness, counters: &Counters) {
        for i in 0..self.nodes.len() {
            let node = &self.nodes[i];
            if node.seq < self.waiting_from || node.claimed {
                continue;
            }
            let known_long = node.since.elapsed() >= STALE_AFTER;
            let path = format!("{}/{}", self.parent, node.name);
            let client = &self.session.client;
            let id = match node.session {
                Some(id) => id,
                None => match client.check_stat(&path).await {
                    Ok(Some(stat)) => {
                        self.nodes[i].session = Some(stat.ephemeral_owner);
                        stat.ephemeral_owner
                    }
                    _ => continue,
                },
            };
            if id == self.session.id || id == 0 {
                continue;
            }
            // Read (and so watched over) from the start of the wait.
            let mine = self.session.last_refresh();
            let Ok(Some(version)) = liveness.stale(client, id, mine).await else {
                continue;
            };
            if !known_long {
                continue;
            }
            // A claimed node is a holder's: it stays (its session may well
            // be idle), and is not looked at again.
            match client.check_stat(&path).await {
                Ok(Some(stat)) if stat.version == 0 => {}
                Ok(Some(_)) => {
                    self.nodes[i].claimed = true;
                    continue;
                }
                _ => continue,
            }
            let mut multi = client.new_multi_writer();
            let taken = async {
                multi.add_check_version(&marker(id), version)?;
                multi.add_delete(&path, Some(0))?;
                multi.commit().await.map_err(ZkError::from)
            };
            match taken.await {
                Ok(_) => {
                    Counters::bump(&counters.dead_waiters);
                    tracing::info!(
                        backend = BACKEND,
                        node = %path,
                        session = %format!("{id:#x}"),
                        "took a dead waiter's node out of the line: its session stopped refreshing its liveness"
                    );
                }
                Err(error) => {
                    tracing::debug!(backend = BACKEND, node = %path, %error, "a suspected dead waiter's node stays")
                }
            }
        }
    }
}
