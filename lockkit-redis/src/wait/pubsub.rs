//! What the waiters' pub/sub connections bring: release messages for the waiters of this process, and
//! disconnections, after which every name with waiters gets one wake-up.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::Duration;

use redis::{PushInfo, PushKind, Value};
use tokio::time::Instant;

use super::state::{QUORUM_WAIT, RECENT_PAYLOADS, Shared, Slot, entry_client, fallback};

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

/// A message on `channel`, from the server (`node`: the connection it came
/// on) or handed over in this process (`None`; see
/// [`Waiters::deliver_locally`]). A payload seen lately (the same release
/// again: the server's copy of one delivered locally, or Redlock's from
/// another node) changes nothing, not even a pending fallback.
///
/// Redlock's nodes each tell a client its turn, and the turn is real only
/// where a quorum of them agrees: a waiter is woken once a quorum of nodes
/// told it (since its client's last attempt set out), or [`QUORUM_WAIT`]
/// after the first of them did. Woken at the first copy, an attempt could
/// reach the slower nodes before their release, find no quorum, and sleep
/// its fallback delay as another client's turn (the node that named another
/// head) while the copies it needed were dropped as duplicates; woken at
/// every copy, up to N waiters of the client raced each other for one
/// turn.
pub(super) fn on_message(shared: &Arc<Shared>, channel: &[u8], payload: Vec<u8>, node: Option<usize>) {
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
    if !payload.is_empty() && slot.recent.contains(&payload) {
        return;
    }
    if let Some(node) = node.filter(|_| head.is_some() && other_head.is_none() && shared.required > 1) {
        let first = slot.told_by == 0;
        slot.told_by |= 1 << node.min(63);
        if (slot.told_by.count_ones() as usize) < shared.required {
            if first {
                wake_later(shared, channel, slot.told_epoch, payload, writer);
            }
            return;
        }
    }
    slot.epoch += 1;
    remember(slot, payload);
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
        None => wake(shared, slot, channel, writer),
    }
}

/// Notes `payload` as seen.
fn remember(slot: &mut Slot, payload: Vec<u8>) {
    if slot.recent.len() == RECENT_PAYLOADS {
        slot.recent.pop_front();
    }
    slot.recent.push_back(payload);
}

/// Wakes the waiters of this client's turn: a writer (`Some(true)`), the
/// readers, one waiter of the name, or (`None`: everybody's turn) one of
/// each kind. (Another client's turn leaves the count of nodes that told
/// this client its own as it is.)
fn wake(shared: &Arc<Shared>, slot: &mut Slot, channel: &[u8], writer: Option<bool>) {
    slot.told_by = 0;
    slot.told_epoch += 1;
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

/// Redlock: wakes this client's waiters [`QUORUM_WAIT`] after one node told
/// it its turn (`payload`), unless a quorum of nodes told it, or one of its
/// attempts set out, first (`told_epoch` moved on).
fn wake_later(shared: &Arc<Shared>, channel: &[u8], told_epoch: u64, payload: Vec<u8>, writer: Option<bool>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (weak, channel) = (Arc::downgrade(shared), channel.to_vec());
    rt.spawn(async move {
        tokio::time::sleep(QUORUM_WAIT).await;
        let Some(shared) = weak.upgrade() else { return };
        let mut slots = shared.slots();
        let Some(slot) = slots.get_mut(&channel).filter(|s| s.told_epoch == told_epoch) else {
            return;
        };
        slot.epoch += 1;
        remember(slot, payload);
        wake(&shared, slot, &channel, writer);
    });
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
