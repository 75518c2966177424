//! A waiter's turn in a name's line: what a waiting attempt tells the
//! line ([`Turn`]), what an acquire reply says of the turn ([`TurnOf`]),
//! and how long a client waits for a turn that is not its own.

use std::time::Duration;

/// How long a client whose turn it is not waits before it tries anyway
/// (unless the lock is announced as taken first): the base, plus up to as
/// much again at random. A fair attempt then drops the client whose turn it
/// was from the queue if it still has not taken the free lock (it is dead,
/// or gone): long enough that a live client on a loaded machine takes its
/// turn first, short enough that a dead one delays a hand-off once by a
/// fraction of a second.
pub(crate) const FALLBACK: Duration = Duration::from_millis(200);

/// What a waiting attempt should tell the waiter queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Turn {
    /// More waiters of this client wait for the same name.
    pub others_wait: bool,
    /// More of this client's readers woken by the same turn are yet to try:
    /// a reader's turn lets all the client's readers in, so the line entry
    /// keeps its place until the last of them has come.
    pub batch_follows: bool,
    /// The place in line of the client's entry this waiter stands for (to
    /// write, or not; µs, this process's clock): Redlock joins every node's
    /// line there, so that the nodes' lines agree whichever of the
    /// client's waiters reaches a node first.
    pub place: u64,
    /// Where a grant sends the client when more of its waiters wait: the
    /// time of this attempt (µs), the same on every Redlock node.
    pub back: u64,
    /// A client that was given the turn and did not take it (seen before a
    /// fallback wake-up).
    pub stale: Option<String>,
}

/// A free lock that is another waiting client's turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TurnOf {
    /// The client whose turn it is (the queue's head).
    pub head: String,
    /// How many clients wait between the head and the caller (0: the
    /// caller is next in line).
    pub behind: u32,
}
