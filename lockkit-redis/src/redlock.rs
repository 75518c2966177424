//! Redlock over N independent Redis masters: see [`RedlockBackend`].

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, ReleaseOutcome, TryAcquire,
};
use lockkit_core::{LockError, detach, lease, ttl_millis};
use redis::aio::ConnectionManager;

use crate::config::RedisConfig;
use crate::conn::{manager_config, open_client, pubsub_config};
use crate::error::{Fault, NodeTimeout, QuorumError, redis_error};
use crate::layout::Keys;
use crate::scripts::{self, AcquireReply, ExtendItem, Publish, Queueing, Share, Stored, TurnOf, UndoThen, millis};
use crate::wait::{Attempt, PubSubConn, Turn, UNKNOWN_LEASE_RECHECK, Waiters, wait_loop};

const KIND: &str = "redlock";

/// How far ahead of this process's clock a token proposal is made: node
/// clocks up to this much ahead still take the proposal.
const PROPOSAL_LEAD: Duration = Duration::from_secs(1);

/// How many rounds one attempt makes while its fresh nodes disagree on the
/// token.
const TOKEN_ROUNDS: u32 = 3;

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

/// One node's answer to an acquisition that holds there.
#[derive(Debug, Clone, Copy)]
struct NodeHold {
    node: usize,
    token: u64,
    count: u32,
    pttl: i64,
    share: Share,
    /// Counts towards the quorum's decision (set by [`Inner::settle`]).
    agreed: bool,
}

impl NodeHold {
    /// The node's hold is this attempt's alone: new, or a repeat of it that
    /// is the hold's only share.
    fn fresh(&self) -> bool {
        matches!(self.share, Share::New) || (self.share == Share::Repeated && self.count == 1)
    }
}

/// What [`Inner::settle`] made of one round's answers.
enum Settled {
    Acquired(Outcome),
    /// Enough nodes made this attempt's hold afresh, but on different
    /// tokens; `highest` is the greatest of them.
    Disagreed {
        highest: u64,
    },
    /// Neither a re-entry nor a first acquisition has a quorum, or the
    /// validity is already gone.
    NoQuorum,
}

/// What one Redlock attempt came to.
enum Outcome {
    Acquired(Lease),
    /// Not acquired: held elsewhere (`retry_in` until a quorum may be free)
    /// or a split vote (`split`: retry after a random delay).
    Busy {
        retry_in: Option<Duration>,
        split: bool,
        /// Free (on the nodes that said so), but another waiting client's
        /// turn: the most named queue head (and the fewest clients between
        /// it and the caller any of those nodes counted).
        turn_of: Option<TurnOf>,
    },
    /// Too many nodes failed to answer.
    Failed(QuorumError),
}

impl Inner {
    fn n(&self) -> usize {
        self.nodes.len()
    }

