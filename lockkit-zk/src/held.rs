//! The records of the held-node cache (see [`crate::cache`]): [`Held`],
//! this backend's own node of each hold it has ([`HeldNode`]), by lock
//! name and, for semaphores and read-write locks, by [`KindKey`].

use std::collections::HashMap;

use crate::change::Known;

/// This backend's own node of each hold it has, in the session it last
/// recorded one in.
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

/// This session's node of one hold, as last written.
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
