//! The acquisition's guard over its queued node ([`Cleanup`]): what it
//! left is taken back (see [`Leftover`]) unless it takes the lock.

use std::sync::Arc;

use crate::conn::session::Session;
use crate::leftover::Leftover;
use crate::queue::Queued;

/// A queued node to take out of the queue unless the acquisition took the
/// lock with it: at once on a give-up or an error, in the background when
/// the waiting future is dropped.
pub(crate) struct Cleanup {
    leftover: Option<Leftover>,
}

impl Cleanup {
    /// The clean-up of `q`'s node, queued for `attempt` of `owner` (see
    /// [`Leftover::queued`]).
    pub(crate) fn new(session: &Arc<Session>, q: &Queued, owner: &str, attempt: &str) -> Self {
        Cleanup {
            leftover: Some(Leftover::queued(session, q, owner, attempt)),
        }
    }

    /// Nothing to take back: the acquisition holds with its node, or its
    /// session ended and the next one takes the node back.
    pub(crate) fn disarm(&mut self) {
        self.leftover = None;
    }

    /// A join failed: its share may have been made.
    pub(crate) fn join_failed(&mut self) {
        if let Some(l) = &mut self.leftover {
            l.join_failed();
        }
    }

    /// A join of the node at `path` failed: its share may have been added.
    pub(crate) fn joined_at(&mut self, path: &str) {
        if let Some(l) = &mut self.leftover {
            l.joined_at(path);
        }
    }

    /// Takes the leftover back now, before the call returns (see
    /// [`Leftover::take_back_now`]); nothing is left to the drop.
    pub(crate) async fn run(&mut self) {
        if let Some(leftover) = self.leftover.take() {
            leftover.take_back_now().await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(leftover) = self.leftover.take() {
            leftover.spawn();
        }
    }
}
