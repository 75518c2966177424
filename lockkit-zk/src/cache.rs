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
    /// This backend's node of each semaphore permit and read-write hold it
    /// has, by parent, owner and token (an owner's holds of one name in
    /// one session differ by token), so a release is one versioned write.
    pub(crate) kinds: HashMap<KindKey, HeldNode>,
}

/// A semaphore's or read-write lock's hold in [`Held::kinds`]: the parent
/// path, the owner, the token, and whether it is a read hold (an owner's
/// read hold beside its write hold has that hold's token).
pub(crate) type KindKey = (String, String, i64, bool);

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

    /// The record, to add a node of `session` to: the nodes of an ended
    /// session went with it, so they are dropped when the live one records
    /// its first.
    fn held_in(&self, session: i64) -> MutexGuard<'_, Held> {
        let mut held = self.held();
        if held.session != session && self.sessions.peek().is_some_and(|s| s.id == session) {
            held.nodes.retain(|_, h| h.session == session);
            held.kinds.retain(|_, h| h.session == session);
            held.session = session;
        }
        held
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
        let mut held = self.held_in(session);
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

    /// Records this session's node at `path` (as `known`) of the permit or
    /// read-write hold `key`.
    pub(crate) fn remember_kind(&self, key: KindKey, path: &str, known: &Known, session: i64) {
        let node = HeldNode {
            path: path.to_owned(),
            owner: key.1.clone(),
            token: key.2,
            known: known.clone(),
            session,
            alone: true,
        };
        self.held_in(session).kinds.insert(key, node);
    }

    /// This session's node of the permit or read-write hold `key`, if
    /// recorded.
    pub(crate) fn cached_kind(&self, session: &Session, key: &KindKey) -> Option<HeldNode> {
        self.held().kinds.get(key).filter(|h| h.session == session.id).cloned()
    }

    pub(crate) fn forget_kind(&self, key: &KindKey) {
        self.held().kinds.remove(key);
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
