//! One waiter's registration on a channel ([`Subscription`]), and the
//! [`Baton`] a woken waiter carries.

use std::sync::Arc;

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::{LINGER, Shared, now_micros};
use crate::turn::{FALLBACK, Turn};

/// One waiter's registration on a channel.
pub(crate) struct Subscription {
    pub(super) shared: Arc<Shared>,
    pub(super) channel: Vec<u8>,
    pub(super) notify: Arc<Notify>,
    /// It waits to write a read-write lock (and is woken by writers'
    /// turns).
    pub(super) writer: bool,
    /// The waiter took the lock: the acquire script already took this
    /// client out of the queue (or moved it to the back for its other
    /// waiters), so the last one leaving does not `leave` again — a late
    /// `ZREM` could take out this client's next waiter, queued meanwhile.
    pub(super) took: bool,
    /// The last turn's `others_wait`, `batch_follows` and `back`: where
    /// the grant of that attempt sent the client in line.
    pub(super) last: Option<(bool, bool, u64)>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let (took, shared) = (self.took, self.shared.clone());
        let idle = {
            let mut slots = shared.slots();
            match slots.get_mut(&self.channel) {
                Some(slot) => {
                    slot.refs -= 1;
                    slot.writers -= usize::from(self.writer);
                    slot.readers -= usize::from(!self.writer && !took);
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
                    let _ = tokio::time::timeout(shared.timeout, leave(channel.clone(), None)).await;
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
pub(super) struct Baton(pub(super) Option<Arc<Notify>>);

impl Baton {
    pub(super) fn disarm(&mut self) {
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

impl Subscription {
    /// Whether the channel is subscribed on the server (else only this
    /// process's releases are heard: see [`Waiters::listen_locally`]).
    pub(super) fn is_subscribed(&self) -> bool {
        self.shared.is_subscribed(&self.channel)
    }

    /// Notes that it is `head`'s turn on a free lock: the next attempt
    /// drops it from the queue unless a message comes first.
    pub(super) fn set_stale(&self, head: String) {
        if let Some(slot) = self.shared.slots().get_mut(&self.channel)
            && slot.stale.as_ref().is_none_or(|(h, _)| *h != head)
        {
            slot.stale = Some((head, Instant::now()));
        }
    }

    /// The waiter took the lock. A head this client was waiting to drop
    /// has had its turn (the client took the lock after it): no other
    /// waiter of this client may drop it any more.
    pub(super) fn took(&mut self) {
        if let Some(slot) = self.shared.slots().get_mut(&self.channel) {
            slot.stale = None;
            slot.readers -= usize::from(!self.writer && !self.took);
            if let Some((true, false, back)) = self.last {
                if self.writer {
                    slot.write_place = back;
                } else {
                    slot.place = back;
                }
            }
        }
        self.took = true;
    }

    /// The lock a waiter holds while it attempts, so that this client's
    /// waiters of a kind whose line entry lets one in at a time (a lock, a
    /// permit, a writer) attempt one after the other, not side by side: each turn
    /// message wakes one of them, and several in flight at once race each
    /// other's grants (on Redlock: the client's entry moved to the back by
    /// one grant and brought forward by a sibling that set out before it,
    /// on some nodes and not others; slots and tokens contended among
    /// themselves).
    pub(super) fn one_at_a_time(&self) -> Option<Arc<tokio::sync::Mutex<()>>> {
        self.shared.slots().get(&self.channel).map(|s| s.attempting.clone())
    }

    pub(super) fn turn(&mut self) -> Turn {
        let mut slots = self.shared.slots();
        let turn = match slots.get_mut(&self.channel) {
            Some(slot) => {
                // This attempt sees what the nodes say now.
                slot.told_by = 0;
                slot.told_epoch += 1;
                Turn {
                    others_wait: if self.writer {
                        slot.writers > 1
                    } else {
                        slot.refs - slot.writers > 1
                    },
                    batch_follows: !self.writer && slot.batch > 0 && {
                        slot.batch -= 1;
                        slot.batch > 0
                    },
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
                    place: if self.writer { slot.write_place } else { slot.place },
                    back: now_micros(),
                }
            }
            None => Turn::default(),
        };
        self.last = Some((turn.others_wait, turn.batch_follows, turn.back));
        turn
    }
}
