//! The Redlock backend's [`LockBackend`] impl: each operation over the
//! nodes, the quorum deciding.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;
use lockkit_core::raw::{AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, TryAcquire};
use lockkit_core::{Capabilities, LockError, LockInfo, LockKind};

use crate::error::{Fault, NodeTimeout};
use crate::scripts::{self, ExtendItem, Publish};
use crate::wait::{Attempt, UNKNOWN_LEASE_RECHECK, wait_loop};

use super::nodes::{KIND, RedlockBackend, release_on};
use super::quorum::{Outcome, tally};

#[async_trait]
impl LockBackend for RedlockBackend {
    fn name(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ttl_leases()
            .with_shared_holds()
            .with_batch_extend()
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
            .with_semaphores()
            .with_rw_locks()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        match self.attempt(req, self.queueing(None, req.fair)).await? {
            Outcome::Acquired(lease) => Ok(TryAcquire::Acquired(lease)),
            Outcome::Busy { retry_in, .. } => Ok(TryAcquire::Busy { retry_in }),
            Outcome::Failed(e) => Err(self.failed("acquire", req.name, e)),
            Outcome::Conflict(reason) => Err(self.conflict(req.name, reason)),
        }
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let splits = AtomicU32::new(0);
        let step = |outcome: Outcome| -> Result<Attempt<Lease>, LockError> {
            if !matches!(outcome, Outcome::Busy { split: true, .. }) {
                splits.store(0, Ordering::Relaxed);
            }
            Ok(match outcome {
                Outcome::Acquired(lease) => Attempt::Done(lease),
                // Held by another owner: a release message, or the quorum's
                // expiry (plus a little jitter, so contenders spread out).
                // Free, but another client's turn.
                Outcome::Busy {
                    retry_in,
                    turn_of: Some(head),
                    ..
                } => Attempt::Busy {
                    retry_in: retry_in.unwrap_or(UNKNOWN_LEASE_RECHECK),
                    turn_of: Some(head),
                },
                Outcome::Busy {
                    retry_in: Some(r),
                    split: false,
                    turn_of: None,
                } => Attempt::Busy {
                    retry_in: r + self.backoff(0),
                    turn_of: None,
                },
                Outcome::Busy {
                    retry_in: None,
                    split: false,
                    turn_of: None,
                } => Attempt::Busy {
                    retry_in: UNKNOWN_LEASE_RECHECK,
                    turn_of: None,
                },
                // Split vote: everybody backs off for a random while.
                Outcome::Busy { split: true, .. } => Attempt::Backoff {
                    after: self.backoff(splits.fetch_add(1, Ordering::Relaxed) + 1),
                },
                Outcome::Failed(e) => return Err(self.failed("acquire", req.name, e)),
                Outcome::Conflict(reason) => return Err(self.conflict(req.name, reason)),
            })
        };
        // A quorum that cannot be reached at the start fails at once.
        if let Attempt::Done(lease) = step(self.attempt(req, self.queueing(None, req.fair)).await?)? {
            return Ok(Some(lease));
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Ok(None);
        }
        let channel = self.inner.keys.holds(req.name, req.kind);
        // Every node queues this client at the same place: the client's
        // (see `Turn::place`).
        wait_loop(&self.inner.waiters, &channel, req.kind, deadline, |turn| async move {
            step(self.attempt(req, self.queueing(Some(turn), req.fair)).await?)
        })
        .await
    }

