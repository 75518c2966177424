//! Releasing on Redlock: an attempt's share taken back on every node, the
//! holds a quorum still has, and a background retry on the nodes that did
//! not answer; and the operator's override, a hold removed on every node
//! whoever holds it.

use std::sync::Arc;

use lockkit_core::raw::{Hold, ReleaseOutcome};
use lockkit_core::{LockError, LockInfo};
use redis::aio::ConnectionManager;

use crate::error::Fault;
use crate::layout::Keys;
use crate::scripts::{self, Publish, ReleaseOf, Telling};

use super::nodes::{Inner, RedlockBackend};
use super::quorum::tally;

impl RedlockBackend {
    /// The body of [`LockBackend::release`](lockkit_core::raw::LockBackend::release)
    /// (its behaviour is documented on the impl in `backend`).
    pub(super) async fn release_share(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let inner = &self.inner;
        let nonce = scripts::nonce();
        let (of, telling) = (ReleaseOf::new(hold, attempt), inner.telling(&nonce));
        let (of, telling) = (&of, &telling);
        let results = inner.all(|_, c| release_on(&inner.keys, c, of, telling)).await;
        let (yes, no, failures) = tally(&results);
        if yes > 0 {
            let unanswered: Vec<usize> = (0..inner.n()).filter(|&i| results[i].is_err()).collect();
            if !unanswered.is_empty() {
                inner.spawn_release(hold, attempt, &nonce, unanswered);
            }
            return Ok(ReleaseOutcome::Released {
                remaining: inner.remaining(&results),
            });
        }
        if no > inner.n() - inner.quorum || failures.is_empty() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        Err(self.failed("release", &hold.name, inner.quorum_error(&failures)))
    }

    /// Removes the hold on `name` on every node whoever holds it: the
    /// operator's override; what was removed (the hold most nodes had).
    pub(super) async fn force_release_name(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::force_release(&mut c, &inner.keys, name, Publish::Classic).await })
            .await;
        self.holder("force_release", name, &results, false)
    }
}

impl Inner {
    /// Whether this client's waiters join the nodes' lines (and mark the
    /// holds they wait for), so that a release on a node whose hold is
    /// unmarked need not look at the line or announce. A waiter's busy
    /// attempt had answers from a quorum of nodes and the hold stands on
    /// a quorum, so it marked at least one node the holder's release
    /// reaches.
    pub(super) fn queued(&self) -> bool {
        self.waiters.waiter_id().is_some()
    }

    /// How a release on the nodes tells the waiters: by `PUBLISH` (the
    /// nodes are independent masters, not a cluster), with the turn
    /// messages' `nonce`, the same on every node so that a client hears a
    /// turn once.
    fn telling<'a>(&self, nonce: &'a str) -> Telling<'a> {
        Telling {
            publish: Publish::Classic,
            queued: self.queued(),
            nonce,
        }
    }

    /// The holds a quorum of nodes still has after a release: the largest
    /// count a quorum has (nodes that did not answer count as having none).
    fn remaining(&self, results: &[Result<Option<u32>, Fault>]) -> u32 {
        let mut counts: Vec<u32> = results
            .iter()
            .map(|r| r.as_ref().ok().copied().flatten().unwrap_or(0))
            .collect();
        counts.sort_unstable_by(|a, b| b.cmp(a));
        counts[self.quorum - 1]
    }

    /// Releases `attempt`'s share of `hold` on `nodes` again, in the
    /// background: nodes whose answer to the release did not come. It is
    /// the same release, idempotent by `attempt`, so it carries the same
    /// `nonce`.
    fn spawn_release(self: &Arc<Self>, hold: &Hold, attempt: &str, nonce: &str, nodes: Vec<usize>) {
        let this = self.clone();
        let (hold, attempt, nonce) = (hold.clone(), attempt.to_owned(), nonce.to_owned());
        tokio::spawn(async move {
            let (of, telling) = (ReleaseOf::new(&hold, &attempt), this.telling(&nonce));
            let (of, telling, nodes, keys) = (&of, &telling, &nodes, &this.keys);
            this.on_nodes(true, |node, c| async move {
                if nodes.contains(&node) {
                    release_on(keys, c, of, telling).await
                } else {
                    Ok(None)
                }
            })
            .await;
        });
    }
}

/// Takes `of`'s share back on one node: the holds of it left there
/// (`None`: not held there).
async fn release_on(
    keys: &Keys,
    mut conn: ConnectionManager,
    of: &ReleaseOf<'_>,
    telling: &Telling<'_>,
) -> Result<Option<u32>, Fault> {
    let released = scripts::release(&mut conn, keys, of, telling).await?;
    Ok(released.remaining)
}
