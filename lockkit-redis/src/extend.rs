//! Extending on one Redis: every hold of a batch in one script call (per
//! slot in a cluster), followed by `WAIT` when replicas must acknowledge.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use lockkit_core::LockError;
use lockkit_core::raw::{ExtendOutcome, Hold, valid_until};

use crate::backend::RedisBackend;
use crate::conn::Conn;
use crate::error::Fault;
use crate::replicas::replicated;
use crate::scripts::{self, ExtendItem, millis};

impl RedisBackend {
    /// [`LockBackend::extend_many`](lockkit_core::raw::LockBackend::extend_many):
    /// the holds' new validity, in their order.
    pub(crate) async fn extend_holds(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let items: Vec<ExtendItem<'_>> = holds
            .iter()
            .map(|(h, ttl)| ExtendItem::new(&self.inner.keys, h, *ttl))
            .collect();
        let sent_at = Instant::now();
        self.extend_items(&items)
            .await
            .into_iter()
            .zip(holds)
            .map(|(r, (hold, _))| match r {
                Ok(Some(pttl)) => Ok(ExtendOutcome::Extended {
                    valid_until: Some(valid_until(sent_at, millis(pttl))),
                }),
                Ok(None) => Ok(ExtendOutcome::NotHeld),
                Err(f) => Err(self.error("extend", &hold.name, f)),
            })
            .collect()
    }

    async fn extend_items(&self, items: &[ExtendItem<'_>]) -> Vec<Result<Option<i64>, Fault>> {
        let mut conn = self.inner.conn.clone();
        let replicas = self.inner.replicas;
        if !matches!(conn, Conn::Cluster(_)) {
            let guard = self.inner.config.guard_floor().map(|_| &self.inner.keys);
            return match scripts::extend(&mut conn, guard, items, replicas).await {
                Ok(extended) => {
                    // The holds extended stand; a step quarantines the
                    // server for the others' sake.
                    let longest = items.iter().map(|i| i.ttl_ms).max().unwrap_or(0);
                    self.inner.clock_stepped(extended.clock, longest).await;
                    replicated(extended, replicas)
                }
                Err(f) => items.iter().map(|_| Err(f.clone())).collect(),
            };
        }
        // Cluster: one call per hash tag (so per slot), all at once.
        let mut groups: HashMap<[u8; 5], Vec<usize>> = HashMap::new();
        for (i, item) in items.iter().enumerate() {
            let tag_at = item.key.iter().position(|b| *b == b'{').unwrap_or(0);
            let mut tag = [0u8; 5];
            tag.copy_from_slice(&item.key[tag_at..tag_at + 5]);
            groups.entry(tag).or_default().push(i);
        }
        let calls = groups.into_values().map(|indices| {
            let mut conn = conn.clone();
            async move {
                let group: Vec<ExtendItem<'_>> = indices.iter().map(|&i| items[i].clone()).collect();
                let extended = scripts::extend(&mut conn, None, &group, replicas).await;
                (indices, extended.map(|e| replicated(e, replicas)))
            }
        });
        let mut out: Vec<Result<Option<i64>, Fault>> = items.iter().map(|_| Ok(None)).collect();
        for (indices, result) in join_all(calls).await {
            match result {
                Ok(v) => {
                    for (i, r) in indices.into_iter().zip(v) {
                        out[i] = r;
                    }
                }
                Err(f) => {
                    for i in indices {
                        out[i] = Err(f.clone());
                    }
                }
            }
        }
        out
    }
}
