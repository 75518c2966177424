//! Waiting without polling: one pub/sub connection per backend (per node for
//! Redlock), shared by every waiter.
//!
//! A waiter subscribes to its lock's channel *before* it tries again, so a
//! release between its attempt and its sleep is never missed; it then sleeps
//! until a release message arrives or the holder's lease runs out,
//! whichever comes first. Subscriptions are counted per channel: the first
//! waiter on a name sends `SUBSCRIBE`, the last one to leave (acquired, timed
//! out, or dropped) `UNSUBSCRIBE`.
//!
//! A release message wakes **one** local waiter of that name (the next in
//! line), not all of them: the Redis commands spent per hand-off do not grow
//! with the number of waiters in a process. The woken waiter carries a
//! [`Baton`]: if it gives up without a definite answer (cancelled, or its
//! attempt failed), the baton wakes the next waiter instead.
//!
//! Across processes, the waiting clients queue on the server (see the key
//! layout in `scripts`), and each also listens on a channel of its own per
//! name: a release message goes to the client whose turn it is, which
//! wakes a waiter at once, and to the next in line, which only arms a
//! short fallback timer, cancelled when the lock is announced as taken, so
//! a client that crashed while queued delays a hand-off by that much once
//! and is then dropped from the queue. The clients further back hear
//! nothing: a hand-off costs two messages however many clients wait.
//!
//! When a pub/sub connection drops, messages may be lost while it is down:
//! after it is back (and resubscribed) every name with waiters gets one
//! wake-up.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::sync::Notify;
use tokio::time::Instant;

use lockkit_core::LockError;

use crate::error::{Fault, NodeTimeout};
use crate::scripts::{Keys, TurnOf};

/// One pub/sub connection.
#[derive(Clone)]
pub(crate) enum PubSubConn {
    /// A RESP3 connection manager: reconnects and resubscribes by itself.
    Manager(ConnectionManager),
    /// A cluster connection: sharded channels (`SSUBSCRIBE`), followed
    /// across resharding by the client.
    Cluster(ClusterConnection),
    /// Sentinel mode: the manager of the current master, replaced on
    /// failover.
    Swappable(Arc<Mutex<ConnectionManager>>),
}

impl PubSubConn {
    fn manager(m: &Arc<Mutex<ConnectionManager>>) -> ConnectionManager {
        m.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    async fn subscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().subscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().ssubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).subscribe(channels).await,
        }
    }

    async fn unsubscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().unsubscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().sunsubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).unsubscribe(channels).await,
        }
    }

    async fn ping(&self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            PubSubConn::Manager(m) => ping.query_async(&mut m.clone()).await,
            PubSubConn::Cluster(c) => ping.query_async(&mut c.clone()).await,
            PubSubConn::Swappable(m) => ping.query_async(&mut Self::manager(m)).await,
        }
    }
}

/// How long a channel stays subscribed after its last waiter took the lock.
const LINGER: Duration = Duration::from_secs(2);

/// Payloads remembered per channel to drop duplicates: Redlock's release
/// is published by every node that held the lock.
const RECENT_PAYLOADS: usize = 16;

/// How long a client whose turn it is not waits before it tries anyway
/// (unless the lock is announced as taken first): the base, plus up to as
/// much again at random. A fair attempt then drops the client whose turn it
/// was from the queue if it still has not taken the free lock (it is dead,
/// or gone): long enough that a live client on a loaded machine takes its
/// turn first, short enough that a dead one delays a hand-off once by a
/// fraction of a second.
const FALLBACK: Duration = Duration::from_millis(200);

/// The fallback delay, with its jitter.
fn fallback() -> Duration {
    FALLBACK + Duration::from_micros(rand::random_range(0..=FALLBACK.as_micros() as u64))
}

