//! Waking waiters: a registry of the names this process's callers wait for,
//! signalled by local releases and — on Postgres — by one `LISTEN`
//! connection per registry that hears every client's releases.
//!
//! Fair waiters stand in the registry in their order in the database's line
//! (`<table>_waiters`), and a release wakes only the first of them: the one
//! that may take the name, if the head of the line is in this process at
//! all. Semaphores and read-write locks stand in the same registry under
//! their line keys (`wait::line_key`); a waiter whose grant leaves room for
//! another (a permit left, a reader in) wakes the next as it goes. Backends of one process on the same database and table share one
//! registry ([`Waiters::shared`]), so a release by any of them wakes the
//! next in line among all of them, not one waiter per backend.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use tokio::sync::Notify;

use crate::shared::{SharedByKey, shared_by_key};

/// The names somebody in this process waits for.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    names: Mutex<HashMap<Vec<u8>, Slot>>,
    /// Ties between equal line positions (never, but keys must be unique).
    seq: AtomicU64,
    /// Stops the registry's `LISTEN` connection (Postgres), once started.
    #[cfg(feature = "postgres")]
    pub(super) listener: OnceLock<tokio_util::sync::CancellationToken>,
    /// The last holds this process released (name, token): their
    /// notifications, when the server delivers them, wake nobody again.
    #[cfg(feature = "postgres")]
    pub(super) released: Mutex<std::collections::VecDeque<(Vec<u8>, i64)>>,
    /// The owners that hold a name (by line key) through this process, as
    /// far as it has seen: their next `lock` of it may be a re-entry, taken
    /// at once, so it tries before queueing behind this process's waiters.
    holders: Mutex<std::collections::HashSet<(Vec<u8>, Vec<u8>)>>,
}

/// Releases remembered per registry to drop their own notifications.
#[cfg(feature = "postgres")]
const RECENT_RELEASES: usize = 64;

#[cfg(feature = "postgres")]
impl Drop for Waiters {
    fn drop(&mut self) {
        if let Some(stop) = self.listener.get() {
            stop.cancel();
        }
    }
}

/// How a fair waiter is woken: its bell, and whether the last ring only
/// said that it moved up to first in this process behind a waiter that
/// took the name (which is held then: nothing to try).
#[derive(Debug, Clone, Default)]
struct Turn {
    notify: Arc<Notify>,
    moved_up: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Unfair waiters, one woken by a release (the others try on their
    /// backoff): woken all at once, they met the releaser's next claim
    /// in a herd — on SQLite, in turn at the file's gate, which cut
    /// `fair=false` throughput to a third.
    all: Weak<Notify>,
    /// Fair waiters by their place in the database's line.
    line: BTreeMap<(i64, u64), Turn>,
    /// The door fair acquisitions of this process pass one at a time, in
    /// the order they arrive (see [`Waiters::door`]).
    door: Weak<tokio::sync::Mutex<()>>,
}

impl Slot {
    fn is_empty(&self) -> bool {
        self.all.strong_count() == 0 && self.line.is_empty() && self.door.strong_count() == 0
    }

    fn wake(&self) {
        if let Some(n) = self.all.upgrade() {
            n.notify_one();
        }
        self.wake_first();
    }

    /// Wakes the first fair waiter (a permit it finds when it next waits, if
    /// it is not waiting now) to try the name.
    fn wake_first(&self) {
        if let Some(turn) = self.line.values().next() {
            turn.moved_up.store(false, Ordering::SeqCst);
            turn.notify.notify_one();
        }
    }

