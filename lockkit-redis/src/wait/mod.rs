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
//! layout in `layout`), and each also listens on a channel of its own per
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
//!
//! The registry of waiters is here ([`Waiters`]); the pub/sub connections
//! and the messages they bring are in `pubsub`, one waiter's registration in
//! `subscription`, and the wait loop of an acquisition in `wait_loop`.

mod pubsub;
mod subscription;
mod wait_loop;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use futures_util::future::join_all;
use redis::PushInfo;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::error::{Fault, NodeTimeout};
use crate::layout::Keys;

pub(crate) use pubsub::PubSubConn;
pub(crate) use subscription::Subscription;
pub(crate) use wait_loop::{Attempt, Turn, wait_loop};

use pubsub::{local, on_message, on_push};

/// How long a waiter sleeps without news when the server did not say how
/// long the holder's lease runs (a key without expiry).
pub(crate) const UNKNOWN_LEASE_RECHECK: Duration = Duration::from_secs(1);

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
pub(crate) const FALLBACK: Duration = Duration::from_millis(200);

/// Redlock: how long a waiter told its turn by one node waits for a
/// quorum of nodes to tell it too before it tries anyway. The copies of
/// one release come from the nodes within a round trip of each other; a
/// turn fewer nodes give (their lines or holds differ) is tried after
/// this.
const QUORUM_WAIT: Duration = Duration::from_millis(50);

/// This process's wall clock in µs (places in a line).
pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The fallback delay, with its jitter.
fn fallback() -> Duration {
    FALLBACK + Duration::from_micros(rand::random_range(0..=FALLBACK.as_micros() as u64))
}

/// Removes this client from a lock's waiter queue; given the channel, and
/// `Some(entry)` to take out only that entry of a read-write lock's line,
/// and only if it was told its turn and nobody of this client came since
/// (`None`: every entry of the client, at once).
pub(crate) type Leave =
    Arc<dyn Fn(Vec<u8>, Option<String>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

struct Slot {
    /// Wakes a waiter of the name (a read-write lock's: a reader).
    notify: Arc<Notify>,
    /// Wakes a writer of a read-write lock: a turn given to this client's
    /// entry for writing wakes a writer, not a reader.
    notify_write: Arc<Notify>,
    refs: usize,
    /// How many of the `refs` wait to write.
    writers: usize,
    /// How many of the `refs` wait to read (or for a permit, or a lock)
    /// and have not been granted yet.
    readers: usize,
    /// Readers woken by this client's last turn to read that have not
    /// tried yet (see [`Turn::batch_follows`]).
    batch: usize,
    /// This client's place in the name's line, by this process's clock
    /// (µs): when its first waiter came, or where its last grant sent it
    /// (the back). Redlock gives it to every node (see [`Turn::place`]).
    place: u64,
    /// The place of this client's entry for writing (a read-write lock),
    /// kept apart: a grant to its readers does not move its writers.
    write_place: u64,
    subscribed: bool,
    recent: VecDeque<Vec<u8>>,
    /// Redlock: the nodes (bits by connection) that told this client its
    /// turn since its last attempt set out (see `pubsub::on_message`).
    told_by: u64,
    /// Bumped whenever `told_by` starts over: a [`QUORUM_WAIT`] timer
    /// fires only if it did not.
    told_epoch: u64,
    /// Bumped by every message: a fallback timer fires only if no message
    /// came after the one that armed it.
    epoch: u64,
    /// The client that was given the turn (on a free lock), and when this
    /// client learned it: after the fallback delay, an attempt may drop it
    /// from the queue (see [`Turn::stale`]).
    stale: Option<(String, Instant)>,
    /// Held by the one waiter of this client attempting now, where one
    /// line entry lets one waiter in at a time (see [`Subscription::one_at_a_time`]).
    attempting: Arc<tokio::sync::Mutex<()>>,
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
            slot.wake_any();
        }
    }
}

impl Slot {
    /// Wakes one waiter of each kind (a message that names no kind).
    fn wake_any(&self) {
        self.notify.notify_one();
        self.notify_write.notify_one();
    }
}

/// The client whose turn a message's entry (`ID`, or `ID:w` for a
/// read-write lock's writers) gives, and whether it is to write.
pub(super) fn entry_client(entry: &[u8]) -> (&[u8], bool) {
    match entry.strip_suffix(b":w") {
        Some(id) => (id, true),
        None => (entry, false),
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
