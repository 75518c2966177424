//! [`Lines`]: in-process lines of waiters, one per name, so that a
//! backend can stand in its server's queue once per name however many of
//! its tasks wait for it.
//!
//! A waiting task joins the line of its name and gets a [`Place`]; the
//! first to join a line with nobody leading it is told to lead: to start
//! the one server-side waiter of that name (a task of the backend's own),
//! which hands what the server gives to the places, first come first
//! served ([`Lines::hand`]) or to every place that matches
//! ([`Lines::hand_where`]), and stops leading when the line is empty
//! ([`Lines::finish_lead`]).
//!
//! Cancellation: a dropped [`Place`] leaves its line at once, and the
//! line's [`changed`](Lines::changed) signal fires (so the leader can end a
//! server-side wait nobody needs any more). A value handed to a place
//! whose task dropped it before reading it is never lost: it goes to the
//! `on_unread` handler given to [`Lines::new`], which may hand it to the
//! next place (a grant passes on) or give it back to the server.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

/// Handles a value whose place was dropped before reading it: the line's
/// name and the value.
type OnUnread<V> = dyn Fn(&str, V) + Send + Sync;

/// The lines of waiters of one backend, by name. `M` is what the backend
/// keeps about each waiter (its owner, its deadline), `V` what it hands
/// them. Cheap to clone (clones share the lines).
pub struct Lines<M, V> {
    shared: Arc<Shared<M, V>>,
}

impl<M, V> Clone for Lines<M, V> {
    fn clone(&self) -> Self {
        Lines {
            shared: self.shared.clone(),
        }
    }
}

impl<M, V> std::fmt::Debug for Lines<M, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines")
            .field("names", &self.shared.lines().len())
            .finish()
    }
}

struct Shared<M, V> {
    lines: Mutex<HashMap<String, Line<M, V>>>,
    /// The number of the next place to join any line: places keep theirs
    /// when they rejoin, so numbers are never reused.
    next: AtomicU64,
    on_unread: Box<OnUnread<V>>,
}

impl<M, V> Shared<M, V> {
    fn lines(&self) -> MutexGuard<'_, HashMap<String, Line<M, V>>> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// One name's line: the places by the order they first joined, whether a
/// leader runs, and the signal of every change.
struct Line<M, V> {
    places: BTreeMap<u64, Slot<M, V>>,
    led: bool,
    changed: Arc<Notify>,
}

struct Slot<M, V> {
    meta: M,
    tx: oneshot::Sender<V>,
}

/// What [`Lines::join`] gives: the place, and whether the caller must start
/// the line's leader (nobody leads it yet).
#[derive(Debug)]
pub struct Joined<M, V> {
    /// The waiter's place in line.
    pub place: Place<M, V>,
    /// The caller must start the leader, which ends with
    /// [`Lines::finish_lead`] returning `true`.
    pub lead: bool,
}

/// A waiter's place in a line. Dropping it leaves the line; a value handed
/// to it and not read goes to the lines' `on_unread` handler.
pub struct Place<M, V> {
    lines: Lines<M, V>,
    name: String,
    seq: u64,
    rx: Option<oneshot::Receiver<V>>,
    meta: Option<M>,
}

impl<M, V> std::fmt::Debug for Place<M, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Place")
            .field("name", &self.name)
            .field("seq", &self.seq)
            .field("in_line", &self.rx.is_some())
            .finish()
    }
}

impl<M: Clone + Send + 'static, V: Send + 'static> Lines<M, V> {
    /// Empty lines; `on_unread` gets every value handed to a place that was
    /// dropped before reading it (called outside the lines' lock, so it may
    /// hand the value on).
    pub fn new(on_unread: impl Fn(&str, V) + Send + Sync + 'static) -> Self {
        Lines {
            shared: Arc::new(Shared {
                lines: Mutex::new(HashMap::new()),
                next: AtomicU64::new(1),
                on_unread: Box::new(on_unread),
            }),
        }
    }

    /// Joins the end of `name`'s line.
    pub fn join(&self, name: &str, meta: M) -> Joined<M, V> {
        let mut place = Place {
            lines: self.clone(),
            name: name.to_owned(),
            seq: 0,
            rx: None,
            meta: Some(meta),
        };
        let lead = place.enter(None);
        Joined { place, lead }
    }