    /// Tells the first fair waiter that it is first now, behind a waiter
    /// that took the name: it need not try, only wait as the first (a
    /// release that follows rings again, clearing the flag first).
    fn move_up_first(&self) {
        if let Some(turn) = self.line.values().next() {
            turn.moved_up.store(true, Ordering::SeqCst);
            turn.notify.notify_one();
        }
    }
}

/// One unfair waiter's interest in a name; dropping it (also when the
/// waiting future is cancelled) forgets the name once nobody waits for it.
#[derive(Debug)]
pub(crate) struct Subscription {
    waiters: Arc<Waiters>,
    name: Vec<u8>,
    notify: Arc<Notify>,
}

impl Subscription {
    pub fn notify(&self) -> &Notify {
        &self.notify
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let last = Arc::strong_count(&self.notify) == 1;
        self.waiters.forget(&self.name, last, |slot| slot.all = Weak::new());
    }
}

/// The door of a name's line in this process (see [`Waiters::door`]);
/// dropping it forgets the name once nobody else uses it.
#[derive(Debug)]
pub(crate) struct Door {
    waiters: Arc<Waiters>,
    name: Vec<u8>,
    door: Arc<tokio::sync::Mutex<()>>,
}

impl Door {
    /// Waits for this acquisition's turn at the door (FIFO).
    pub async fn pass(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.door.lock().await
    }
}

impl Drop for Door {
    fn drop(&mut self) {
        let last = Arc::strong_count(&self.door) == 1;
        self.waiters.forget(&self.name, last, |slot| slot.door = Weak::new());
    }
}

/// A fair waiter's place in this process's line for a name; dropping it
/// (served, gave up, cancelled) leaves, and if it was first, wakes the next:
/// to try the name, unless this one was [`served`](Self::served) without
/// room for another.
#[derive(Debug)]
pub(crate) struct InLine {
    waiters: Arc<Waiters>,
    name: Vec<u8>,
    key: (i64, u64),
    turn: Turn,
    served: Option<Served>,
}

/// How a waiter left its line having taken the name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// Nobody else may go now (a mutex, the write hold, the last permit):
    /// the next is only told that it is first.
    Full,
    /// Another may be granted beside it (a permit left, a read hold): the
    /// next tries at once.
    Room,
}

impl InLine {
    /// Whether this is the first fair waiter for its name in this process.
    pub fn is_first(&self) -> bool {
        self.waiters
            .names()
            .get(&self.name)
            .is_some_and(|slot| slot.line.keys().next() == Some(&self.key))
    }

    /// The same wake-up, to share (the renewal task wakes it too).
    pub fn notify_arc(&self) -> Arc<Notify> {
        self.turn.notify.clone()
    }

    /// Whether the last wake-up only moved this waiter up to first behind
    /// one that took the name (see [`Slot::move_up_first`]); clears it.
    pub fn take_moved_up(&self) -> bool {
        self.turn.moved_up.swap(false, Ordering::SeqCst)
    }

    /// This waiter took the name: the next one, woken as it leaves, tries
    /// it only if the grant left `Room`.
    pub fn served(&mut self, how: Served) {
        self.served = Some(how);
    }

    /// The waiter's row got a new place in the database's line (it joined
    /// again after its row was lost).
    pub fn move_to(&mut self, id: i64) {
        let mut names = self.waiters.names();
        let slot = names.entry(self.name.clone()).or_default();
        slot.line.remove(&self.key);
        self.key = (id, self.waiters.seq.fetch_add(1, Ordering::Relaxed));
        slot.line.insert(self.key, self.turn.clone());
    }
}

impl Drop for InLine {
    fn drop(&mut self) {
        let mut names = self.waiters.names();
        let Some(slot) = names.get_mut(&self.name) else { return };
        let was_first = slot.line.keys().next() == Some(&self.key);
        slot.line.remove(&self.key);
        if slot.is_empty() {
            names.remove(&self.name);
        } else if was_first && self.served == Some(Served::Full) {
            slot.move_up_first();
        } else if was_first {
            slot.wake_first();
        }
    }
}

/// Registries shared by the backends of this process, by database and table.
static SHARED: SharedByKey<Waiters> = OnceLock::new();

