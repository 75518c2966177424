//! Calls to every node at once (decided by a quorum and `node_timeout`),
//! the background release on nodes that did not answer, and connecting.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use futures_util::stream::FuturesUnordered;
use lockkit_core::LockError;
use lockkit_core::backend::{Hold, LockKind};
use redis::aio::ConnectionManager;

use crate::config::RedisConfig;
use crate::conn::{manager_config, open_client, pubsub_config};
use crate::error::{Fault, NodeTimeout, redis_error};
use crate::layout::Keys;
use crate::scripts::{self, KindRelease, Publish};
use crate::wait::{PubSubConn, Waiters};

use super::{Inner, KIND, Node, RedlockBackend};

impl Inner {
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

    pub(super) async fn all<T, F, Fut>(&self, f: F) -> Vec<Result<T, Fault>>
    where
        F: Fn(usize, ConnectionManager) -> Fut,
        Fut: Future<Output = Result<T, Fault>>,
    {
        self.on_nodes(false, f).await
    }

    /// Releases `attempt`'s share of `hold` on `nodes` again, in the
    /// background: nodes whose answer to the release did not come.
    /// Whether this client's waiters join the nodes' lines (and mark the
    /// holds they wait for), so that a release on a node whose hold is
    /// unmarked need not look at the line or announce. A waiter's busy
    /// attempt had answers from a quorum of nodes and the hold stands on
    /// a quorum, so it marked at least one node the holder's release
    /// reaches.
    pub(super) fn queued(&self) -> bool {
        self.waiters.waiter_id().is_some()
    }

    pub(super) fn spawn_release(self: &Arc<Self>, hold: &Hold, attempt: &str, nonce: &str, nodes: Vec<usize>) {
        let this = self.clone();
        let (hold, attempt, nonce) = (hold.clone(), attempt.to_owned(), nonce.to_owned());
        tokio::spawn(async move {
            let (hold, attempt, nonce, nodes) = (&hold, &attempt, &nonce, &nodes);
            let (keys, queued) = (&this.keys, this.queued());
            this.on_nodes(true, |node, c| async move {
                if nodes.contains(&node) {
                    release_on(keys, c, hold, attempt, nonce, queued).await
                } else {
                    Ok(None)
                }
            })
            .await;
        });
    }
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
            waiters.set_leave(Arc::new(move |channel: Vec<u8>, entry: Option<String>| {
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
}

/// Takes `attempt`'s share of `hold` back on one node: the holds of it left
/// there (`None`: not held there).
/// `nonce`: the turn messages' (see `scripts::nonce`), the same on every
/// node; `queued`: as `scripts::release` takes it (see `Inner::queued`).
pub(super) async fn release_on(
    keys: &Keys,
    mut conn: ConnectionManager,
    hold: &Hold,
    attempt: &str,
    nonce: &str,
    queued: bool,
) -> Result<Option<u32>, Fault> {
    let (name, owner) = (&hold.name, &hold.owner);
    let released = match hold.kind {
        LockKind::Mutex => {
            scripts::release(
                &mut conn,
                keys,
                name,
                owner,
                hold.token,
                attempt,
                Publish::Classic,
                queued,
            )
            .await
        }
        kind => {
            let release = KindRelease {
                name,
                kind,
                owner,
                token: hold.token,
                attempt,
                publish: Publish::Classic,
                nonce,
            };
            scripts::release_kind(&mut conn, keys, &release).await
        }
    };
    released.map(|r| r.remaining)
}
