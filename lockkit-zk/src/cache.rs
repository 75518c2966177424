//! The held-node cache: this backend's own node of each hold it has (path,
//! data, version, whether other nodes carried the hold as of its last
//! write), so release and re-entry skip a read.

use std::collections::HashMap;
use std::sync::MutexGuard;

use lockkit_core::backend::Hold;

use crate::backend::Inner;
use crate::change::Known;
use crate::conn::Session;

#[derive(Debug, Default)]
pub(crate) struct Held {
    /// The session the entries were last purged for: entries of earlier
    /// sessions are dropped when a new one records its first hold.
    pub(crate) session: i64,
    pub(crate) nodes: HashMap<String, HeldNode>,
}

#[derive(Debug, Clone)]
pub(crate) struct HeldNode {
    /// This session's node of the hold: its contender node, or its share
    /// node of a hold another session's node carries too.
    pub(crate) path: String,
    pub(crate) owner: String,
    /// The hold's fencing token.
    pub(crate) token: i64,
    pub(crate) known: Known,
    pub(crate) session: i64,
    /// No other node carried the hold as of our last write: our node is
    /// its contender node and no share node was seen. A session joining
    /// the hold later bumps our node's version, so our next write notices.
    pub(crate) alone: bool,
}

impl Inner {
    pub(crate) fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records this session's node of a hold after our write (`known`
    /// `None`: deleted).
    pub(crate) fn remember(
        &self,
        name: &str,
        path: &str,
        owner: &str,
        known: Option<Known>,
        session: i64,
        alone: bool,
    ) {
        let mut held = self.held();
        if held.session != session && self.sessions.peek().is_some_and(|s| s.id == session) {
            // The nodes of an ended session went with it.
            held.nodes.retain(|_, h| h.session == session);
            held.session = session;
        }
        match known {
            Some(known) => {
                held.nodes.insert(
                    name.to_owned(),
                    HeldNode {
                        path: path.to_owned(),
                        owner: owner.to_owned(),
                        token: known.token(),
                        known,
                        session,
                        alone,
                    },
                );
            }
            None => {
                if held.nodes.get(name).is_some_and(|h| h.path == path) {
                    held.nodes.remove(name);
                }
            }
        }
    }

    /// Whether this backend has a record of holding `name` for `owner`.
    pub(crate) fn holds(&self, name: &str, owner: &str) -> bool {
        self.held().nodes.get(name).is_some_and(|h| h.owner == owner)
    }

    pub(crate) fn forget(&self, name: &str, path: &str) {
        let mut held = self.held();
        if held.nodes.get(name).is_some_and(|h| h.path == path) {
            held.nodes.remove(name);
        }
    }

    /// This session's node of `hold` as last written, if any.
    pub(crate) fn cached(&self, session: &Session, hold: &Hold, token: i64) -> Option<HeldNode> {
        self.held()
            .nodes
            .get(&hold.name)
            .filter(|h| h.owner == hold.owner && h.token == token && h.session == session.id)
            .cloned()
    }
}
