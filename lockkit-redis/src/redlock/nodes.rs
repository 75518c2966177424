//! The node set: the backend's type and its nodes, connecting to them, and
//! calls to every node at once (decided by a quorum and `node_timeout`).

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use lockkit_core::LockError;
use lockkit_core::raw::ServerClock;
use redis::aio::ConnectionManager;

use crate::config::RedisConfig;
use crate::conn::{manager_config, open_client, pubsub_config};
use crate::error::{Fault, NodeTimeout, QuorumError, redis_error};
use crate::layout::Keys;
use crate::scripts::{self, Publish};
use crate::wait::{Leave, PubSubConn, Waiters};

/// The backend's name in errors and logs.
pub(super) const KIND: &str = "redlock";

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
///   counters). Hence
///   [`Capabilities::durable_tokens`](lockkit_core::Capabilities::durable_tokens) is `false`.
/// * **Nodes that lose their data**: one node losing its keys while a lease
///   is live would be enough to break mutual exclusion when the holder had
///   exactly a quorum (3 of 5: a restart without persistence of one of the
///   three lets another owner take the other two plus the restarted one).
///   The restart guard ([`RestartGuard`](crate::RestartGuard), on by
///   default) closes that without operator discipline: every node carries
///   a marker key with a bound of the leases it granted; a node without its
///   marker refuses every acquisition until a quarantine (the longest bound
///   the other nodes report) is over, so it may rejoin at once. Releases
///   are not refused. A majority losing its data at once is past what
///   Redlock tolerates; the guard then quarantines for at least a lease of
///   the client that finds it, and `restart_guard=DURATION` sets a floor (a
///   new deployment, where no node has a marker, waits only that floor).
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
    pub(super) inner: Arc<Inner>,
}

/// One Redis master of the set.
pub(super) struct Node {
    /// `host:port`, for errors and logs.
    pub(super) addr: String,
    /// Its command connection (pub/sub has a connection of its own, in
    /// the waiters).
    pub(super) conn: ConnectionManager,
    /// Its clock as last read (with the restart guard on).
    pub(super) clock: ServerClock,
}

/// What the clones of one [`RedlockBackend`] share.
pub(super) struct Inner {
    /// Every node, in the URL's order (a node's index in the per-node
    /// results of [`Inner::on_nodes`]).
    pub(super) nodes: Vec<Node>,
    /// How many nodes must agree (N/2 + 1).
    pub(super) quorum: usize,
    /// The key layout, the same on every node.
    pub(super) keys: Keys,
    /// This client's waiters, with a pub/sub connection per node.
    pub(super) waiters: Waiters,
    pub(super) config: RedisConfig,
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

impl RedlockBackend {
    /// The error of an operation on `name` that too many nodes failed.
    pub(super) fn failed(&self, operation: &'static str, name: &str, e: QuorumError) -> LockError {
        let retryable = e.retryable;
        LockError::backend(KIND, operation, Some(name), retryable, e)
    }
}

impl Inner {
    /// How many nodes there are.
    pub(super) fn n(&self) -> usize {
        self.nodes.len()
    }

    /// Runs `f` on every node at once, and collects the answers: once
    /// `node_timeout` has passed and a quorum answered, stragglers are not
    /// waited for (they count as timed out); a quorum that is slow to answer
    /// (a busy client, a slow network) is waited for up to
    /// `response_timeout`. With `wait_all`, every node is waited for up to
    /// `response_timeout` (cleanup that should reach every node).
    pub(super) async fn on_nodes<T, F, Fut>(&self, wait_all: bool, f: F) -> Vec<Result<T, Fault>>
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