    /// Runs `f` on every node at once, and collects the answers: once
    /// `node_timeout` has passed and a quorum answered, stragglers are not
    /// waited for (they count as timed out); a quorum that is slow to answer
    /// (a busy client, a slow network) is waited for up to
    /// `response_timeout`. With `wait_all`, every node is waited for up to
    /// `response_timeout` (cleanup that should reach every node).
    async fn on_nodes<T, F, Fut>(&self, wait_all: bool, f: F) -> Vec<Result<T, Fault>>
    where
        F: Fn(usize, ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, Fault>>,
    {
        let (short, long) = (
            self.config.node_timeout,
            self.config.response_timeout.max(self.config.node_timeout),
        );
        let mut pending: FuturesUnordered<_> = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, node)| {
                let call = f(i, node.conn.clone());
                async move { (i, call.await) }
            })
            .collect();
        let mut results: Vec<Option<Result<T, Fault>>> = self.nodes.iter().map(|_| None).collect();
        let (mut answered, mut ok) = (0, 0);
        let short_over = tokio::time::sleep(short);
        let long_over = tokio::time::sleep(long);
        tokio::pin!(short_over, long_over);
        let mut past_short = false;
        while answered < self.n() {
            if past_short && !wait_all && ok >= self.quorum {
                break;
            }
            tokio::select! {
                Some((i, r)) = pending.next() => {
                    answered += 1;
                    ok += usize::from(r.is_ok());
                    results[i] = Some(r);
                }
                _ = &mut short_over, if !past_short => past_short = true,
                _ = &mut long_over => break,
            }
        }
        let waited = if past_short && ok >= self.quorum { short } else { long };
        results
            .into_iter()
            .zip(&self.nodes)
            .map(|(r, node)| {
                r.unwrap_or_else(|| {
                    Err(Fault::Timeout(NodeTimeout {
                        node: node.addr.clone(),
                        timeout: waited,
                    }))
                })
            })
            .collect()
    }

    async fn all<T, F, Fut>(&self, f: F) -> Vec<Result<T, Fault>>
    where
        F: Fn(usize, ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, Fault>>,
    {
        self.on_nodes(false, f).await
    }

    /// The deadline a quorum of these remaining leases (ms) guarantees,
    /// counted from `sent_at`.
    fn validity(&self, sent_at: Instant, mut pttls: Vec<i64>) -> Option<Instant> {
        pttls.sort_unstable_by(|a, b| b.cmp(a));
        let rem = *pttls.get(self.quorum - 1)?;
        if rem < 0 {
            return None;
        }
        let until = lease::valid_until(sent_at, millis(rem)).checked_sub(self.config.drift)?;
        (until > Instant::now()).then_some(until)
    }

    fn quorum_error(&self, failures: &[&Fault]) -> QuorumError {
        QuorumError {
            succeeded: self.n() - failures.len(),
            quorum: self.quorum,
            nodes: self.n(),
            first: failures.first().map(|f| f.to_string()).unwrap_or_default(),
            retryable: failures.iter().all(|f| f.retryable()),
        }
    }

    /// One attempt: acquire on every node; keep the shares of the nodes
    /// that agree, undo the rest. Every try of one `lock` call carries the
    /// same `attempt` id, so a node that still has an earlier try's share
    /// (its undo did not arrive) counts it once.
    ///
    /// When enough nodes made this attempt's hold but issued different
    /// tokens (a node's clock or counter ahead of the proposal), the attempt
    /// is undone and made again at once, proposing above the highest token
    /// they issued (up to [`TOKEN_ROUNDS`] rounds; then it reads as a split
    /// vote).
    async fn attempt(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        attempt: &str,
        ttl_ms: u64,
        queueing: &Queueing,
    ) -> Outcome {
        let mut above: Option<u64> = None;
        let mut round = 1;
        loop {
            // Every node gets the same proposal (this clock + a margin for
            // skew, or above what the nodes issued last round), so that they
            // agree on the token.
            let lead = u64::try_from(PROPOSAL_LEAD.as_micros()).unwrap_or(u64::MAX);
            let proposal = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_micros()).ok())
                .map(|now| now.max(above.unwrap_or(0)).saturating_add(lead));
            let keys = &self.keys;
            let sent_at = Instant::now();
            let replies = self
                .all(|_, mut c| async move {
                    scripts::acquire(&mut c, keys, name, owner, ttl_ms, attempt, proposal, queueing).await
                })
                .await;
            let mut held = Vec::new();
            let mut busy = Vec::new();
            let mut failed = Vec::new();
            let mut heads: HashMap<&str, (usize, u32)> = HashMap::new();
            for (node, r) in replies.iter().enumerate() {
                match r {
                    Ok(AcquireReply::Acquired {
                        token,
                        count,
                        pttl,
                        share,
                    }) => held.push(NodeHold {
                        node,
                        token: *token,
                        count: *count,
                        pttl: *pttl,
                        share: *share,
                        agreed: false,
                    }),
                    Ok(AcquireReply::Busy { pttl, turn_of }) => {
                        busy.push(*pttl);
                        if let Some(t) = turn_of {
                            let (named, behind) = heads.entry(t.head.as_str()).or_insert((0, t.behind));
                            *named += 1;
                            *behind = (*behind).min(t.behind);
                        }
                    }
                    Err(_) => failed.push(node),
                }
            }
            let settled = if held.len() >= self.quorum {
                self.settle(sent_at, &mut held)
            } else {
                Settled::NoQuorum
            };
            // Undo wherever this attempt may have counted. A waiting caller
            // goes back to its place in the queues it left by taking a node.
            let targets: Vec<usize> = held.iter().map(|h| h.node).chain(failed.iter().copied()).collect();
            let requeue = match (queueing.join, &queueing.waiter, queueing.place) {
                (true, Some(waiter), Some(place)) => Some((waiter.as_str(), place)),
                _ => None,
            };
            match settled {
                Settled::Acquired(outcome) => {
                    // Shares this attempt may have left on nodes that did not
                    // answer in time, or that did not agree: take them back in
                    // the background.
                    let stray: Vec<usize> = failed
                        .iter()
                        .copied()
                        .chain(held.iter().filter(|h| !h.agreed).map(|h| h.node))
                        .collect();
                    if !stray.is_empty() {
                        self.spawn_undo(name, owner, attempt, stray);
                    }
                    return outcome;
                }
                Settled::Disagreed { highest } if round < TOKEN_ROUNDS => {
                    // Tried again at once: nobody need hear of it.
                    let then = UndoThen {
                        requeue,
                        announce: false,
                    };
                    self.undo(name, owner, attempt, &targets, then).await;
                    above = Some(above.unwrap_or(0).max(highest));
                    round += 1;
                    continue;
                }
                Settled::Disagreed { .. } | Settled::NoQuorum => {}
            }
            // No quorum.
            let then = UndoThen {
                requeue,
                announce: true,
            };
            self.undo(name, owner, attempt, &targets, then).await;
            let failures: Vec<&Fault> = replies.iter().filter_map(|r| r.as_ref().err()).collect();
            if failures.len() > self.n() - self.quorum {
                return Outcome::Failed(self.quorum_error(&failures));
            }
            // A quorum frees up when enough of the busy nodes' leases run out.
            busy.sort_unstable();
            let need = self.quorum.saturating_sub(self.n() - busy.len());
            let retry_in = match need {
                0 => None,
                k => busy.get(k - 1).filter(|p| **p >= 0).map(|p| millis(*p)),
            };
            let turn_of = heads
                .into_iter()
                .max_by_key(|(head, (n, _))| (*n, std::cmp::Reverse(*head)))
                .map(|(head, (_, behind))| TurnOf {
                    head: head.to_owned(),
                    behind,
                });
            return Outcome::Busy {
                retry_in,
                split: (!held.is_empty() || need == 0) && turn_of.is_none(),
                turn_of,
            };
        }
    }

    /// With a quorum of nodes holding for this owner: decides whether this
    /// is a re-entry or a first acquisition, its token and validity, and
    /// marks the nodes that agree. Nothing is written: the nodes that do not
    /// agree only lose this attempt's share (the caller undoes it), and no
    /// other share is ever touched — a share of the same owner may be a
    /// co-owner's (another process configured with the same owner id,
    /// acquiring at the same moment), not a stale one.
    ///
    /// * **Re-entry** only where a quorum of nodes already had this owner's
    ///   hold under one token `T` (or had this attempt's share under it: a
    ///   repeat): the lease keeps `T`. It rests on this attempt's own shares
    ///   on that quorum.
    /// * **First acquisition** only where a quorum of nodes made a *fresh*
    ///   hold (this attempt's share alone) under one token `T`, and `T` is
    ///   the lease's. Each of them issued `T` above its counter, and every
    ///   earlier hold was on a quorum that meets this one in such a node, so
    ///   `T` is above every earlier token; nodes that re-entered a hold of
    ///   the owner (a co-owner's, or a stale one a node kept) do not count
    ///   and do not raise it. Two co-owners cannot both make a first
    ///   acquisition: their quorums meet in a node where only one of them
    ///   was first.
    /// * Fresh nodes enough for a quorum, but on different tokens (a node's
    ///   clock or counter ahead of the proposal): [`Settled::Disagreed`],
    ///   to be undone and proposed again above the highest.
    /// * Otherwise (say the owner holds `T` on a quorum, one of whose nodes
    ///   is slow now, or two co-owners split the nodes) neither can be told
    ///   apart from the other, and the attempt is undone and tried again.
    fn settle(&self, sent_at: Instant, held: &mut [NodeHold]) -> Settled {
        let reentered = |h: &NodeHold| h.share != Share::New;
        let (token, first) = match self.agreeing(held.iter().filter(|h| reentered(h))) {
            Some(t) => (t, false),
            None => match self.agreeing(held.iter().filter(|h| h.fresh())) {
                Some(t) => (t, true),
                None => {
                    let fresh: Vec<u64> = held.iter().filter(|h| h.fresh()).map(|h| h.token).collect();
                    return match fresh.iter().max() {
                        Some(&highest) if fresh.len() >= self.quorum => Settled::Disagreed { highest },
                        _ => Settled::NoQuorum,
                    };
                }
            },
        };
        for h in held.iter_mut() {
            h.agreed = h.token == token && if first { h.fresh() } else { reentered(h) };
        }
        let good: Vec<&NodeHold> = held.iter().filter(|h| h.agreed).collect();
        let Some(valid_until) = self.validity(sent_at, good.iter().map(|h| h.pttl).collect()) else {
            return Settled::NoQuorum;
        };
        Settled::Acquired(Outcome::Acquired(Lease {
            token,
            hold_count: good.iter().map(|h| h.count).max().unwrap_or(1),
            valid_until: Some(valid_until),
            lost: None,
            session_deadline: None,
        }))
    }

    /// The greatest token a quorum of `nodes` has, if any.
    fn agreeing<'a>(&self, nodes: impl Iterator<Item = &'a NodeHold>) -> Option<u64> {
        let mut votes: HashMap<u64, usize> = HashMap::new();
        for h in nodes {
            *votes.entry(h.token).or_default() += 1;
        }
        votes
            .into_iter()
            .filter(|(_, v)| *v >= self.quorum)
            .map(|(t, _)| t)
            .max()
    }

    /// Takes `attempt`'s share back on `nodes` (waiting for each up to the
    /// response timeout).
    async fn undo(&self, name: &str, owner: &str, attempt: &str, nodes: &[usize], then: UndoThen<'_>) {
        if nodes.is_empty() {
            return;
        }
        let keys = &self.keys;
        self.on_nodes(true, |node, mut c| async move {
            if nodes.contains(&node) {
                scripts::undo(&mut c, keys, name, owner, attempt, then).await
            } else {
                Ok(false)
            }
        })
        .await;
    }

    /// Takes back the shares an acquisition left on nodes outside its
    /// quorum, in the background; silently: the name stays held.
    fn spawn_undo(self: &Arc<Self>, name: &str, owner: &str, attempt: &str, nodes: Vec<usize>) {
        let this = self.clone();
        let (name, owner, attempt) = (name.to_owned(), owner.to_owned(), attempt.to_owned());
        let then = UndoThen {
            requeue: None,
            announce: false,
        };
        tokio::spawn(async move { this.undo(&name, &owner, &attempt, &nodes, then).await });
    }

    /// Releases `attempt`'s share of `hold` on `nodes` again, in the
    /// background: nodes whose answer to the release did not come.
    fn spawn_release(self: &Arc<Self>, hold: &Hold, attempt: &str, nodes: Vec<usize>) {
        let this = self.clone();
        let (hold, attempt) = (hold.clone(), attempt.to_owned());
        tokio::spawn(async move {
            let (hold, attempt, nodes) = (&hold, &attempt, &nodes);
            let keys = &this.keys;
            this.on_nodes(true, |node, mut c| async move {
                if nodes.contains(&node) {
                    scripts::release(
                        &mut c,
                        keys,
                        &hold.name,
                        &hold.owner,
                        hold.token,
                        attempt,
                        Publish::Classic,
                        false,
                    )
                    .await
                    .map(|r| r.remaining)
                } else {
                    Ok(None)
                }
            })
            .await;
        });
    }
}

