//! The registry of one backend's waiters ([`Waiters`]): subscriptions
//! made and dropped, messages shared with the other registries of this
//! process, connections recovered.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::PushInfo;
use tokio::sync::Notify;

use super::pubsub::{local, on_message, on_push};
use super::pubsub_conn::PubSubConn;
use super::state::{Leave, Shared, Slot, entry_client, now_micros};
use super::subscription::Subscription;
use crate::error::{Fault, NodeTimeout};
use crate::layout::Keys;

/// The waiter registry of one backend.
#[derive(Clone)]
pub(crate) struct Waiters {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters")
            .field("connections", &self.shared.recovering.len())
            .field("names", &self.shared.slots().len())
            .finish()
    }
}

impl Waiters {
    /// A registry for `connections` pub/sub connections, `required` of which
    /// must confirm a subscription; each subscribe/unsubscribe waits at most
    /// `timeout` per connection. With `queue` (the key layout), this client
    /// queues for names under a waiter id of its own, and listens on its own
    /// channels too.
    pub fn new(connections: usize, required: usize, timeout: Duration, queue: Option<Keys>) -> Self {
        Waiters {
            shared: Arc::new(Shared {
                waiter_id: queue.is_some().then(|| format!("{:016x}", rand::random::<u64>())),
                keys: queue,
                leave: OnceLock::new(),
                keyspace: OnceLock::new(),
                slots: Mutex::new(HashMap::new()),
                conns: OnceLock::new(),
                recovering: (0..connections).map(|_| AtomicBool::new(false)).collect(),
                warned: AtomicBool::new(false),
                required,
                timeout,
                sub_lock: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// The push-message handler for connection `index`, to install in its
    /// client before [`set_connections`](Self::set_connections). It holds
    /// the registry weakly, so connections never keep it alive.
    pub fn push_handler(
        &self,
        index: usize,
    ) -> impl Fn(PushInfo) -> Result<(), std::convert::Infallible> + Send + Sync + 'static {
        let weak = Arc::downgrade(&self.shared);
        move |info| {
            if let Some(shared) = weak.upgrade() {
                on_push(&shared, index, info);
            }
            Ok(())
        }
    }

    /// Installs the connections (once).
    pub fn set_connections(&self, conns: Vec<PubSubConn>) {
        debug_assert_eq!(conns.len(), self.shared.recovering.len());
        let _ = self.shared.conns.set(conns);
    }

    /// How this client leaves a waiter queue (once; queued backends only).
    pub fn set_leave(&self, leave: Leave) {
        let _ = self.shared.leave.set(leave);
    }

    /// Joins the backends of this process on `keyspace` (the servers, the
    /// database and the key prefix, as one string), to which releases hand
    /// their messages directly (once; single server, sentinel, cluster).
    pub fn share_locally(&self, keyspace: String) {
        if self.shared.keyspace.set(keyspace.clone()).is_ok() {
            let mut local = local();
            let group = local.entry(keyspace).or_default();
            group.retain(|w| w.strong_count() > 0);
            group.push(Arc::downgrade(&self.shared));
        }
    }

    /// A release published `payload` for the waiters of `channel`: the
    /// clients it names (`PREFIX|ID`, or `PREFIX|ID ID …` for a change that
    /// let several clients in, each of which was sent `PREFIX|ID` — or
    /// every client, when it names none) among this process's backends on
    /// the same keyspace hear it now, without the round trip through the
    /// server's pub/sub (the server's copy, when it comes, is dropped as a
    /// duplicate). A hand-off between two clients of one process then costs
    /// the release and the next holder's claim.
    pub fn deliver_locally(&self, channel: &[u8], payload: &[u8]) {
        let Some(keyspace) = self.shared.keyspace.get() else {
            return;
        };
        let (prefix, heads) = match payload.iter().rposition(|b| *b == b'|') {
            Some(at) => (&payload[..=at], &payload[at + 1..]),
            None => (payload, &[][..]),
        };
        let heads: Vec<&[u8]> = heads.split(|b| *b == b' ').filter(|h| !h.is_empty()).collect();
        let group: Vec<Arc<Shared>> = match local().get(keyspace) {
            Some(group) => group.iter().filter_map(Weak::upgrade).collect(),
            None => return,
        };
        for shared in &group {
            let own = shared.waiter_id.as_deref().map(str::as_bytes);
            if heads.is_empty() {
                on_message(shared, channel, payload.to_vec(), None);
            }
            for head in heads.iter().filter(|h| own == Some(entry_client(h).0)) {
                on_message(shared, channel, [prefix, head].concat(), None);
            }
        }
    }

    /// This client's waiter id, when it queues.
    pub fn waiter_id(&self) -> Option<&str> {
        self.shared.waiter_id.as_deref()
    }

    /// Every name with waiters gets one wake-up (after a failover).
    pub fn wake_all(&self) {
        self.shared.wake_all();
    }

    /// Logs a failed subscription: a warning the first time it is
    /// permanent (e.g. an ACL user without channel permissions), else at
    /// debug level.
    pub(super) fn subscribe_failed(&self, f: &Fault) {
        if !f.retryable() && !self.shared.warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                error = %f,
                "cannot subscribe to lock channels; waiters wake only when the holder's lease ends \
                 (grant the Redis user the channels of the key prefix, e.g. ACL &lockkit:*)"
            );
        } else {
            tracing::debug!(error = %f, "subscribing failed; waiting on the holder's expiry");
        }
    }

    /// Whether this client listens on `channel`'s messages now: it has
    /// waiters there, or had a moment ago (see [`LINGER`]).
    pub fn is_listening(&self, channel: &[u8]) -> bool {
        self.shared.is_subscribed(channel)
    }

    /// Channels that have waiters now.
    pub fn channels(&self) -> Vec<Vec<u8>> {
        self.shared.slots().keys().cloned().collect()
    }

    /// Registers a waiter on `channel` (one that waits to write a
    /// read-write lock: `writer`) and makes sure the channel is subscribed
    /// (confirmed by the server) before returning. Dropping the result,
    /// also while this future is pending, unregisters.
    pub async fn subscribe(&self, channel: Vec<u8>, writer: bool) -> Result<Subscription, Fault> {
        let sub = self.listen_locally(channel, writer);
        if self.shared.is_subscribed(&sub.channel) {
            return Ok(sub);
        }
        let _order = self.shared.sub_lock.lock().await;
        if self.shared.is_subscribed(&sub.channel) {
            return Ok(sub);
        }
        let timeout = self.shared.timeout;
        let channels = self.shared.channels_of(&sub.channel);
        let results = join_all(self.shared.conns().iter().map(|c| async {
            match tokio::time::timeout(timeout, c.subscribe(&channels)).await {
                Ok(r) => r.map_err(Fault::Redis),
                Err(_) => Err(Fault::Timeout(NodeTimeout {
                    node: "pub/sub connection".to_owned(),
                    timeout,
                })),
            }
        }))
        .await;
        let ok = results.iter().filter(|r| r.is_ok()).count();
        if ok >= self.shared.required {
            if let Some(slot) = self.shared.slots().get_mut(&sub.channel) {
                slot.subscribed = true;
            }
            return Ok(sub);
        }
        Err(results.into_iter().find_map(Result::err).unwrap_or_else(|| {
            Fault::Timeout(NodeTimeout {
                node: "pub/sub connection".to_owned(),
                timeout,
            })
        }))
    }

    /// A place on `channel` that hears only what this process's releases
    /// hand over (see [`deliver_locally`](Self::deliver_locally)), not the
    /// server's messages: what a waiter keeps while it cannot subscribe.
    pub fn listen_locally(&self, channel: Vec<u8>, writer: bool) -> Subscription {
        let notify = {
            let mut slots = self.shared.slots();
            let slot = slots.entry(channel.clone()).or_insert_with(|| Slot {
                notify: Arc::new(Notify::new()),
                notify_write: Arc::new(Notify::new()),
                refs: 0,
                writers: 0,
                readers: 0,
                batch: 0,
                place: now_micros(),
                write_place: now_micros(),
                subscribed: false,
                recent: VecDeque::new(),
                told_by: 0,
                told_epoch: 0,
                epoch: 0,
                stale: None,
                attempting: Arc::new(tokio::sync::Mutex::new(())),
            });
            if slot.refs == 0 {
                // A lingering slot: forget what came while nobody waited
                // (a stored wake-up would only cost an extra attempt).
                slot.notify = Arc::new(Notify::new());
                slot.notify_write = Arc::new(Notify::new());
                slot.stale = None;
                slot.batch = 0;
            }
            // An entry's place is when the first waiter of its kind came.
            if writer && slot.writers == 0 {
                slot.write_place = now_micros();
            } else if !writer && slot.refs == slot.writers {
                slot.place = now_micros();
            }
            slot.refs += 1;
            if writer {
                slot.writers += 1;
                slot.notify_write.clone()
            } else {
                slot.readers += 1;
                slot.notify.clone()
            }
        };
        Subscription {
            shared: self.shared.clone(),
            channel,
            notify,
            writer,
            took: false,
            last: None,
        }
    }
}
