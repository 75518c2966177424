//! The in-memory backend (`memory://`): the full contract inside one process.
//!
//! Stores are named: every [`MemoryBackend::shared`] of one name (and every
//! `memory://NAME` URL) in a process sees the same locks; `memory://` is the
//! store named `""`. Waiting is notification-based and fair: waiters queue
//! per name, a free name goes to the first in line (unless the request is
//! unfair), and a waiter sleeps until a release of its name or the holder's
//! expiry, whichever comes first. Fencing
//! tokens come from one counter per store, so they grow per name too; they
//! are not durable (a store lives as long as a backend handle on it).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, ReleaseOutcome, TryAcquire,
};
use crate::options::ttl_millis;
use crate::{LockError, lease};

/// The in-memory lock store.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    store: Arc<Store>,
}

#[derive(Debug, Default)]
struct Store {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    locks: HashMap<String, Entry>,
    /// One slot per name somebody is waiting for.
    waiters: HashMap<String, WaitSlot>,
    last_token: u64,
    last_ticket: u64,
}

#[derive(Debug)]
struct Entry {
    owner: String,
    /// One attempt id per share of the hold: the hold count is their number.
    attempts: Vec<String>,
    token: u64,
    expires_at: Instant,
}

impl Entry {
    fn count(&self) -> u32 {
        u32::try_from(self.attempts.len()).unwrap_or(u32::MAX)
    }

    fn info(&self, name: &str, now: Instant) -> LockInfo {
        LockInfo {
            name: name.to_owned(),
            owner: self.owner.clone(),
            hold_count: self.count(),
            token: self.token,
            remaining: Some(self.expires_at - now),
        }
    }
}

/// The waiters of one name, first come first served.
#[derive(Debug)]
struct WaitSlot {
    notify: Arc<Notify>,
    queue: VecDeque<u64>,
}

static STORES: LazyLock<Mutex<HashMap<String, Weak<Store>>>> = LazyLock::new(Default::default);

impl State {
    /// The live entry of `name`; an expired one is removed on the way.
    fn live(&mut self, name: &str, now: Instant) -> Option<&mut Entry> {
        if self.locks.get(name).is_some_and(|e| e.expires_at <= now) {
            self.locks.remove(name);
        }
        self.locks.get_mut(name)
    }

    fn held_by(&mut self, hold: &Hold, now: Instant) -> Option<&mut Entry> {
        self.live(&hold.name, now)
            .filter(|e| e.owner == hold.owner && e.token == hold.token)
    }

    fn first_in_line(&self, name: &str, ticket: Option<u64>) -> bool {
        self.waiters
            .get(name)
            .is_none_or(|slot| slot.queue.front().is_none_or(|t| Some(*t) == ticket))
    }

    fn wake(&self, name: &str) {
        if let Some(slot) = self.waiters.get(name) {
            slot.notify.notify_waiters();
        }
    }
}

/// The memory backend's URL scheme: `memory://[NAME]`.
pub const SCHEMES: crate::url::BackendSchemes = crate::url::BackendSchemes {
    names: &["memory"],
    connect: |url| {
        let backend = MemoryBackend::from_url(&url.url);
        Box::pin(async move { Ok(Arc::new(backend?) as Arc<dyn crate::LockBackend>) })
    },
};

impl MemoryBackend {
    /// A private store nobody else sees.
    pub fn new() -> Self {
        MemoryBackend { store: Arc::default() }
    }

    /// The process-wide store called `name` (created on first use, dropped
    /// with its last handle).
    pub fn shared(name: &str) -> Self {
        let mut stores = STORES.lock().unwrap_or_else(|e| e.into_inner());
        stores.retain(|_, s| s.strong_count() > 0);
        let store = match stores.get(name).and_then(Weak::upgrade) {
            Some(store) => store,
            None => {
                let store = Arc::<Store>::default();
                stores.insert(name.to_owned(), Arc::downgrade(&store));
                store
            }
        };
        MemoryBackend { store }
    }

