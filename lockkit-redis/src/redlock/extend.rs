//! Extending on Redlock: every hold of a batch in one script call per
//! node, and an extension that counts only where a quorum extended it.

use std::time::{Duration, Instant};

use lockkit_core::LockError;
use lockkit_core::raw::{ExtendOutcome, Hold};

use crate::error::Fault;
use crate::scripts::{self, ExtendItem};

use super::nodes::RedlockBackend;
use super::quorum::tally;

impl RedlockBackend {
    /// [`LockBackend::extend_many`](lockkit_core::raw::LockBackend::extend_many):
    /// the holds' new validity, in their order.
    pub(super) async fn extend_holds(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let inner = &self.inner;
        let items: Vec<ExtendItem<'_>> = holds
            .iter()
            .map(|(h, ttl)| ExtendItem::new(&inner.keys, h, *ttl))
            .collect();
        let sent_at = Instant::now();
        let items = &items;
        let guard = inner.config.guard_floor().map(|_| &inner.keys);
        let longest = items.iter().map(|i| i.ttl_ms).max().unwrap_or(0);
        let per_node = inner
            .all(|i, mut c| async move {
                let extended = scripts::extend(&mut c, guard, items, None).await?;
                // The holds extended stand; a step quarantines the node
                // for the others' sake.
                inner.node_clock_stepped(i, c, extended.clock, longest).await;
                Ok(extended.leases)
            })
            .await;
        holds
            .iter()
            .enumerate()
            .map(|(i, (hold, _))| self.extended(&hold.name, sent_at, &hold_on_nodes(&per_node, i)))
            .collect()
    }

    /// What the nodes' answers for one hold of `name` come to: extended
    /// where a quorum extended it (valid as long as a quorum's leases,
    /// counted from `sent_at`), not held where too many nodes do not hold
    /// it, failed otherwise.
    fn extended(
        &self,
        name: &str,
        sent_at: Instant,
        results: &[Result<Option<i64>, Fault>],
    ) -> Result<ExtendOutcome, LockError> {
        let inner = &self.inner;
        let (yes, no, failures) = tally(results);
        if yes >= inner.quorum {
            let pttls = results
                .iter()
                .filter_map(|r| r.as_ref().ok().copied().flatten())
                .collect();
            return match inner.validity(sent_at, pttls) {
                Some(valid_until) => Ok(ExtendOutcome::Extended {
                    valid_until: Some(valid_until),
                }),
                None => Ok(ExtendOutcome::NotHeld),
            };
        }
        if no > inner.n() - inner.quorum || failures.is_empty() {
            return Ok(ExtendOutcome::NotHeld);
        }
        Err(self.failed("extend", name, inner.quorum_error(&failures)))
    }
}

/// Hold `i`'s remaining lease on each node (`None`: not held there), from
/// the nodes' answers for the whole batch.
fn hold_on_nodes(per_node: &[Result<Vec<Option<i64>>, Fault>], i: usize) -> Vec<Result<Option<i64>, Fault>> {
    per_node
        .iter()
        .map(|r| match r {
            Ok(v) => Ok(v.get(i).copied().flatten()),
            Err(f) => Err(f.clone()),
        })
        .collect()
}
