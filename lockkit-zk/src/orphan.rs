//! [`Orphan`]: what an acquisition whose session ended before it could
//! take back what it left hands over to the backend's next session.

/// What an acquisition whose session ended before it could take back its
/// leftover asks the backend's next session to take back (see
/// [`Leftover::orphaned`](crate::leftover::Leftover::orphaned)). Holds no
/// session: an ended one is not kept alive by it.
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    pub(crate) parent: String,
    pub(crate) owner: String,
    pub(crate) attempt: String,
    /// The leftover may include a share in a node of the hold (not only
    /// the contender node).
    pub(crate) find_share: bool,
}

impl Orphan {
    /// Everything `attempt` of `owner` may have left under `parent` (its
    /// contender nodes, its share in any node of the hold).
    pub(crate) fn new(parent: &str, owner: &str, attempt: &str) -> Self {
        Orphan {
            parent: parent.to_owned(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            find_share: true,
        }
    }
}