    /// The backend for a `memory://[NAME]` URL's store name.
    pub fn from_url(url: &url::Url) -> Result<Self, LockError> {
        if !url.path().is_empty() && url.path() != "/" {
            return Err(LockError::config(
                "url path",
                "memory:// takes a store name as its host (memory://NAME), not a path",
            ));
        }
        Ok(Self::shared(url.host_str().unwrap_or("")))
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.store.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One attempt. Fair, a waiter (`ticket`) may take a free name only when
    /// it is first in line, and `try_lock` (no ticket) only when nobody
    /// waits, so a releaser that locks again at once queues behind the
    /// waiters instead of starving them. Unfair, any free name is taken.
    fn attempt(&self, req: &AcquireRequest<'_>, ticket: Option<u64>) -> TryAcquire {
        let now = Instant::now();
        let ttl = Duration::from_millis(ttl_millis(req.ttl));
        let mut state = self.state();
        let my_turn = !req.fair || state.first_in_line(req.name, ticket);
        let (token, hold_count, expires_at) = match state.live(req.name, now) {
            Some(e) if e.owner == req.owner => {
                // A repeated attempt is the same share, counted once.
                if !e.attempts.iter().any(|a| a == req.attempt) {
                    e.attempts.push(req.attempt.to_owned());
                }
                e.expires_at = e.expires_at.max(now + ttl);
                (e.token, e.count(), e.expires_at)
            }
            Some(e) => {
                return TryAcquire::Busy {
                    retry_in: Some(e.expires_at - now),
                };
            }
            None if !my_turn => {
                return TryAcquire::Busy { retry_in: None };
            }
            None => {
                if let Some(slot) = state.waiters.get_mut(req.name)
                    && ticket.is_some()
                {
                    slot.queue.retain(|t| Some(*t) != ticket);
                }
                state.last_token += 1;
                let token = state.last_token;
                let entry = Entry {
                    owner: req.owner.to_owned(),
                    attempts: vec![req.attempt.to_owned()],
                    token,
                    expires_at: now + ttl,
                };
                state.locks.insert(req.name.to_owned(), entry);
                (token, 1, now + ttl)
            }
        };
        TryAcquire::Acquired(Lease {
            token,
            hold_count,
            valid_until: Some(lease::valid_until(now, expires_at - now)),
            lost: None,
            session_deadline: None,
        })
    }

    /// Queues a waiter for `name`; the slot goes when the last waiter does.
    fn enqueue(&self, name: &str) -> WaiterHandle<'_> {
        let mut state = self.state();
        state.last_ticket += 1;
        let ticket = state.last_ticket;
        let slot = state.waiters.entry(name.to_owned()).or_insert_with(|| WaitSlot {
            notify: Arc::new(Notify::new()),
            queue: VecDeque::new(),
        });
        slot.queue.push_back(ticket);
        WaiterHandle {
            backend: self,
            name: name.to_owned(),
            notify: slot.notify.clone(),
            ticket,
        }
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// A waiter's place in line; dropping it (also when the waiting future is
/// cancelled) leaves the line, and wakes the others if it was first.
struct WaiterHandle<'a> {
    backend: &'a MemoryBackend,
    name: String,
    notify: Arc<Notify>,
    ticket: u64,
}

impl Drop for WaiterHandle<'_> {
    fn drop(&mut self) {
        let mut state = self.backend.state();
        let Some(slot) = state.waiters.get_mut(&self.name) else {
            return;
        };
        let was_first = slot.queue.front() == Some(&self.ticket);
        slot.queue.retain(|t| *t != self.ticket);
        if slot.queue.is_empty() {
            state.waiters.remove(&self.name);
        } else if was_first {
            slot.notify.notify_waiters();
        }
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ttl_leases()
            .with_batch_extend()
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        Ok(self.attempt(req, None))
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let waiter = self.enqueue(req.name);
        loop {
            // Listen before trying, so a release between the attempt and the
            // sleep is not missed.
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let retry_in = match self.attempt(req, Some(waiter.ticket)) {
                TryAcquire::Acquired(lease) => return Ok(Some(lease)),
                TryAcquire::Busy { retry_in } => retry_in.unwrap_or(Duration::from_secs(1)),
            };
            let expiry = tokio::time::Instant::now() + retry_in;
            let wake_at = deadline.map_or(expiry, |d| d.min(expiry));
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake_at) => {
                    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        // One last attempt: the name may have come free at the deadline.
                        return Ok(match self.attempt(req, Some(waiter.ticket)) {
                            TryAcquire::Acquired(lease) => Some(lease),
                            TryAcquire::Busy { .. } => None,
                        });
                    }
                }
            }
        }
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        let Some(entry) = state.held_by(hold, now) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        // A share already taken back (a repeated release) changes nothing.
        entry.attempts.retain(|a| a != attempt);
        let remaining = entry.count();
        if remaining == 0 {
            state.locks.remove(&hold.name);
            state.wake(&hold.name);
        }
        Ok(ReleaseOutcome::Released { remaining })
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let now = Instant::now();
        let ttl = Duration::from_millis(ttl_millis(ttl));
        let mut state = self.state();
        Ok(match state.held_by(hold, now) {
            Some(entry) => {
                entry.expires_at = entry.expires_at.max(now + ttl);
                ExtendOutcome::Extended {
                    valid_until: Some(lease::valid_until(now, entry.expires_at - now)),
                }
            }
            None => ExtendOutcome::NotHeld,
        })
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let mut out = Vec::with_capacity(holds.len());
        for (hold, ttl) in holds {
            out.push(self.extend(hold, *ttl).await);
        }
        out
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        Ok(state.live(name, now).map(|e| e.info(name, now)))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let now = Instant::now();
        let state = self.state();
        let mut held: Vec<LockInfo> = state
            .locks
            .iter()
            .filter(|(name, e)| name.starts_with(prefix) && e.expires_at > now)
            .map(|(name, e)| e.info(name, now))
            .collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held.truncate(limit);
        Ok(held)
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        Ok(self.state().waiters.get(name).map_or(0, |slot| slot.queue.len()))
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let now = Instant::now();
        let mut state = self.state();
        let info = state.live(name, now).map(|e| e.info(name, now));
        if info.is_some() {
            state.locks.remove(name);
            state.wake(name);
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockClient, LockOptions};

    fn queued(backend: &MemoryBackend, name: &str) -> usize {
        backend.state().waiters.get(name).map_or(0, |s| s.queue.len())
    }

    /// A releaser that locks again at once queues behind the waiters.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn waiters_are_served_in_order() {
        let backend = MemoryBackend::new();
        let opts = LockOptions::new().wait(Duration::from_secs(30));
        let client = |b: &MemoryBackend| LockClient::new(b.clone(), opts.clone()).unwrap();
        let (a, b, c) = (client(&backend), client(&backend), client(&backend));
        let ga = a.lock("n").await.unwrap();
        let wb = tokio::spawn(async move { b.lock("n").await.map(|g| (g.owner().to_owned(), g)) });
        while queued(&backend, "n") < 1 {
            tokio::task::yield_now().await;
        }
        let wc = tokio::spawn(async move { c.lock("n").await.map(|g| (g.owner().to_owned(), g)) });
        while queued(&backend, "n") < 2 {
            tokio::task::yield_now().await;
        }
        let a_owner = a.owner().to_owned();
        ga.unlock().await.unwrap();
        let again = tokio::spawn(async move { a.lock("n").await.map(|g| (g.owner().to_owned(), g)) });
        let (b_owner, gb) = wb.await.unwrap().unwrap();
        assert_ne!(b_owner, a_owner);
        gb.unlock().await.unwrap();
        let (c_owner, gc) = wc.await.unwrap().unwrap();
        assert_ne!(
            c_owner, a_owner,
            "the second waiter goes before the re-locking releaser"
        );
        gc.unlock().await.unwrap();
        let (owner, ga) = again.await.unwrap().unwrap();
        assert_eq!(owner, a_owner);
        ga.unlock().await.unwrap();
        assert_eq!(queued(&backend, "n"), 0, "no queue entry left behind");
    }
}