/// How a per-node result counts towards a quorum decision.
fn tally<T>(results: &[Result<Option<T>, Fault>]) -> (usize, usize, Vec<&Fault>) {
    let yes = results.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    let no = results.iter().filter(|r| matches!(r, Ok(None))).count();
    let failures = results.iter().filter_map(|r| r.as_ref().err()).collect();
    (yes, no, failures)
}

impl RedlockBackend {
    /// Connects to every node of a `redlock://` configuration. Nodes connect
    /// lazily and may be down; connecting fails only when fewer than a
    /// quorum answer `PING` within `connect_timeout`.
    pub async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        config.check_wait_replicas()?;
        let n = config.nodes.len();
        let quorum = config.quorum();
        let waiters = Waiters::new(
            n,
            quorum,
            config.node_timeout.max(Duration::from_millis(500)),
            Some(Keys::new(&config.prefix)),
        );
        let (ct, rt) = (config.connect_timeout, config.response_timeout);
        let mut nodes = Vec::with_capacity(n);
        let mut pubsubs = Vec::with_capacity(n);
        for (i, node) in config.nodes.iter().enumerate() {
            let client = open_client(&config, node)?;
            let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config(ct, rt))
                .map_err(|e| redis_error(KIND, "connect", None, e))?;
            let pubsub = ConnectionManager::new_lazy_with_config(client, pubsub_config(ct, rt, &waiters, i))
                .map_err(|e| redis_error(KIND, "connect", None, e))?;
            nodes.push(Node {
                addr: node.to_string(),
                conn,
            });
            pubsubs.push(PubSubConn::Manager(pubsub));
        }
        waiters.set_connections(pubsubs);
        if let Some(id) = waiters.waiter_id() {
            let (conns, keys, id) = (
                nodes.iter().map(|n| n.conn.clone()).collect::<Vec<_>>(),
                Keys::new(&config.prefix),
                id.to_owned(),
            );
            waiters.set_leave(Arc::new(move |channel: Vec<u8>| {
                let (conns, queue, id) = (conns.clone(), keys.queue_of_lock(&channel), id.clone());
                Box::pin(async move {
                    join_all(conns.into_iter().map(|mut c| {
                        let (queue, id) = (queue.clone(), id.clone());
                        async move {
                            let _: redis::RedisResult<redis::Value> =
                                redis::cmd("ZREM").arg(queue).arg(id).query_async(&mut c).await;
                        }
                    }))
                    .await;
                })
            }));
        }
        let inner = Inner {
            nodes,
            quorum,
            keys: Keys::new(&config.prefix),
            waiters,
            config,
        };
        let pings = join_all(inner.nodes.iter().map(|node| async {
            match tokio::time::timeout(ct, redis::cmd("PING").query_async::<()>(&mut node.conn.clone())).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(e)) => Err(Fault::Redis(e)),
                Err(_) => Err(Fault::Timeout(NodeTimeout {
                    node: node.addr.clone(),
                    timeout: ct,
                })),
            }
        }))
        .await;
        let failures: Vec<&Fault> = pings.iter().filter_map(|r| r.as_ref().err()).collect();
        if failures.len() > n - quorum {
            let e = inner.quorum_error(&failures);
            let retryable = e.retryable;
            return Err(LockError::backend(KIND, "connect", None, retryable, e));
        }
        for (node, r) in inner.nodes.iter().zip(&pings) {
            if let Err(f) = r {
                tracing::warn!(node = %node.addr, error = %f, "redlock node does not answer; continuing with a quorum");
            }
        }
        Ok(RedlockBackend { inner: Arc::new(inner) })
    }

    fn failed(&self, operation: &'static str, name: &str, e: QuorumError) -> LockError {
        let retryable = e.retryable;
        LockError::backend(KIND, operation, Some(name), retryable, e)
    }

    /// As on a single server (see [`Queueing::new`]); a waiting client
    /// joins every node's queue at the same place, `since` (µs), so that
    /// the nodes' queues agree.
    fn queueing(&self, turn: Option<(Turn, u64)>, fair: bool) -> Queueing {
        let (turn, place) = turn.map_or((None, None), |(t, since)| (Some(t), Some(since)));
        Queueing::new(self.inner.waiters.waiter_id(), turn, fair, Publish::Classic, place)
    }

    /// One attempt, detached; a hold whose caller is gone is released.
    async fn attempt(&self, req: &AcquireRequest<'_>, queueing: Queueing) -> Result<Outcome, LockError> {
        let ttl_ms = ttl_millis(req.ttl);
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let inner = self.inner.clone();
        let work = async move {
            let outcome = inner.attempt(&name, &owner, &attempt, ttl_ms, &queueing).await;
            (outcome, inner, name, owner, attempt)
        };
        let (outcome, ..) = detach(KIND, work, |(outcome, inner, name, owner, attempt)| async move {
            if let Outcome::Acquired(lease) = outcome {
                let hold = Hold {
                    name,
                    owner,
                    token: lease.token,
                };
                if let Err(e) = (RedlockBackend { inner }).release(&hold, &attempt).await {
                    tracing::warn!(lock = %hold.name, error = %e, "releasing the hold of a cancelled acquisition failed; it expires with its ttl");
                }
            }
        })
        .await?;
        Ok(outcome)
    }

    /// The holder a quorum of nodes agrees on. With `quorum_only` false
    /// (what a forced release removed) the hold most nodes had counts too.
    fn holder(
        &self,
        operation: &'static str,
        name: &str,
        results: &[Result<Option<Stored>, Fault>],
        quorum_only: bool,
    ) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let mut groups: HashMap<(&str, u64), Vec<&Stored>> = HashMap::new();
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok(Some(s)) => groups.entry((s.owner.as_str(), s.token)).or_default().push(s),
                Ok(None) => {}
                Err(f) => failures.push(f),
            }
        }
        let best = groups
            .into_iter()
            .max_by_key(|((_, token), nodes)| (nodes.len(), *token))
            .filter(|(_, nodes)| !quorum_only || nodes.len() >= inner.quorum);
        if let Some(((owner, token), nodes)) = best {
            let mut pttls: Vec<i64> = nodes.iter().map(|s| s.pttl).collect();
            pttls.sort_unstable_by(|a, b| b.cmp(a));
            let rem = pttls[inner.quorum.min(pttls.len()) - 1];
            return Ok(Some(LockInfo {
                name: name.to_owned(),
                owner: owner.to_owned(),
                hold_count: nodes.iter().map(|s| s.count).max().unwrap_or(1),
                token,
                remaining: (rem >= 0).then(|| millis(rem)),
            }));
        }
        if failures.len() > inner.n() - inner.quorum {
            return Err(self.failed(operation, name, inner.quorum_error(&failures)));
        }
        Ok(None)
    }

    /// The random retry delay after the `splits`-th split vote in a row:
    /// uniform up to 1 ms × 2^splits, at most `retry_delay` — short while
    /// contenders are few and the network fast, longer when they keep
    /// colliding.
    fn backoff(&self, splits: u32) -> Duration {
        let cap = u64::try_from(self.inner.config.retry_delay.as_micros()).unwrap_or(u64::MAX);
        let max = (1000u64 << splits.min(20)).min(cap).max(2);
        Duration::from_micros(rand::random_range(0..=max))
    }
}

