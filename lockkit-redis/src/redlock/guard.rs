//! The restart guard over the nodes (see [`RestartGuard`]): a node that
//! answers without its marker lost its data, and is quarantined for as
//! long as a lease the other nodes granted may still run. A quarantined
//! node's answer is a refusal, with the quarantine left as the lease to
//! wait for (see `answers`).
//!
//! [`RestartGuard`]: crate::RestartGuard

use redis::aio::ConnectionManager;

use crate::error::Fault;
use crate::scripts::{self, AcquireReply, ClockReading, Marker};

use super::nodes::Inner;

/// Whether a node answered that it has no marker.
pub(super) fn emptied(replies: &[Result<AcquireReply, Fault>]) -> bool {
    replies
        .iter()
        .any(|r| matches!(r, Ok(AcquireReply::Guarded { left_ms: None })))
}

impl Inner {
    /// Gives the nodes without a marker their quarantine, `ttl_ms` the
    /// lease of the attempt that found them:
    ///
    /// - when at least `n − quorum + 1` other nodes report their lease bound
    ///   (a hold on a quorum stands on one of them), the longest of them
    ///   plus drift;
    /// - when fewer do but a quorum answered (a majority lost its data, past
    ///   what Redlock tolerates), the same, and at least `ttl_ms`;
    /// - when no node has a marker and a quorum answered (a new
    ///   deployment, or every node lost its data at once), nothing more;
    ///
    /// and at least the guard's floor. With fewer answers nothing is set:
    /// the nodes keep refusing, and a later attempt tries again. Returns
    /// whether every node without a marker may grant at once (a quarantine
    /// of 0).
    pub(super) async fn quarantine(&self, ttl_ms: u64) -> bool {
        let keys = &self.keys;
        let markers = self
            .all(|_, mut c| async move { scripts::read_marker(&mut c, keys).await })
            .await;
        let missing: Vec<usize> = (0..self.n())
            .filter(|&i| matches!(markers[i], Ok(Marker::Missing)))
            .collect();
        let bounds: Vec<u64> = markers
            .iter()
            .filter_map(|m| match m {
                Ok(Marker::Present { bound_ms, .. }) => Some(*bound_ms),
                _ => None,
            })
            .collect();
        let Some(quarantine_ms) = self.quarantine_of(&bounds, missing.len(), ttl_ms) else {
            tracing::debug!(
                with_marker = bounds.len(),
                without = missing.len(),
                "redlock nodes without a marker: too few nodes answered to bound their quarantine"
            );
            return false;
        };
        let missing = &missing;
        let set = self
            .all(|i, mut c| async move {
                match missing.contains(&i) {
                    true => scripts::set_quarantine(&mut c, keys, quarantine_ms, None)
                        .await
                        .map(Some),
                    false => Ok(None),
                }
            })
            .await;
        for (i, r) in set.iter().enumerate().filter(|(i, _)| missing.contains(i)) {
            match r {
                Ok(left) => {
                    tracing::warn!(node = %self.nodes[i].addr, quarantine_ms = left, "redlock node lost its data: it takes no part until its quarantine ends")
                }
                Err(e) => tracing::debug!(node = %self.nodes[i].addr, error = %e, "setting a quarantine failed"),
            }
        }
        set.iter().all(|r| matches!(r, Ok(None | Some(0))))
    }

    /// Checks node `i`'s clock reading (`None`: not read), see
    /// [`scripts::check_clock`]: the fault to count instead of the node's
    /// answer after a step forward (a grant it made is undone as a failed
    /// node's is).
    pub(super) async fn node_clock_stepped(
        &self,
        i: usize,
        mut conn: ConnectionManager,
        reading: Option<ClockReading>,
        ttl_ms: u64,
    ) -> Option<Fault> {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let quarantine = ttl_ms.max(ms(self.config.guard_floor().unwrap_or_default()));
        let node = &self.nodes[i];
        scripts::check_clock(&mut conn, &self.keys, &node.clock, reading?, quarantine, &node.addr).await
    }

    /// The quarantine (ms) of nodes without a marker, from the lease bounds
    /// the others report and how many answered without one (see
    /// [`quarantine`](Self::quarantine)); `None`: too few answered.
    fn quarantine_of(&self, bounds: &[u64], missing: usize, ttl_ms: u64) -> Option<u64> {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let floor = ms(self.config.guard_floor().unwrap_or_default());
        let longest = bounds.iter().copied().max().unwrap_or(0);
        let bound = longest
            .saturating_add(longest / 100 + 2)
            .saturating_add(ms(self.config.drift));
        let answered = bounds.len() + missing;
        let q = if bounds.len() > self.n() - self.quorum {
            bound
        } else if answered < self.quorum {
            return None;
        } else if bounds.is_empty() {
            0
        } else {
            bound.max(ttl_ms)
        };
        Some(q.max(floor))
    }
}