impl Waiters {
    fn names(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Slot>> {
        self.names.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registry of every backend of this process on the database and
    /// table `key` names (`None`: a private one, e.g. for an in-memory
    /// SQLite database, which no other backend sees).
    pub fn shared(key: Option<String>) -> Arc<Waiters> {
        let Some(key) = key else {
            return Arc::default();
        };
        shared_by_key(&SHARED, key)
    }

    /// A handle's drop: when it was the `last` strong reference (the slot
    /// holds a weak one), `clear` its part of `name`'s slot, and forget the
    /// name once the slot is empty.
    fn forget(&self, name: &[u8], last: bool, clear: impl FnOnce(&mut Slot)) {
        let mut names = self.names();
        if last && let Some(slot) = names.get_mut(name) {
            clear(slot);
            if slot.is_empty() {
                names.remove(name);
            }
        }
    }

    /// Registers an unfair waiter's interest in `name`.
    pub fn subscribe(self: &Arc<Self>, name: &[u8]) -> Subscription {
        let mut names = self.names();
        if names.len() >= 1024 {
            // Slots a racing `wake` kept alive past their last drop.
            names.retain(|_, slot| !slot.is_empty());
        }
        let slot = names.entry(name.to_vec()).or_default();
        let notify = match slot.all.upgrade() {
            Some(n) => n,
            None => {
                let n = Arc::new(Notify::new());
                slot.all = Arc::downgrade(&n);
                n
            }
        };
        Subscription {
            waiters: self.clone(),
            name: name.to_vec(),
            notify,
        }
    }

    /// The door of `name`'s line in this process: a fair acquisition passes
    /// it for its first attempt and, when the name is busy, its joining the
    /// line, one at a time in the order they came. Without it, acquisitions
    /// of one process (which on SQLite all queue for the one writer, in no
    /// particular order) reach the database in any order, and a client
    /// that just released could claim a free name before a waiter that
    /// found it held has joined the line.
    pub fn door(self: &Arc<Self>, name: &[u8]) -> Door {
        let mut names = self.names();
        let slot = names.entry(name.to_vec()).or_default();
        let door = match slot.door.upgrade() {
            Some(d) => d,
            None => {
                let d = Arc::new(tokio::sync::Mutex::new(()));
                slot.door = Arc::downgrade(&d);
                d
            }
        };
        Door {
            waiters: self.clone(),
            name: name.to_vec(),
            door,
        }
    }

    /// Puts a fair waiter whose row is `id` in the database's line into
    /// this process's line for `name`.
    pub fn line_up(self: &Arc<Self>, name: &[u8], id: i64) -> InLine {
        let turn = Turn::default();
        let key = (id, self.seq.fetch_add(1, Ordering::Relaxed));
        self.names()
            .entry(name.to_vec())
            .or_default()
            .line
            .insert(key, turn.clone());
        InLine {
            waiters: self.clone(),
            name: name.to_vec(),
            key,
            turn,
            served: None,
        }
    }

    /// Whether a fair waiter of this process stands in `name`'s line.
    pub fn has_line(&self, name: &[u8]) -> bool {
        self.names().get(name).is_some_and(|slot| !slot.line.is_empty())
    }

    fn holders(&self) -> MutexGuard<'_, std::collections::HashSet<(Vec<u8>, Vec<u8>)>> {
        self.holders.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `owner` holds `name` (a line key) now, or (`held` false) no more.
    pub fn set_holder(&self, name: &[u8], owner: &str, held: bool) {
        let key = (name.to_vec(), owner.as_bytes().to_vec());
        if held {
            self.holders().insert(key);
        } else {
            self.holders().remove(&key);
        }
    }

    /// Whether `owner` holds `name` through this process, as far as it saw.
    pub fn is_holder(&self, name: &[u8], owner: &str) -> bool {
        self.holders().contains(&(name.to_vec(), owner.as_bytes().to_vec()))
    }

    /// This process released the hold `token` of `name`: wake its waiters
    /// (see [`wake`](Self::wake)) now, and not again for the server's
    /// notification of the same release (Postgres).
    pub fn released(&self, name: &[u8], token: i64) {
        self.remember(name, token);
        self.wake(name);
    }

    /// This process announced `id` (a hold's token or `seq`) of `name`
    /// and woke whom it had to: the server's notification of it (Postgres)
    /// wakes nobody again.
    pub fn remember(&self, name: &[u8], id: i64) {
        #[cfg(feature = "postgres")]
        if self.listener.get().is_some() {
            let mut recent = self.released.lock().unwrap_or_else(|e| e.into_inner());
            if recent.len() == RECENT_RELEASES {
                recent.pop_front();
            }
            recent.push_back((name.to_vec(), id));
        }
        #[cfg(not(feature = "postgres"))]
        let _ = (name, id);
    }

    /// `name` (a mutex's name or a kind's line key) was released: wake one
    /// unfair waiter and the first fair one.
    pub fn wake(&self, name: &[u8]) {
        if let Some(slot) = self.names().get(name) {
            slot.wake();
        }
    }

    /// Releases may have been missed (the listener reconnected), or a
    /// waiter ahead may have died: wake one unfair waiter and the first
    /// fair one of every name.
    pub fn wake_all(&self) {
        for slot in self.names().values() {
            slot.wake();
        }
    }

    /// How many names are waited for (tests).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.names().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn subscriptions_come_and_go() {
        let waiters = Arc::new(Waiters::default());
        let a = waiters.subscribe(b"n");
        let b = waiters.subscribe(b"n");
        assert_eq!(waiters.len(), 1);
        {
            let notified = a.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            waiters.wake(b"n");
            tokio::time::timeout(std::time::Duration::from_secs(5), notified)
                .await
                .expect("woken");
        }
        drop(a);
        assert_eq!(waiters.len(), 1, "b still waits");
        drop(b);
        assert_eq!(waiters.len(), 0, "no entry left behind");
    }

    #[tokio::test]
    async fn a_release_wakes_the_first_in_line_only() {
        let waiters = Arc::new(Waiters::default());
        let second = waiters.line_up(b"n", 7);
        let first = waiters.line_up(b"n", 3);
        waiters.wake(b"n");
        let soon = std::time::Duration::from_millis(50);
        tokio::time::timeout(soon, first.notify_arc().notified())
            .await
            .expect("the first in line is woken");
        assert!(
            tokio::time::timeout(soon, second.notify_arc().notified())
                .await
                .is_err(),
            "the second is not"
        );
        drop(first);
        tokio::time::timeout(soon, second.notify_arc().notified())
            .await
            .expect("the first leaving wakes the next");
        assert!(!second.take_moved_up(), "to try the name: the first left without it");
        drop(second);
        assert_eq!(waiters.len(), 0, "no entry left behind");
    }

    #[tokio::test]
    async fn a_served_first_moves_the_next_up_without_a_try() {
        let waiters = Arc::new(Waiters::default());
        let mut first = waiters.line_up(b"n", 3);
        let second = waiters.line_up(b"n", 7);
        let soon = std::time::Duration::from_millis(50);
        first.served(Served::Full);
        drop(first);
        tokio::time::timeout(soon, second.notify_arc().notified())
            .await
            .expect("the next is woken as it becomes first");
        assert!(second.is_first());
        assert!(second.take_moved_up(), "the name is held: nothing to try");
        assert!(!second.take_moved_up(), "the flag is read once");
        // A release after the move rings to try.
        let third = waiters.line_up(b"n", 9);
        second.turn.moved_up.store(true, Ordering::SeqCst);
        waiters.wake(b"n");
        tokio::time::timeout(soon, second.notify_arc().notified())
            .await
            .expect("the release wakes the first");
        assert!(!second.take_moved_up(), "a release clears the flag: try");
        drop((second, third));
        assert_eq!(waiters.len(), 0, "no entry left behind");
    }

    /// A grant that leaves room (a permit left, a reader in) wakes the next
    /// to try; one release wakes one waiter, not the line.
    #[tokio::test]
    async fn a_grant_with_room_wakes_the_next_to_try() {
        let waiters = Arc::new(Waiters::default());
        let mut first = waiters.line_up(b"\xFFk", 3);
        let second = waiters.line_up(b"\xFFk", 7);
        let third = waiters.line_up(b"\xFFk", 9);
        let soon = std::time::Duration::from_millis(50);
        waiters.wake(b"\xFFk");
        tokio::time::timeout(soon, first.notify_arc().notified())
            .await
            .expect("the release wakes the first");
        assert!(
            tokio::time::timeout(soon, second.notify_arc().notified())
                .await
                .is_err(),
            "and only the first"
        );
        first.served(Served::Room);
        drop(first);
        tokio::time::timeout(soon, second.notify_arc().notified())
            .await
            .expect("room: the next is woken");
        assert!(!second.take_moved_up(), "to try");
        assert!(
            tokio::time::timeout(soon, third.notify_arc().notified()).await.is_err(),
            "one at a time"
        );
        drop((second, third));
        assert_eq!(waiters.len(), 0, "no entry left behind");
    }

    #[test]
    fn backends_on_one_table_share_a_registry() {
        let a = Waiters::shared(Some("sqlite\0/tmp/x.db\0t".into()));
        let b = Waiters::shared(Some("sqlite\0/tmp/x.db\0t".into()));
        let c = Waiters::shared(Some("sqlite\0/tmp/x.db\0u".into()));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &c));
        assert!(!Arc::ptr_eq(&Waiters::shared(None), &Waiters::shared(None)));
    }
}
