//! The pub/sub connections of the waiters ([`PubSubConn`]), and what they
//! bring: release messages for the waiters of this process, and
//! disconnections, after which every name with waiters gets one wake-up.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, RedisResult, Value};
use tokio::time::Instant;

use super::{RECENT_PAYLOADS, Shared, entry_client, fallback};

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

    pub(super) async fn subscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().subscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().ssubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).subscribe(channels).await,
        }
    }

    pub(super) async fn unsubscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().unsubscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().sunsubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).unsubscribe(channels).await,
        }
    }

    pub(super) async fn ping(&self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            PubSubConn::Manager(m) => ping.query_async(&mut m.clone()).await,
            PubSubConn::Cluster(c) => ping.query_async(&mut c.clone()).await,
            PubSubConn::Swappable(m) => ping.query_async(&mut Self::manager(m)).await,
        }
    }
}

pub(super) fn on_push(shared: &Arc<Shared>, index: usize, info: PushInfo) {
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
            on_message(shared, own.as_deref().unwrap_or(channel), payload);
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

/// A message on `channel`, from the server or handed over in this process
/// (see [`Waiters::deliver_locally`]). A payload seen lately (the same
/// release again: the server's copy of one delivered locally, or Redlock's
/// from another node) changes nothing, not even a pending fallback —
/// except as below.
///
/// Redlock's nodes each tell a client its turn; the first copy wakes one
/// waiter, and copies that come before it sets out are dropped (waking one
/// waiter per copy set up to N waiters of the client against each other
/// for one turn). A copy that comes after an attempt set out on an earlier
/// one wakes a waiter again, once per attempt: that attempt may have
/// reached this copy's node before the release did, and then found no
/// quorum and slept as another client's turn (the node that named another
/// head) — while that client, told "not yours" by this client's nodes,
/// dropped this client from the line after its fallback delay.
pub(super) fn on_message(shared: &Arc<Shared>, channel: &[u8], payload: Vec<u8>) {
    let mut slots = shared.slots();
    let Some(slot) = slots.get_mut(channel) else { return };
    if payload == b"+" {
        // Taken: a pending fallback is not needed.
        slot.epoch += 1;
        slot.stale = None;
        return;
    }
    // `TOKEN|HEAD` with another client's entry: its turn; this client's
    // entry (`ID`, or `ID:w` for its writers): this client's turn, for a
    // waiter of that kind; no `HEAD`: everybody's.
    let head = head_of(&payload).map(entry_client);
    let own = shared.waiter_id.as_deref().map(str::as_bytes);
    let other_head = head
        .filter(|(id, _)| own != Some(*id))
        .map(|_| String::from_utf8_lossy(head_of(&payload).unwrap_or_default()).into_owned());
    let writer = head.map(|(_, writer)| writer);
    // (Redlock: one pub/sub connection per node.)
    let again = other_head.is_none() && shared.recovering.len() > 1;
    let attempts = slot.attempts;
    match slot
        .recent
        .iter_mut()
        .find(|(seen, _)| !payload.is_empty() && *seen == payload)
    {
        Some((_, delivered)) if again && attempts > *delivered => *delivered = attempts,
        Some(_) => return,
        None => {
            if slot.recent.len() == RECENT_PAYLOADS {
                slot.recent.pop_front();
            }
            slot.recent.push_back((payload, attempts));
        }
    }
    slot.epoch += 1;
    match other_head {
        Some(head) => {
            slot.stale = Some((head, Instant::now()));
            let (epoch, notify, notify_write, weak, channel) = (
                slot.epoch,
                slot.notify.clone(),
                slot.notify_write.clone(),
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
                    // (The entry watching may be to read or to write.)
                    notify.notify_one();
                    notify_write.notify_one();
                }
            });
        }
        None => {
            slot.stale = None;
            match writer {
                Some(true) => slot.notify_write.notify_one(),
                // A turn to read lets every reader of the client in: all
                // of them come (one line entry, one message).
                Some(false) if shared.keys.as_ref().is_some_and(|k| k.is_rw(channel)) => {
                    if slot.readers == 0 {
                        // A reader's entry left from the last turn, with no
                        // reader waiting now: out of the line, unless a new
                        // reader came meanwhile (see `Leave`).
                        leave_entry(shared, channel);
                    }
                    slot.batch = slot.readers;
                    slot.notify.notify_waiters();
                }
                Some(false) => slot.notify.notify_one(),
                None => slot.wake_any(),
            }
        }
    }
}

/// Takes this client's entry to read out of `channel`'s line (in the
/// background), if it was told its turn and no reader of this client came
/// since.
fn leave_entry(shared: &Arc<Shared>, channel: &[u8]) {
    let (Some(leave), Some(id), Ok(rt)) = (
        shared.leave.get().cloned(),
        shared.waiter_id.clone(),
        tokio::runtime::Handle::try_current(),
    ) else {
        return;
    };
    let (channel, timeout) = (channel.to_vec(), shared.timeout);
    rt.spawn(async move {
        let _ = tokio::time::timeout(timeout, leave(channel, Some(id))).await;
    });
}

/// The client whose turn a release message `TOKEN|HEAD` gives, or `None`
/// when it is everybody's (no `HEAD`, or another message).
pub(super) fn head_of(payload: &[u8]) -> Option<&[u8]> {
    let at = payload.iter().rposition(|b| *b == b'|')?;
    Some(&payload[at + 1..]).filter(|h| !h.is_empty())
}

/// The registries of this process's backends, by the keyspace they share
/// (servers, database, key prefix): a release hands its message to them
/// directly (see [`Waiters::deliver_locally`]).
type LocalRegistries = Mutex<HashMap<String, Vec<Weak<Shared>>>>;
static LOCAL: OnceLock<LocalRegistries> = OnceLock::new();

pub(super) fn local() -> MutexGuard<'static, HashMap<String, Vec<Weak<Shared>>>> {
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