    /// Hands `value` to the first place of `name`'s line (which leaves the
    /// line); `Err(value)` when the line is empty.
    pub fn hand(&self, name: &str, value: V) -> Result<(), V> {
        let mut lines = self.shared.lines();
        let Some(line) = lines.get_mut(name) else {
            return Err(value);
        };
        let Some((_, slot)) = line.places.pop_first() else {
            return Err(value);
        };
        line.changed.notify_waiters();
        // A place's receiver lives until it has left the line (under this
        // lock), so the send cannot fail; if it did, the value goes on.
        match slot.tx.send(value) {
            Ok(()) => Ok(()),
            Err(value) => {
                drop(lines);
                self.hand(name, value)
            }
        }
    }

    /// Hands a value made by `make` to every place of `name`'s line whose
    /// metadata matches `which` (they leave the line); how many.
    pub fn hand_where(&self, name: &str, which: impl Fn(&M) -> bool, make: impl Fn(&M) -> V) -> usize {
        let mut lines = self.shared.lines();
        let Some(line) = lines.get_mut(name) else {
            return 0;
        };
        let chosen: Vec<u64> = line
            .places
            .iter()
            .filter(|(_, slot)| which(&slot.meta))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in &chosen {
            if let Some(slot) = line.places.remove(seq) {
                let _ = slot.tx.send(make(&slot.meta));
            }
        }
        if !chosen.is_empty() {
            line.changed.notify_waiters();
        }
        chosen.len()
    }

    /// Reads the metadata of `name`'s places, in line order.
    pub fn peek<R>(&self, name: &str, look: impl FnOnce(&mut dyn Iterator<Item = &M>) -> R) -> R {
        let lines = self.shared.lines();
        let mut metas = lines
            .get(name)
            .into_iter()
            .flat_map(|l| l.places.values().map(|s| &s.meta));
        look(&mut metas)
    }

    /// How many places `name`'s line has.
    pub fn len(&self, name: &str) -> usize {
        self.shared.lines().get(name).map_or(0, |l| l.places.len())
    }

    /// Whether `name`'s line has no places.
    pub fn is_empty(&self, name: &str) -> bool {
        self.len(name) == 0
    }

    /// The signal that `name`'s line changed (a place joined or left);
    /// `None` when it has no line. Enable a `notified()` before looking at
    /// the line, so no change is missed.
    pub fn changed(&self, name: &str) -> Option<Arc<Notify>> {
        self.shared.lines().get(name).map(|l| l.changed.clone())
    }

    /// The leader of `name`'s line asks to stop: `true` (and the line is
    /// gone) when it has no places, so the next to join leads; `false` when
    /// places wait, and the leader goes on.
    pub fn finish_lead(&self, name: &str) -> bool {
        let mut lines = self.shared.lines();
        match lines.get(name) {
            Some(line) if !line.places.is_empty() => false,
            _ => {
                lines.remove(name);
                true
            }
        }
    }
}

impl<M: Clone + Send + 'static, V: Send + 'static> Place<M, V> {
    /// Waits for a value; the place is then out of line. Cancel safe: a
    /// value that arrives after the caller stopped waiting is read by the
    /// next call, or, if the place is dropped, goes to `on_unread`. `None`
    /// when the place is not in line (its value was read, and it did not
    /// [`rejoin`](Self::rejoin)).
    pub async fn recv(&mut self) -> Option<V> {
        let rx = self.rx.as_mut()?;
        // A place's sender is dropped only by sending (only the place
        // removes its own slot otherwise), so this is a value.
        let value = rx.await.ok();
        self.rx = None;
        value
    }

    /// Goes back into the line, where it first joined (before everybody
    /// who joined after it); `true` when the caller must start the leader.
    /// A place still in line stays where it is.
    pub fn rejoin(&mut self) -> bool {
        if self.rx.is_some() {
            return false;
        }
        self.enter(Some(self.seq))
    }

