//! What the waiters of one backend share: each name's slot (who waits,
//! how to wake them, the client's place in the line), the pub/sub
//! connections and the timings of a wait.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::pubsub_conn::PubSubConn;
use crate::layout::Keys;
use crate::turn::FALLBACK;

/// How long a waiter sleeps without news when the server did not say how
/// long the holder's lease runs (a key without expiry).
pub(crate) const UNKNOWN_LEASE_RECHECK: Duration = Duration::from_secs(1);

/// How long a channel stays subscribed after its last waiter took the lock.
pub(super) const LINGER: Duration = Duration::from_secs(2);

/// Payloads remembered per channel to drop duplicates: Redlock's release
/// is published by every node that held the lock.
pub(super) const RECENT_PAYLOADS: usize = 16;

/// Redlock: how long a waiter told its turn by one node waits for a
/// quorum of nodes to tell it too before it tries anyway. The copies of
/// one release come from the nodes within a round trip of each other; a
/// turn fewer nodes give (their lines or holds differ) is tried after
/// this.
pub(super) const QUORUM_WAIT: Duration = Duration::from_millis(50);

/// This process's wall clock in µs (places in a line).
pub(crate) fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The fallback delay, with its jitter.
pub(super) fn fallback() -> Duration {
    FALLBACK + Duration::from_micros(rand::random_range(0..=FALLBACK.as_micros() as u64))
}

/// Removes this client from a lock's waiter queue; given the channel, and
/// `Some(entry)` to take out only that entry of a read-write lock's line,
/// and only if it was told its turn and nobody of this client came since
/// (`None`: every entry of the client, at once).
pub(crate) type Leave =
    Arc<dyn Fn(Vec<u8>, Option<String>) -> futures_util::future::BoxFuture<'static, ()> + Send + Sync>;

pub(super) struct Slot {
    /// Wakes a waiter of the name (a read-write lock's: a reader).
    pub(super) notify: Arc<Notify>,
    /// Wakes a writer of a read-write lock: a turn given to this client's
    /// entry for writing wakes a writer, not a reader.
    pub(super) notify_write: Arc<Notify>,
    pub(super) refs: usize,
    /// How many of the `refs` wait to write.
    pub(super) writers: usize,
    /// How many of the `refs` wait to read (or for a permit, or a lock)
    /// and have not been granted yet.
    pub(super) readers: usize,
    /// Readers woken by this client's last turn to read that have not
    /// tried yet (see [`Turn::batch_follows`]).
    pub(super) batch: usize,
    /// This client's place in the name's line, by this process's clock
    /// (µs): when its first waiter came, or where its last grant sent it
    /// (the back). Redlock gives it to every node (see [`Turn::place`]).
    pub(super) place: u64,
    /// The place of this client's entry for writing (a read-write lock),
    /// kept apart: a grant to its readers does not move its writers.
    pub(super) write_place: u64,
    pub(super) subscribed: bool,
    pub(super) recent: VecDeque<Vec<u8>>,
    /// Redlock: the nodes (bits by connection) that told this client its
    /// turn since its last attempt set out (see `pubsub::on_message`).
    pub(super) told_by: u64,
    /// Bumped whenever `told_by` starts over: a [`QUORUM_WAIT`] timer
    /// fires only if it did not.
    pub(super) told_epoch: u64,
    /// Bumped by every message: a fallback timer fires only if no message
    /// came after the one that armed it.
    pub(super) epoch: u64,
    /// The client that was given the turn (on a free lock), and when this
    /// client learned it: after the fallback delay, an attempt may drop it
    /// from the queue (see [`Turn::stale`]).
    pub(super) stale: Option<(String, Instant)>,
    /// Held by the one waiter of this client attempting now, where one
    /// line entry lets one waiter in at a time (see [`Subscription::one_at_a_time`]).
    pub(super) attempting: Arc<tokio::sync::Mutex<()>>,
}

pub(super) struct Shared {
    pub(super) slots: Mutex<HashMap<Vec<u8>, Slot>>,
    pub(super) conns: OnceLock<Vec<PubSubConn>>,
    pub(super) recovering: Vec<AtomicBool>,
    pub(super) warned: AtomicBool,
    /// Connections that must confirm a subscription before a waiter relies
    /// on messages (1; a quorum for Redlock).
    pub(super) required: usize,
    pub(super) timeout: Duration,
    /// Orders subscribe and unsubscribe commands.
    pub(super) sub_lock: tokio::sync::Mutex<()>,
    /// This client's waiter id, when the backend queues waiters.
    pub(super) waiter_id: Option<String>,
    /// The key layout, for this client's own channels (queued backends).
    pub(super) keys: Option<Keys>,
    pub(super) leave: OnceLock<Leave>,
    /// The keyspace this registry shares with others of this process (see
    /// [`Waiters::share_locally`]).
    pub(super) keyspace: OnceLock<String>,
}

impl Shared {
    pub(super) fn slots(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Slot>> {
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn conns(&self) -> &[PubSubConn] {
        self.conns.get().map_or(&[], Vec::as_slice)
    }

    /// What a waiter on the lock channel `channel` subscribes to: that
    /// channel, and this client's own channel of the name when it queues.
    pub(super) fn channels_of(&self, channel: &[u8]) -> Vec<Vec<u8>> {
        let mut all = vec![channel.to_vec()];
        if let (Some(keys), Some(id)) = (&self.keys, &self.waiter_id) {
            all.push(keys.waiter_channel(channel, id));
        }
        all
    }

    /// Whether `channel` is subscribed on the server (confirmed) now.
    pub(super) fn is_subscribed(&self, channel: &[u8]) -> bool {
        self.slots().get(channel).is_some_and(|s| s.subscribed)
    }

    pub(super) fn wake_all(&self) {
        for slot in self.slots().values() {
            slot.wake_any();
        }
    }
}

impl Slot {
    /// Wakes one waiter of each kind (a message that names no kind).
    pub(super) fn wake_any(&self) {
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