    /// [`on_nodes`](Self::on_nodes) for an operation whose answer a
    /// quorum decides: stragglers are not waited for.
    pub(super) async fn all<T, F, Fut>(&self, f: F) -> Vec<Result<T, Fault>>
    where
        F: Fn(usize, ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, Fault>>,
    {
        self.on_nodes(false, f).await
    }
}

impl RedlockBackend {
    /// Connects to every node of a `redlock://` configuration. Nodes connect
    /// lazily and may be down; connecting fails only when fewer than a
    /// quorum answer within `connect_timeout`.
    pub async fn connect(config: RedisConfig) -> Result<Self, LockError> {
        config.check_wait_replicas()?;
        config.check_restart_guard()?;
        let waiters = Waiters::new(
            config.nodes.len(),
            config.quorum(),
            config.node_timeout.max(Duration::from_millis(500)),
            Some(Keys::new(&config.prefix)),
        );
        let nodes = open_nodes(&config, &waiters)?;
        if let Some(id) = waiters.waiter_id() {
            waiters.set_leave(leave_on_every_node(&nodes, Keys::new(&config.prefix), id));
        }
        let inner = Inner {
            nodes,
            quorum: config.quorum(),
            keys: Keys::new(&config.prefix),
            waiters,
            config,
        };
        inner.ping_quorum().await?;
        Ok(RedlockBackend { inner: Arc::new(inner) })
    }
}

/// Opens the connections of every node, lazily (a node that is down
/// connects once it is back): its command connection, and its pub/sub
/// connection, which goes to `waiters`.
fn open_nodes(config: &RedisConfig, waiters: &Waiters) -> Result<Vec<Node>, LockError> {
    let (ct, rt) = (config.connect_timeout, config.response_timeout);
    let mut nodes = Vec::with_capacity(config.nodes.len());
    let mut pubsubs = Vec::with_capacity(config.nodes.len());
    for (i, node) in config.nodes.iter().enumerate() {
        let client = open_client(config, node)?;
        let conn = ConnectionManager::new_lazy_with_config(client.clone(), manager_config(ct, rt))
            .map_err(|e| redis_error(KIND, "connect", None, e))?;
        let pubsub = ConnectionManager::new_lazy_with_config(client, pubsub_config(ct, rt, waiters, i))
            .map_err(|e| redis_error(KIND, "connect", None, e))?;
        nodes.push(Node {
            addr: node.to_string(),
            conn,
            clock: ServerClock::new(),
        });
        pubsubs.push(PubSubConn::Manager(pubsub));
    }
    waiters.set_connections(pubsubs);
    Ok(nodes)
}

/// How client `id` leaves a name's line: on every node at once, since
/// every node keeps the line (errors ignored, as `scripts::leave_line`
/// says why).
fn leave_on_every_node(nodes: &[Node], keys: Keys, id: &str) -> Leave {
    let (conns, id) = (nodes.iter().map(|n| n.conn.clone()).collect::<Vec<_>>(), id.to_owned());
    Arc::new(move |channel: Vec<u8>, entry: Option<String>| {
        let (conns, keys, id) = (conns.clone(), keys.clone(), id.clone());
        Box::pin(async move {
            let leave = &scripts::Leaving {
                channel: &channel,
                id: &id,
                entry: entry.as_deref(),
                publish: Publish::Classic,
            };
            let keys = &keys;
            join_all(
                conns
                    .into_iter()
                    .map(|mut c| async move { scripts::leave_line(&mut c, keys, leave).await }),
            )
            .await;
        })
    })
}

impl Inner {
    /// Checks that a quorum of nodes answers within `connect_timeout`: a
    /// backend that starts without one would fail every operation. Nodes
    /// that do not answer are logged and used once they do. The request
    /// reads each node's clock, so that the first acquisition's reading
    /// (with the restart guard on) has one to be compared with.
    async fn ping_quorum(&self) -> Result<(), LockError> {
        let ct = self.config.connect_timeout;
        let pings = join_all(self.nodes.iter().map(|node| async {
            match tokio::time::timeout(ct, scripts::read_clock(&mut node.conn.clone())).await {
                Ok(Ok(r)) => {
                    node.clock.observe(r.sent, r.received, r.server_ms);
                    Ok(())
                }
                Ok(Err(f)) => Err(f),
                Err(_) => Err(Fault::Timeout(NodeTimeout {
                    node: node.addr.clone(),
                    timeout: ct,
                })),
            }
        }))
        .await;
        let failures: Vec<&Fault> = pings.iter().filter_map(|r| r.as_ref().err()).collect();
        if failures.len() > self.n() - self.quorum {
            let e = self.quorum_error(&failures);
            let retryable = e.retryable;
            return Err(LockError::backend(KIND, "connect", None, retryable, e));
        }
        for (node, r) in self.nodes.iter().zip(&pings) {
            if let Err(f) = r {
                tracing::warn!(node = %node.addr, error = %f, "redlock node does not answer; continuing with a quorum");
            }
        }
        Ok(())
    }
}
