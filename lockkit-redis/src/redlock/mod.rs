//! Redlock over N independent Redis masters: see [`RedlockBackend`].
//!
//! The backend's type and its [`LockBackend`] impl are here; the calls to
//! every node (and connecting) in `nodes`, one acquisition attempt in
//! `acquire`, and the quorum arithmetic (agreement on a token, validity
//! after clock drift, the holder a quorum reports) in `quorum`.

mod acquire;
mod kinds;
mod nodes;
mod quorum;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::future::join_all;
use lockkit_core::LockError;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, LockKind, ReleaseOutcome,
    TryAcquire,
};
use redis::aio::ConnectionManager;

use crate::config::RedisConfig;
use crate::error::{Fault, NodeTimeout, QuorumError};
use crate::layout::Keys;
use crate::scripts::{self, ExtendItem, Publish};
use crate::wait::{Attempt, UNKNOWN_LEASE_RECHECK, Waiters, wait_loop};

use acquire::Outcome;
use quorum::tally;

const KIND: &str = "redlock";

/// Locks over N independent Redis masters (`redlock://h1,h2,h3,…`). Cheap to
/// clone.
///
/// Every operation goes to all nodes at once and counts when a quorum
/// (N/2 + 1) of them agree. It is decided as soon as a quorum has answered
/// and `node_timeout` (default 100 ms) has passed, so a slow or hung node
/// costs at most that; a quorum that is slow to answer (a busy client or
/// network) is waited for up to `response_timeout` (default 1 s).
/// Each node runs the same Lua scripts as the single-server backend, so
/// re-entry, hold counts and compare-and-delete work per node.
///
/// * **Acquire**: the acquire script on every node, with the call's attempt
///   id (each node records it as the attempt's share of the hold, so every
///   command is safe to repeat). With a quorum held, the lease is valid for
///   `min over the quorum of the remaining ttl − elapsed − drift` (the time
///   since the requests were *sent*; drift = 1 % + 2 ms + the configured
///   `drift`). Without a quorum, or if that validity is already gone, the
///   attempt's share is taken back on every node (including nodes that did
///   not answer) and it is retried after a random delay (split vote) or
///   when the holder releases or expires.
/// * **Holds are the quorum's, never one node's.** A re-entry counts only
///   where a quorum of nodes already has the owner's hold under one token;
///   a first acquisition only where a quorum of nodes made a fresh hold
///   (this attempt's share alone) under one token. On every other node the
///   attempt's share is taken back, and nothing else: a share of the same
///   owner may be a co-owner's (another process configured with the same
///   owner id, acquiring at the same moment), so no attempt ever removes or
///   rewrites another's share. A hold therefore always rests on a quorum of
///   its own shares — one co-owner's unlock cannot take the name below a
///   quorum while another's guard stands — and two co-owners cannot both
///   make a first acquisition (their quorums meet in a node where only one
///   of them was first). A stale hold that one node kept (its peers lost
///   their keys) can neither turn a first acquisition into a re-entry nor
///   pull the token back. When a node is slow, or co-owners split the
///   nodes, and neither rule has a quorum, the attempt is undone and tried
///   again.
/// * **Release / extend**: on all nodes; an extension counts only with a
///   quorum, and the new validity is computed the same way. A release
///   reports the holds a quorum still has; when fewer than a quorum still
///   hold the name, it reads as free and the owner's other guards in this
///   client turn lost at once. Nodes whose answer did not come get the
///   release again in the background.
/// * **Waiting**: like the single-server backend, with one pub/sub
///   connection per node; a waiter relies on messages once a quorum of them
///   confirmed its subscription (any quorum of holders then includes a node
///   it listens to).
///
/// # Fencing tokens: what they promise, and what not
///
/// A first acquisition takes a token from every node's counter (the
/// single-server rule, `max(counter + 1, the node's clock in µs)`, where the
/// client also proposes its own clock + 1 s as a floor so that the nodes
/// agree) and counts only where a quorum of fresh nodes issued **the same
/// token**: each of them issued it above its counter, and every earlier
/// hold was on a quorum that meets this one in such a node. Nodes that
/// issued another token keep nothing (the attempt's share is taken back;
/// their counter stays raised). When no quorum agrees — a node's clock or
/// counter ahead of the proposal — the attempt is undone and made again at
/// once, proposing 1 s above the highest token issued (a few rounds, then
/// it is retried like a split vote; a node takes a proposal only up to a
/// minute ahead of its clock, so node clocks that differ by more than that
/// can keep a first acquisition from ever agreeing). Re-entries return the
/// hold's token.
///
/// * **Promised**: a token is strictly greater than every token issued
///   before for the name, as long as every quorum that ever held it shares a
///   node with the next one that kept its counter (always true while nodes
///   keep their data: two quorums of N always intersect).
/// * **Also holds** when nodes lose their data (restart without
///   persistence), because counters never fall behind their node's clock in
///   µs and a new token is at least the proposal: tokens still grow unless
///   the clocks of the client and of the nodes are behind the clock the
///   previous token came from (a client's proposal, or a node's clock ahead
///   of it) by more than the time between the two acquisitions.
/// * **Not promised**: with nodes that lose data *and* clocks that jump
///   back, a token can repeat or go down; a node whose clock runs ahead
///   issues tokens from its clock, so after it is corrected tokens stay at
///   its old lead until real time catches up (they still grow, through the
///   counters). Mutual exclusion itself (not only the token) breaks when
///   nodes lose their keys while a lease is live and what remains is no
///   longer a quorum: **one node losing its keys is enough when the holder
///   had exactly a quorum** (e.g. 3 of 5: a restart without persistence of
///   one of the three lets another owner take the other two plus the
///   restarted one). Restart a crashed node only after the longest ttl in
///   use, or run the nodes with `appendfsync always`. Hence
///   [`Capabilities::durable_tokens`] is `false`.
/// * **Clocks**: the holder's validity is measured by this process's
///   monotonic clock (remaining lease − elapsed − drift), but Redis stores
///   a key's expiry as an absolute wall-clock time: a node whose wall clock
///   is **stepped forward** expires the key early, before the holder's
///   deadline — with exactly a quorum, that is the one-node failure above.
///   Keep node clocks slewed (NTP without steps), and give `drift` room for
///   the rate error you expect. A client process suspended (SIGSTOP, a VM
///   pause) past its deadline finds its lost signal fired when it resumes,
///   but may already be mid-write: that write must be fenced by the token.
///
/// # Read-write locks and semaphores
///
/// Read and write holds follow the same rules on every node (a writer's
/// token is proposed and agreed like a mutex's). A read hold stands on a
/// quorum of nodes that hold it, with the greatest of their last write
/// tokens (a write attempt that failed may have raised it on some).
///
/// A semaphore's N permits are N slots, and a permit is one slot held on a
/// quorum of nodes, as a mutex is: two permits in one slot would need a
/// node that admitted both, so at most N stand at once. (A permit held on
/// any quorum, with every node admitting N, would not bound them: on 5
/// nodes, 3 permits of 2 can each stand on 3 nodes.) An attempt asks for
/// one slot; a node where it is taken names the lowest free one, and the
/// attempt asks for that at once. Tokens come from the name's counter,
/// agreed as a writer's, so they grow over all permits.
///
/// As the Kleppmann/antirez debate makes clear, the token protects a resource
/// only if the resource checks it (rejects writes whose token is lower than
/// one it has seen); a lost signal and a validity deadline are the holder's
/// side of the bargain.
#[derive(Clone)]
pub struct RedlockBackend {
    inner: Arc<Inner>,
}

struct Node {
    addr: String,
    conn: ConnectionManager,
}

struct Inner {
    nodes: Vec<Node>,
    quorum: usize,
    keys: Keys,
    waiters: Waiters,
    config: RedisConfig,
}

impl fmt::Debug for RedlockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedlockBackend")
            .field("quorum", &self.inner.quorum)
            .field("config", &self.inner.config)
            .field("waiters", &self.inner.waiters)
            .finish()
    }
}

impl Inner {
    fn n(&self) -> usize {
        self.nodes.len()
    }
}

impl RedlockBackend {
    fn failed(&self, operation: &'static str, name: &str, e: QuorumError) -> LockError {
        let retryable = e.retryable;
        LockError::backend(KIND, operation, Some(name), retryable, e)
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn kind(&self) -> &'static str {
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
            .all(|_, c| nodes::release_on(&inner.keys, c, hold, attempt, nonce, inner.queued()))
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