    /// Takes `attempt`'s share back on every node. The holds left are the
    /// quorum's: the largest count a quorum of nodes still has (nodes that
    /// did not answer count as having none), so a name that fewer than a
    /// quorum still hold reads as free — and any other guard of this client
    /// on the hold turns lost. Nodes that did not answer get the release
    /// again in the background (it is idempotent by `attempt`).
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let inner = &self.inner;
        let nonce = scripts::nonce();
        let nonce = nonce.as_str();
        let results = inner
            .all(|_, c| release_on(&inner.keys, c, hold, attempt, nonce, inner.queued()))
            .await;
        let (yes, no, failures) = tally(&results);
        if yes > 0 {
            let unanswered: Vec<usize> = (0..inner.n()).filter(|&i| results[i].is_err()).collect();
            if !unanswered.is_empty() {
                inner.spawn_release(hold, attempt, nonce, unanswered);
            }
            let mut counts: Vec<u32> = results
                .iter()
                .map(|r| r.as_ref().ok().copied().flatten().unwrap_or(0))
                .collect();
            counts.sort_unstable_by(|a, b| b.cmp(a));
            let remaining = counts[inner.quorum - 1];
            return Ok(ReleaseOutcome::Released { remaining });
        }
        if no > inner.n() - inner.quorum || failures.is_empty() {
            return Ok(ReleaseOutcome::NotHeld);
        }
        Err(self.failed("release", &hold.name, inner.quorum_error(&failures)))
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let mut results = self.extend_many(&[(hold.clone(), ttl)]).await;
        results.pop().unwrap_or(Ok(ExtendOutcome::NotHeld))
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let inner = &self.inner;
        let items: Vec<ExtendItem<'_>> = holds
            .iter()
            .map(|(h, ttl)| ExtendItem::new(&inner.keys, h, *ttl))
            .collect();
        let sent_at = Instant::now();
        let items = &items;
        let per_node = inner
            .all(|_, mut c| async move { scripts::extend(&mut c, items, None).await.map(|(v, _)| v) })
            .await;
        holds
            .iter()
            .enumerate()
            .map(|(i, (hold, _))| {
                let results: Vec<Result<Option<i64>, Fault>> = per_node
                    .iter()
                    .map(|r| match r {
                        Ok(v) => Ok(v.get(i).copied().flatten()),
                        Err(f) => Err(f.clone()),
                    })
                    .collect();
                let (yes, no, failures) = tally(&results);
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
                Err(self.failed("extend", &hold.name, inner.quorum_error(&failures)))
            })
            .collect()
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::inspect(&mut c, &inner.keys, name).await })
            .await;
        self.holder("inspect", name, &results, true)
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = &self.inner;
        let pattern = inner.keys.scan_pattern(prefix);
        let timeout = inner.config.response_timeout;
        let scans = join_all(inner.nodes.iter().map(|node| {
            let pattern = &pattern;
            async move {
                let scan = scripts::scan(pattern, |cmd| {
                    let mut c = node.conn.clone();
                    async move { cmd.query_async(&mut c).await }
                });
                match tokio::time::timeout(timeout, scan).await {
                    Ok(r) => r,
                    Err(_) => Err(Fault::Timeout(NodeTimeout {
                        node: node.addr.clone(),
                        timeout,
                    })),
                }
            }
        }))
        .await;
        let failures: Vec<&Fault> = scans.iter().filter_map(|r| r.as_ref().err()).collect();
        if failures.len() > inner.n() - inner.quorum {
            let e = inner.quorum_error(&failures);
            return Err(LockError::backend(KIND, "list", None, e.retryable, e));
        }
        let names = scans.iter().flatten().flatten().filter_map(|k| inner.keys.name_of(k));
        crate::inspect::inspect_listed(names, prefix, limit, 16, |n| async move { self.inspect(&n).await }).await
    }

    /// The clients a quorum of nodes has queued for `name` (the quorum-th
    /// largest queue).
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.queued(name, LockKind::Mutex).await
    }

    /// As [`waiting`](Self::waiting), for `kind`'s line of `name`.
    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        self.queued(name, kind).await
    }

    /// The holds a quorum of nodes agrees on (see `kinds`).
    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self.inspect(name).await?.into_iter().collect()),
            kind => self.quorum_holders(name, kind).await,
        }
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::force_release(&mut c, &inner.keys, name, Publish::Classic).await })
            .await;
        self.holder("force_release", name, &results, false)
    }
}