/// Removes this client from a lock's waiter queue; given the channel.
pub(crate) type Leave = Arc<dyn Fn(Vec<u8>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

struct Slot {
    notify: Arc<Notify>,
    refs: usize,
    subscribed: bool,
    recent: VecDeque<Vec<u8>>,
    /// Bumped by every message: a fallback timer fires only if no message
    /// came after the one that armed it.
    epoch: u64,
    /// The client that was given the turn (on a free lock), and when this
    /// client learned it: after the fallback delay, an attempt may drop it
    /// from the queue (see [`Turn::stale`]).
    stale: Option<(String, Instant)>,
}

struct Shared {
    slots: Mutex<HashMap<Vec<u8>, Slot>>,
    conns: OnceLock<Vec<PubSubConn>>,
    recovering: Vec<AtomicBool>,
    warned: AtomicBool,
    /// Connections that must confirm a subscription before a waiter relies
    /// on messages (1; a quorum for Redlock).
    required: usize,
    timeout: Duration,
    /// Orders subscribe and unsubscribe commands.
    sub_lock: tokio::sync::Mutex<()>,
    /// This client's waiter id, when the backend queues waiters.
    waiter_id: Option<String>,
    /// The key layout, for this client's own channels (queued backends).
    keys: Option<Keys>,
    leave: OnceLock<Leave>,
    /// The keyspace this registry shares with others of this process (see
    /// [`Waiters::share_locally`]).
    keyspace: OnceLock<String>,
}

impl Shared {
    fn slots(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn conns(&self) -> &[PubSubConn] {
        self.conns.get().map_or(&[], Vec::as_slice)
    }

    /// What a waiter on the lock channel `channel` subscribes to: that
    /// channel, and this client's own channel of the name when it queues.
    fn channels_of(&self, channel: &[u8]) -> Vec<Vec<u8>> {
        let mut all = vec![channel.to_vec()];
        if let (Some(keys), Some(id)) = (&self.keys, &self.waiter_id) {
            all.push(keys.waiter_channel(channel, id));
        }
        all
    }

    /// Whether `channel` is subscribed on the server (confirmed) now.
    fn is_subscribed(&self, channel: &[u8]) -> bool {
        self.slots().get(channel).is_some_and(|s| s.subscribed)
    }

    fn wake_all(&self) {
        for slot in self.slots().values() {
            slot.notify.notify_one();
        }
    }
}

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
    /// client it names (or every client, when it names none) among this
    /// process's backends on the same keyspace hears it now, without the
    /// round trip through the server's pub/sub (the server's copy, when it
    /// comes, is dropped as a duplicate). A hand-off between two clients of
    /// one process then costs the release and the next holder's claim.
    pub fn deliver_locally(&self, channel: &[u8], payload: &[u8]) {
        let Some(keyspace) = self.shared.keyspace.get() else {
            return;
        };
        let head = head_of(payload);
        let group: Vec<Arc<Shared>> = match local().get(keyspace) {
            Some(group) => group
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|s| head.is_none() || s.waiter_id.as_deref().map(str::as_bytes) == head)
                .collect(),
            None => return,
        };
        for shared in &group {
            on_message(shared, channel, payload.to_vec(), None);
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
    fn subscribe_failed(&self, f: &Fault) {
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

    /// Registers a waiter on `channel` and makes sure the channel is
    /// subscribed (confirmed by the server) before returning. Dropping the
    /// result, also while this future is pending, unregisters.
    pub async fn subscribe(&self, channel: Vec<u8>) -> Result<Subscription, Fault> {
        let sub = self.listen_locally(channel);
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
    pub fn listen_locally(&self, channel: Vec<u8>) -> Subscription {
        let notify = {
            let mut slots = self.shared.slots();
            let slot = slots.entry(channel.clone()).or_insert_with(|| Slot {
                notify: Arc::new(Notify::new()),
                refs: 0,
                subscribed: false,
                recent: VecDeque::new(),
                epoch: 0,
                stale: None,
            });
            if slot.refs == 0 {
                // A lingering slot: forget what came while nobody waited
                // (a stored wake-up would only cost an extra attempt).
                slot.notify = Arc::new(Notify::new());
                slot.stale = None;
            }
            slot.refs += 1;
            slot.notify.clone()
        };
        Subscription {
            shared: self.shared.clone(),
            channel,
            notify,
            took: false,
        }
    }
}

fn on_push(shared: &Arc<Shared>, index: usize, info: PushInfo) {
    match info.kind {
        PushKind::Message | PushKind::SMessage => {
            let [Value::BulkString(channel), payload, ..] = info.data.as_slice() else {
                return;
            };
            let payload = match payload {
                Value::BulkString(b) => b.clone(),
                _ => Vec::new(),
            };
            // This client's own channel of a name speaks for the name.
            let own = match (&shared.keys, &shared.waiter_id) {
                (Some(keys), Some(id)) => keys.lock_of_waiter_channel(channel, id),
                _ => None,
            };
            on_message(shared, own.as_deref().unwrap_or(channel), payload, Some(index));
        }
        PushKind::Disconnection => {
            let Some(flag) = shared.recovering.get(index) else {
                return;
            };
            if flag.swap(true, Ordering::AcqRel) {
                return;
            }
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                rt.spawn(recover(Arc::downgrade(shared), index));
            } else {
                flag.store(false, Ordering::Release);
            }
        }
        _ => {}
    }
}

/// A message on `channel`, from the server (connection `node`) or handed
/// over in this process (see [`Waiters::deliver_locally`]). A payload seen
/// lately (the same release again: the server's copy of one delivered
/// locally, or Redlock's from another node) changes nothing, not even a
/// pending fallback — except that each Redlock node's copy of this
/// client's turn wakes a waiter again: an attempt made on the first copy
/// may have found a node that had not released yet.
fn on_message(shared: &Arc<Shared>, channel: &[u8], payload: Vec<u8>, node: Option<usize>) {
    let mut slots = shared.slots();
    let Some(slot) = slots.get_mut(channel) else { return };
    if payload == b"+" {
        // Taken: a pending fallback is not needed.
        slot.epoch += 1;
        slot.stale = None;
        return;
    }
    // `TOKEN|HEAD` with another client's id: its turn; anything else:
    // this client's (or everybody's).
    let other_head = head_of(&payload)
        .filter(|h| shared.waiter_id.as_deref().map(str::as_bytes) != Some(*h))
        .map(|h| String::from_utf8_lossy(h).into_owned());
    let empty = payload.is_empty();
    let seen = match node {
        Some(i) if other_head.is_none() && shared.conns().len() > 1 => {
            let mut per_node = payload;
            per_node.push(0);
            per_node.extend_from_slice(&i.to_le_bytes());
            per_node
        }
        _ => payload,
    };
    if !empty && slot.recent.contains(&seen) {
        return;
    }
    slot.epoch += 1;
    if slot.recent.len() == RECENT_PAYLOADS {
        slot.recent.pop_front();
    }
    slot.recent.push_back(seen);
    match other_head {
        Some(head) => {
            slot.stale = Some((head, Instant::now()));
            let (epoch, notify, weak, channel) = (
                slot.epoch,
                slot.notify.clone(),
                Arc::downgrade(shared),
                channel.to_vec(),
            );
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let delay = fallback();
            rt.spawn(async move {
                tokio::time::sleep(delay).await;
                let Some(shared) = weak.upgrade() else { return };
                if shared.slots().get(&channel).is_some_and(|s| s.epoch == epoch) {
                    notify.notify_one();
                }
            });
        }
        None => {
            slot.stale = None;
            slot.notify.notify_one();
        }
    }
}

/// The client whose turn a release message `TOKEN|HEAD` gives, or `None`
/// when it is everybody's (no `HEAD`, or another message).
fn head_of(payload: &[u8]) -> Option<&[u8]> {
    let at = payload.iter().rposition(|b| *b == b'|')?;
    Some(&payload[at + 1..]).filter(|h| !h.is_empty())
}

/// The registries of this process's backends, by the keyspace they share
/// (servers, database, key prefix): a release hands its message to them
/// directly (see [`Waiters::deliver_locally`]).
type LocalRegistries = Mutex<HashMap<String, Vec<Weak<Shared>>>>;
static LOCAL: OnceLock<LocalRegistries> = OnceLock::new();

fn local() -> MutexGuard<'static, HashMap<String, Vec<Weak<Shared>>>> {
    LOCAL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Brings connection `index` back after a disconnection (a command makes
/// the manager reconnect and resubscribe), then wakes every waiter once: a
/// release published while it was down was lost.
async fn recover(weak: Weak<Shared>, index: usize) {
    let mut delay = Duration::from_millis(20);
    loop {
        tokio::time::sleep(delay).await;
        let Some(shared) = weak.upgrade() else { return };
        let Some(conn) = shared.conns().get(index).cloned() else {
            shared.recovering[index].store(false, Ordering::Release);
            return;
        };
        let timeout = shared.timeout;
        drop(shared);
        if let Ok(Ok(())) = tokio::time::timeout(timeout, conn.ping()).await {
            break;
        }
        delay = (delay * 2).min(Duration::from_secs(1));
    }
    if let Some(shared) = weak.upgrade() {
        shared.recovering[index].store(false, Ordering::Release);
        tracing::debug!(connection = index, "pub/sub connection back; waking waiters");
        shared.wake_all();
    }
}

/// One waiter's registration on a channel.
pub(crate) struct Subscription {
    shared: Arc<Shared>,
    channel: Vec<u8>,
    notify: Arc<Notify>,
    /// The waiter took the lock: the acquire script already took this
    /// client out of the queue (or moved it to the back for its other
    /// waiters), so the last one leaving does not `leave` again — a late
    /// `ZREM` could take out this client's next waiter, queued meanwhile.
    took: bool,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let (took, shared) = (self.took, self.shared.clone());
        let idle = {
            let mut slots = shared.slots();
            match slots.get_mut(&self.channel) {
                Some(slot) => {
                    slot.refs -= 1;
                    // A waiter that gave up takes its client out of the queue
                    // at once: the slot goes now, so that a new waiter
                    // subscribes (and queues) only after that.
                    slot.refs == 0 && (took || slots.remove(&self.channel).is_some())
                }
                None => false,
            }
        };
        if !idle {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channel = std::mem::take(&mut self.channel);
        rt.spawn(async move {
            if took {
                // The lock was taken: the channel stays subscribed a while
                // for this client's next wait (a release-and-lock-again loop
                // then costs no SUBSCRIBE/UNSUBSCRIBE per cycle).
                tokio::time::sleep(LINGER).await;
            }
            // Held through the UNSUBSCRIBE: a new waiter's SUBSCRIBE waits.
            let _order = shared.sub_lock.lock().await;
            if took {
                let mut slots = shared.slots();
                if slots.get(&channel).is_none_or(|s| s.refs > 0) {
                    return; // waited for again, or gone
                }
                slots.remove(&channel);
            } else {
                if shared.slots().contains_key(&channel) {
                    return; // a new waiter came meanwhile and keeps it
                }
                if let Some(leave) = shared.leave.get() {
                    let _ = tokio::time::timeout(shared.timeout, leave(channel.clone())).await;
                }
            }
            let timeout = shared.timeout;
            let channels = shared.channels_of(&channel);
            join_all(
                shared
                    .conns()
                    .iter()
                    .map(|c| tokio::time::timeout(timeout, c.unsubscribe(&channels))),
            )
            .await;
        });
    }
}

/// A woken waiter's duty to wake the next one if it stops without a
/// definite answer.
struct Baton(Option<Arc<Notify>>);

impl Baton {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Baton {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.notify_one();
        }
    }
}

/// What one attempt of a waiting acquisition found.
pub(crate) enum Attempt<T> {
    /// Acquired.
    Done(T),
    /// Held by another owner; free at the latest after `retry_in`. Or free,
    /// but the turn of the waiting client `turn_of` (a fair queue): tried
    /// again after the fallback delay unless a message comes first, and
    /// that client is then dropped from the queue if it still has not
    /// taken it.
    Busy {
        /// When to try again without a message.
        retry_in: Duration,
        /// Free, but this client's turn.
        turn_of: Option<TurnOf>,
    },
    /// Redlock split vote: try again after `after`, messages or not.
    Backoff {
        /// The random delay.
        after: Duration,
    },
}

/// What a waiting attempt should tell the waiter queue.
#[derive(Debug, Clone, Default)]
pub(crate) struct Turn {
    /// More waiters of this client wait for the same name.
    pub others_wait: bool,
    /// A client that was given the turn and did not take it (seen before a
    /// fallback wake-up).
    pub stale: Option<String>,
}

impl Subscription {
    /// Whether the channel is subscribed on the server (else only this
    /// process's releases are heard: see [`Waiters::listen_locally`]).
    fn is_subscribed(&self) -> bool {
        self.shared.is_subscribed(&self.channel)
    }

    /// Notes that it is `head`'s turn on a free lock: the next attempt
    /// drops it from the queue unless a message comes first.
    fn set_stale(&self, head: String) {
        if let Some(slot) = self.shared.slots().get_mut(&self.channel)
            && slot.stale.as_ref().is_none_or(|(h, _)| *h != head)
        {
            slot.stale = Some((head, Instant::now()));
        }
    }

    /// The waiter took the lock. A head this client was waiting to drop
    /// has had its turn (the client took the lock after it): no other
    /// waiter of this client may drop it any more.
    fn took(&mut self) {
        self.took = true;
        if let Some(slot) = self.shared.slots().get_mut(&self.channel) {
            slot.stale = None;
        }
    }

    fn turn(&self) -> Turn {
        let mut slots = self.shared.slots();
        match slots.get_mut(&self.channel) {
            Some(slot) => Turn {
                others_wait: slot.refs > 1,
                // Only once the client given the turn had the fallback
                // delay to take it: an attempt made for another reason
                // (a new lock call, a lease running out) must not drop a
                // client that is about to take its turn.
                stale: match &slot.stale {
                    Some((head, since)) if since.elapsed() >= FALLBACK => {
                        let head = head.clone();
                        slot.stale = None;
                        Some(head)
                    }
                    _ => None,
                },
            },
            None => Turn::default(),
        }
    }
}

/// The delay after the `failures`-th failed attempt in a row: exponential
/// from 20 ms to 1 s, with jitter.
fn error_backoff(failures: u32) -> Duration {
    let max_ms = (20u64 << failures.min(6)).min(1000);
    Duration::from_millis(rand::random_range(max_ms / 2..=max_ms))
}

/// Waits for `channel`'s lock: subscribes (before the next attempt), then
/// tries `attempt` until it succeeds or `deadline` passes, sleeping after a
/// `Busy` until a release message or the holder's expiry. The attempt that
/// runs at or after the deadline is the last one.
///
/// A retryable error does not end the wait: the waiter backs off and tries
/// again (a server restart is ridden out); if the wait ends while the last
/// attempt failed, that error is returned instead of "not acquired". When
/// subscribing fails (no pub/sub permission, connection down) the waiter
/// still works, waking on the holder's expiry, and subscribes again before
/// its next attempt. Cancel safe as long as `attempt` is.
pub(crate) async fn wait_loop<T, F, Fut>(
    waiters: &Waiters,
    channel: &[u8],
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>, LockError>
where
    F: FnMut(Turn) -> Fut,
    Fut: Future<Output = Result<Attempt<T>, LockError>>,
{
    let mut sub: Option<Subscription> = None;
    let mut baton = Baton(None);
    let mut failures = 0u32;
    loop {
        if !sub.as_ref().is_some_and(Subscription::is_subscribed) {
            match waiters.subscribe(channel.to_vec()).await {
                Ok(s) => sub = Some(s),
                Err(f) => {
                    waiters.subscribe_failed(&f);
                    // Without the server's messages, still hear this
                    // process's releases.
                    if sub.is_none() {
                        sub = Some(waiters.listen_locally(channel.to_vec()));
                    }
                }
            }
        }
        let mut notified = sub.as_ref().map(|s| Box::pin(s.notify.notified()));
        if let Some(n) = notified.as_mut() {
            n.as_mut().enable();
        }
        let turn = sub.as_ref().map(Subscription::turn).unwrap_or_default();
        let (wake_at, listen, last_error) = match attempt(turn).await {
            Ok(Attempt::Done(t)) => {
                baton.disarm();
                drop(notified);
                if let Some(sub) = &mut sub {
                    sub.took();
                }
                return Ok(Some(t));
            }
            Ok(Attempt::Busy {
                retry_in,
                turn_of: None,
            }) => {
                failures = 0;
                (Instant::now() + retry_in, true, None)
            }
            Ok(Attempt::Busy {
                turn_of: Some(TurnOf { head, behind }),
                ..
            }) => {
                failures = 0;
                if let Some(sub) = &sub {
                    sub.set_stale(head);
                }
                // The next in line hears whether the head comes and drops
                // it if not; a client further back, told nothing more until
                // its own turn nears, looks again only once each client
                // ahead of it could have done the same.
                (Instant::now() + fallback() * (behind.min(15) + 1), true, None)
            }
            Ok(Attempt::Backoff { after }) => {
                failures = 0;
                (Instant::now() + after, false, None)
            }
            Err(e) if e.is_retryable() => {
                tracing::debug!(error = %e, "attempt failed while waiting; backing off");
                failures += 1;
                // The baton stays armed: this waiter got no answer.
                (Instant::now() + error_backoff(failures), false, Some(e))
            }
            Err(e) => return Err(e),
        };
        if last_error.is_none() {
            baton.disarm();
        }
        if let Some(d) = deadline
            && Instant::now() >= d
        {
            return match last_error {
                Some(e) => Err(e),
                None => Ok(None),
            };
        }
        let wake_at = deadline.map_or(wake_at, |d| d.min(wake_at));
        let sleep = pin!(tokio::time::sleep_until(wake_at));
        match notified.filter(|_| listen) {
            Some(n) => {
                tokio::select! {
                    _ = n => baton = Baton(sub.as_ref().map(|s| s.notify.clone())),
                    _ = sleep => {}
                }
            }
            None => sleep.await,
        }
    }
}
