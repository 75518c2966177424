//! Taking an attempt back on Redlock nodes: at once, before the attempt
//! tries again or gives up, or in the background, on the nodes outside the
//! quorum of a grant.

use std::sync::Arc;

use crate::scripts::{self, LineAfter, Queueing, UndoOf, UndoThen};

use super::nodes::Inner;

impl Inner {
    /// Takes `of`'s share back on `nodes` (waiting for each up to the
    /// response timeout).
    pub(super) async fn undo(&self, of: &UndoOf<'_>, nodes: &[usize], then: UndoThen<'_>) {
        if nodes.is_empty() {
            return;
        }
        let keys = &self.keys;
        self.on_nodes(true, |node, mut c| async move {
            if nodes.contains(&node) {
                scripts::undo(&mut c, keys, of, then).await
            } else {
                Ok(false)
            }
        })
        .await;
    }

    /// Where a grant by a waiting caller moved its line entry (see
    /// [`UndoThen::moved`]), with the caller's waiter id.
    pub(super) fn moved(&self, queueing: &Queueing) -> Option<(String, LineAfter)> {
        let waiter = queueing.waiter.as_ref().filter(|_| queueing.join)?;
        let after = match (queueing.in_place, queueing.stay, queueing.back) {
            (true, _, _) => return None,
            (false, true, Some(back)) => LineAfter::Back(back),
            (false, true, None) => return None,
            (false, false, _) => LineAfter::Out,
        };
        Some((waiter.clone(), after))
    }

    /// Takes back the shares an acquisition left on nodes outside its
    /// quorum, in the background, and moves the caller's line entry there
    /// as the grant did (`moved`); silently: the name stays held.
    pub(super) fn spawn_undo(self: &Arc<Self>, of: UndoOf<'_>, moved: Option<(String, LineAfter)>, nodes: Vec<usize>) {
        let this = self.clone();
        let (name, owner, attempt, kind) = (of.name.to_owned(), of.owner.to_owned(), of.attempt.to_owned(), of.kind);
        tokio::spawn(async move {
            let of = UndoOf {
                name: &name,
                kind,
                owner: &owner,
                attempt: &attempt,
            };
            let then = UndoThen {
                requeue: None,
                announce: false,
                nonce: "",
                moved: moved.as_ref().map(|(w, after)| (w.as_str(), *after)),
            };
            this.undo(&of, &nodes, then).await
        });
    }
}