#[async_trait]
impl LockBackend for RedlockBackend {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ttl(true, false)
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        match self.attempt(req, self.queueing(None, req.fair)).await? {
            Outcome::Acquired(lease) => Ok(TryAcquire::Acquired(lease)),
            Outcome::Busy { retry_in, .. } => Ok(TryAcquire::Busy { retry_in }),
            Outcome::Failed(e) => Err(self.failed("acquire", req.name, e)),
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
            })
        };
        // A quorum that cannot be reached at the start fails at once.
        if let Attempt::Done(lease) = step(self.attempt(req, self.queueing(None, req.fair)).await?)? {
            return Ok(Some(lease));
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Ok(None);
        }
        let channel = self.inner.keys.lock(req.name);
        // Every node queues this client at the same place: now.
        let since = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        wait_loop(&self.inner.waiters, &channel, deadline, |turn| async move {
            step(self.attempt(req, self.queueing(Some((turn, since)), req.fair)).await?)
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
        let results = inner
            .all(|_, mut c| async move {
                scripts::release(
                    &mut c,
                    &inner.keys,
                    &hold.name,
                    &hold.owner,
                    hold.token,
                    attempt,
                    Publish::Classic,
                    false,
                )
                .await
                .map(|r| r.remaining)
            })
            .await;
        let (yes, no, failures) = tally(&results);
        if yes > 0 {
            let unanswered: Vec<usize> = (0..inner.n()).filter(|&i| results[i].is_err()).collect();
            if !unanswered.is_empty() {
                inner.spawn_release(hold, attempt, unanswered);
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
            .map(|(h, ttl)| ExtendItem {
                key: inner.keys.lock(&h.name),
                owner: &h.owner,
                token: h.token,
                ttl_ms: ttl_millis(*ttl),
            })
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
        crate::list::inspect_listed(names, prefix, limit, 16, |n| async move { self.inspect(&n).await }).await
    }

    /// The clients a quorum of nodes has queued for `name` (the quorum-th
    /// largest queue).
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let inner = &self.inner;
        let queue = inner.keys.queue(name);
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

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::force_release(&mut c, &inner.keys, name, Publish::Classic).await })
            .await;
        self.holder("force_release", name, &results, false)
    }
}
