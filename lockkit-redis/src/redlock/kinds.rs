//! Redlock's semaphores and read-write locks: the holders and the line of a
//! name as a quorum of nodes sees them, and the refusal a quorum agrees on.
//! (How a permit takes a slot on a quorum: `rounds` and
//! `scripts::kinds::KINDS_ACQUIRE`.)

use std::collections::HashMap;

use lockkit_core::{LockError, LockInfo, LockKind};

use super::nodes::{KIND, RedlockBackend};
use crate::error::Fault;
use crate::scripts;

impl RedlockBackend {
    /// A request a quorum of nodes refused whoever holds the name.
    pub(super) fn conflict(&self, name: &str, reason: String) -> LockError {
        LockError::Conflict {
            backend: KIND,
            name: name.to_owned(),
            reason,
        }
    }

    /// The clients a quorum of nodes has queued in `kind`'s line of `name`
    /// (the quorum-th largest queue).
    pub(super) async fn queued(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let inner = &self.inner;
        let queue = inner.keys.queue_of_lock(&inner.keys.holds(name, kind));
        let queue = &queue;
        let results = inner
            .all(|_, mut c| async move {
                let n: usize = redis::cmd("ZCARD").arg(queue).query_async(&mut c).await?;
                Ok(n)
            })
            .await;
        let mut counts: Vec<usize> = results.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
        if counts.len() < inner.quorum {
            let failures: Vec<&Fault> = results.iter().filter_map(|r| r.as_ref().err()).collect();
            return Err(self.failed("waiting", name, inner.quorum_error(&failures)));
        }
        counts.sort_unstable_by(|a, b| b.cmp(a));
        Ok(counts[inner.quorum - 1])
    }

    /// The holds of `kind` on `name` that a quorum of nodes has (owner and
    /// token), in the order the first answering node granted them; each
    /// with the count and remaining lease a quorum has.
    pub(super) async fn quorum_holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::holders(&mut c, &inner.keys, name, kind).await })
            .await;
        let failures: Vec<&Fault> = results.iter().filter_map(|r| r.as_ref().err()).collect();
        if failures.len() > inner.n() - inner.quorum {
            return Err(self.failed("holders", name, inner.quorum_error(&failures)));
        }
        // A permit counts in the slot it stands in: an attempt in flight
        // that nodes gave different slots is on no quorum of any (it is
        // undone on the nodes of the slots that lost).
        let mut order: Vec<(String, u64, Option<u32>)> = Vec::new();
        let mut seen: HashMap<(String, u64, Option<u32>), Vec<&LockInfo>> = HashMap::new();
        for (info, slot) in results.iter().filter_map(|r| r.as_ref().ok()).flatten() {
            let key = (info.owner.clone(), info.token, *slot);
            let nodes = seen.entry(key.clone()).or_default();
            if nodes.is_empty() {
                order.push(key);
            }
            nodes.push(info);
        }
        Ok(order
            .into_iter()
            .filter_map(|key| {
                let mut nodes = seen.remove(&key)?;
                if nodes.len() < inner.quorum {
                    return None;
                }
                nodes.sort_unstable_by_key(|i| std::cmp::Reverse(i.remaining));
                let counts = nodes.iter().map(|i| i.hold_count).max().unwrap_or(1);
                Some(LockInfo {
                    hold_count: counts,
                    remaining: nodes[inner.quorum - 1].remaining,
                    ..nodes[0].clone()
                })
            })
            .collect())
    }
}