    /// The line's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn enter(&mut self, seq: Option<u64>) -> bool {
        let meta = self.meta.clone().expect("metadata kept");
        let (tx, rx) = oneshot::channel();
        let mut lines = self.lines.shared.lines();
        let line = lines.entry(self.name.clone()).or_insert_with(|| Line {
            places: BTreeMap::new(),
            led: false,
            changed: Arc::new(Notify::new()),
        });
        let seq = seq.unwrap_or_else(|| self.lines.shared.next.fetch_add(1, Ordering::Relaxed));
        line.places.insert(seq, Slot { meta, tx });
        line.changed.notify_waiters();
        self.seq = seq;
        self.rx = Some(rx);
        let lead = !line.led;
        line.led = true;
        lead
    }
}

impl<M, V> Drop for Place<M, V> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else {
            return;
        };
        {
            let mut lines = self.lines.shared.lines();
            if let Some(line) = lines.get_mut(&self.name)
                && line.places.remove(&self.seq).is_some()
            {
                line.changed.notify_waiters();
            }
        }
        // Anything handed to this place was sent under the lock taken
        // above: it is in the channel now, or never will be.
        rx.close();
        if let Ok(value) = rx.try_recv() {
            (self.lines.shared.on_unread)(&self.name, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::time::Duration;

    fn lines() -> (Lines<&'static str, u32>, Arc<Mutex<Vec<u32>>>) {
        let unread = Arc::new(Mutex::new(Vec::new()));
        let seen = unread.clone();
        (Lines::new(move |_, v| seen.lock().unwrap().push(v)), unread)
    }

    #[tokio::test]
    async fn first_come_first_served_and_one_leader() {
        let (lines, _) = lines();
        let a = lines.join("n", "a");
        let b = lines.join("n", "b");
        assert!(a.lead, "the first leads");
        assert!(!b.lead, "one leader per line");
        let (mut a, mut b) = (a.place, b.place);
        lines.hand("n", 1).unwrap();
        lines.hand("n", 2).unwrap();
        assert_eq!(a.recv().await, Some(1));
        assert_eq!(b.recv().await, Some(2));
        assert_eq!(lines.hand("n", 3), Err(3), "nobody left");
        assert!(lines.finish_lead("n"));
        assert!(lines.join("n", "c").lead, "a new leader once the old one finished");
    }

    #[tokio::test]
    async fn a_dropped_place_leaves_and_its_unread_value_is_not_lost() {
        let (lines, unread) = lines();
        let a = lines.join("n", "a").place;
        let mut b = lines.join("n", "b").place;
        let changed = lines.changed("n").unwrap();
        let notified = changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        drop(a);
        tokio::time::timeout(Duration::from_secs(5), notified).await.unwrap();
        assert_eq!(lines.len("n"), 1);
        lines.hand("n", 7).unwrap();
        assert_eq!(b.recv().await, Some(7), "the dropped place was skipped");
        let c = lines.join("n", "c").place;
        lines.hand("n", 8).unwrap();
        drop(c);
        assert_eq!(*unread.lock().unwrap(), [8], "handed, unread, then dropped");
        assert!(lines.finish_lead("n"), "empty: the leader may stop");
    }

    #[tokio::test]
    async fn hand_where_and_rejoin_in_the_old_place() {
        let (lines, _) = lines();
        let mut a = lines.join("n", "x").place;
        let _b = lines.join("n", "y").place;
        let c = lines.join("n", "x").place;
        assert_eq!(lines.hand_where("n", |m| *m == "x", |_| 5), 2);
        assert_eq!(a.recv().await, Some(5));
        drop(c);
        assert!(!a.rejoin(), "the line is still led");
        let order = lines.peek("n", |m| m.copied().collect::<Vec<_>>());
        assert_eq!(order, ["x", "y"], "back before the later ones");
        let count = AtomicUsize::new(0);
        lines.peek("n", |m| count.store(m.count(), Ordering::Relaxed));
        assert_eq!(count.load(Ordering::Relaxed), 2);
    }

    /// Cancelling `recv` (a timeout) keeps the place; a value sent later is
    /// read by the next call.
    #[tokio::test]
    async fn recv_is_cancel_safe() {
        let (lines, _) = lines();
        let mut a = lines.join("n", "a").place;
        assert!(tokio::time::timeout(Duration::from_millis(5), a.recv()).await.is_err());
        assert_eq!(lines.len("n"), 1, "still in line");
        lines.hand("n", 4).unwrap();
        assert_eq!(a.recv().await, Some(4));
    }
}
