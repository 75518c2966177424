//! The held-node cache: this backend's own node of each hold it has (path,
//! data, version, whether other nodes carried the hold as of its last
//! write), so release and re-entry skip a read. Here the backend's
//! operations on it; the records are in [`crate::held`].

use std::sync::MutexGuard;

use lockkit_core::raw::Hold;

use crate::backend::Inner;
use crate::change::Known;
use crate::conn::session::Session;
use crate::held::{Held, HeldNode, KindKey};

/// This session's node of a mutex's hold after our write, as the cache
/// records it (see [`Inner::remember`]).
pub(crate) struct Written<'a> {
    /// The lock's name.
    pub(crate) name: &'a str,
    /// The node's path.
    pub(crate) path: &'a str,
    /// The hold's owner.
    pub(crate) owner: &'a str,
    /// The node's data and version now; `None`: deleted.
    pub(crate) known: Option<Known>,
    /// The session the node is of.
    pub(crate) session: i64,
    /// No other node carries the hold (see [`HeldNode::alone`]).
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
    pub(crate) fn remember(&self, written: Written<'_>) {
        let Written {
            name,
            path,
            owner,
            known,
            session,
            alone,
        } = written;
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
