//! The in-memory backend (`memory://`): the full contract inside one process.
//!
//! Stores are named: every [`MemoryBackend::shared`] of one name (and every
//! `memory://NAME` URL) in a process sees the same locks; `memory://` is the
//! store named `""`. Waiting is notification-based and fair: waiters queue
//! per name, a free name goes to the first in line (unless the request is
//! unfair), and a waiter sleeps until a change lets it in or the holder's
//! expiry, whichever comes first. Each waiter has its own wake-up, and a
//! change wakes only the waiters it admits ([`crate::raw::admitted`]): a release
//! costs one wake-up with 2 waiters or 2,000. Fencing
//! tokens come from one counter per store, so they grow per name too; they
//! are not durable (a store lives as long as a backend handle on it).

mod state;

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio::sync::Notify;

use crate::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, HolderWatch, Lease, LockBackend, LockInfo, LockKind,
    ReleaseOutcome, TryAcquire,
};
use crate::options::ttl_millis;
use crate::{LockError, lease};
use state::{Granted, Key, State, key};

/// The backend's name in errors, traces and metrics.
const KIND: &str = "memory";

/// The in-memory lock store.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    store: Arc<Store>,
}

#[derive(Debug, Default)]
struct Store {
    state: Mutex<State>,
    /// Notified when a name's holder may have changed (a grant, a release,
    /// a forced release): what [`LockBackend::watch_holder`] waits for.
    changes: Arc<Notify>,
}

static STORES: LazyLock<Mutex<HashMap<String, Weak<Store>>>> = LazyLock::new(Default::default);

/// The memory backend's URL scheme: `memory://[NAME]`.
pub const SCHEMES: crate::url::BackendSchemes = crate::url::BackendSchemes {
    names: &["memory"],
    connect: |url| {
        let backend = MemoryBackend::from_url(&url.url);
        Box::pin(async move { Ok(Arc::new(backend?) as Arc<dyn crate::backend::LockBackend>) })
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

    /// One attempt (see `state`). Fair, a waiter (`ticket`) may take a free
    /// name only when it is first in line, and `try_lock` (no ticket) only
    /// when nobody waits, so a releaser that locks again at once queues
    /// behind the waiters instead of starving them. Unfair, any free name is
    /// taken. A reader never passes a waiting writer.
    fn attempt(&self, req: &AcquireRequest<'_>, ticket: Option<u64>) -> Result<TryAcquire, LockError> {
        let now = Instant::now();
        let ttl = Duration::from_millis(ttl_millis(req.ttl));
        Ok(match self.state().attempt(req, ticket, ttl, KIND)? {
            Granted::Held {
                token,
                count,
                expires_at,
            } => {
                self.store.changes.notify_waiters();
                TryAcquire::Acquired(Lease::ttl(token, count, now, expires_at.saturating_duration_since(now)))
            }
            Granted::Busy(until) => TryAcquire::Busy {
                retry_in: until.map(|u| u.saturating_duration_since(now)),
            },
        })
    }

    /// Queues a waiter for `req`'s name; the slot goes when the last waiter
    /// does.
    fn enqueue(&self, req: &AcquireRequest<'_>) -> Result<WaiterHandle<'_>, LockError> {
        let (ticket, notify) = self.state().enqueue(req, KIND)?;
        Ok(WaiterHandle {
            backend: self,
            key: key(req.name),
            notify,
            ticket,
        })
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        Self::new()
    }
}

/// A waiter's place in line; dropping it (also when the waiting future is
/// cancelled) leaves the line, and wakes the waiters it was in the way of.
struct WaiterHandle<'a> {
    backend: &'a MemoryBackend,
    key: Key,
    notify: Arc<Notify>,
    ticket: u64,
}

impl Drop for WaiterHandle<'_> {
    fn drop(&mut self) {
        self.backend.state().leave(&self.key, self.ticket);
    }
}

#[async_trait]
impl LockBackend for MemoryBackend {
    fn name(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::ttl_leases()
            .with_shared_holds()
            .with_batch_extend()
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
            .with_semaphores()
            .with_rw_locks()
            .with_pushed_changes()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.attempt(req, None)
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let waiter = self.enqueue(req)?;
        loop {
            // Listen before trying, so a release between the attempt and the
            // sleep is not missed.
            let notified = waiter.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let retry_in = match self.attempt(req, Some(waiter.ticket))? {
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
                        return Ok(match self.attempt(req, Some(waiter.ticket))? {
                            TryAcquire::Acquired(lease) => Some(lease),
                            TryAcquire::Busy { .. } => None,
                        });
                    }
                }
            }
        }
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let released = self.state().release(hold, attempt, Instant::now());
        if released == Some(0) {
            self.store.changes.notify_waiters();
        }
        Ok(match released {
            Some(remaining) => ReleaseOutcome::Released { remaining },
            None => ReleaseOutcome::NotHeld,
        })
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let now = Instant::now();
        let ttl = Duration::from_millis(ttl_millis(ttl));
        let mut state = self.state();
        let extended = state.held_by(hold, now).map(|entry| {
            entry.expires_at = entry.expires_at.max(now + ttl);
            entry.expires_at - now
        });
        state.tidy(&key(&hold.name));
        Ok(match extended {
            Some(left) => ExtendOutcome::Extended {
                valid_until: Some(lease::valid_until(now, left)),
            },
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
        let key = key(name);
        let mut state = self.state();
        let first = state.live(&key, now).first().map(|e| e.info(name, now));
        state.tidy(&key);
        Ok(first)
    }

    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        Ok(self.state().holders(name, kind, Instant::now()))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let now = Instant::now();
        let state = self.state();
        let mut held: Vec<LockInfo> = state
            .names
            .iter()
            .filter(|(name, _)| name.starts_with(prefix))
            .filter_map(|(name, holds)| holds.iter().find(|e| e.expires_at > now).map(|e| e.info(name, now)))
            .collect();
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held.truncate(limit);
        Ok(held)
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.waiting_for(name, LockKind::Mutex).await
    }

    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let line = |slot: &state::WaitSlot| slot.queue.iter().filter(|w| w.kind.same_lock(kind)).count();
        Ok(self.state().waiters.get(&key(name)).map_or(0, line))
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let now = Instant::now();
        let key = key(name);
        let mut state = self.state();
        let holds = state.live(&key, now);
        let mutex = holds.iter().position(|e| e.kind == LockKind::Mutex);
        let info = mutex.map(|i| holds.remove(i).info(name, now));
        state.admit(&key);
        state.tidy(&key);
        self.store.changes.notify_waiters();
        Ok(info)
    }

    async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
        let mut changed = Box::pin(self.store.changes.clone().notified_owned());
        changed.as_mut().enable();
        // The holder's lease running out is a change too.
        let holder = self.state().holders(name, LockKind::Mutex, Instant::now());
        let left = holder.first().and_then(|h| h.remaining);
        let until = left.map_or(within, |left| within.min(left + Duration::from_millis(1)));
        Ok(Box::pin(async move {
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep(until) => {}
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockClient, LockOptions};

    fn queued(backend: &MemoryBackend, name: &str) -> usize {
        let key = key(name);
        backend.state().waiters.get(&key).map_or(0, |s| s.queue.len())
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

    /// A crowd of `n` waiters asking for `kind(i)` behind a gate hold of
    /// `gate` (every permit of a semaphore), each taking its hold once:
    /// the attempts the crowd cost after the gate opened.
    async fn crowd_attempts(n: usize, gate: LockKind, kind: impl Fn(usize) -> LockKind) -> u64 {
        let backend = MemoryBackend::new();
        let client = LockClient::new(backend.clone(), LockOptions::new().wait(Duration::from_secs(30))).unwrap();
        let take = |c: &LockClient, kind: LockKind| {
            let c = c.clone();
            async move {
                match kind {
                    LockKind::Mutex => c.lock("n").await,
                    LockKind::Permit { permits } => c.semaphore("n", permits).unwrap().acquire().await,
                    LockKind::Read => c.rw_lock("n").unwrap().read().await,
                    _ => c.rw_lock("n").unwrap().write().await,
                }
                .unwrap()
            }
        };
        let gates = match gate {
            LockKind::Permit { permits } => permits as usize,
            _ => 1,
        };
        let mut held = Vec::new();
        for _ in 0..gates {
            held.push(take(&client.with_new_owner(), gate).await);
        }
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let (c, kind) = (client.with_new_owner(), kind(i));
                tokio::spawn(async move {
                    let g = take(&c, kind).await;
                    tokio::task::yield_now().await;
                    g.unlock().await.unwrap();
                })
            })
            .collect();
        let waiting = |b: &MemoryBackend| b.state().waiters.values().map(|s| s.queue.len()).sum::<usize>();
        while waiting(&backend) < n {
            tokio::task::yield_now().await;
        }
        let before = backend.state().attempts;
        for g in held {
            g.unlock().await.unwrap();
        }
        for t in tasks {
            t.await.unwrap();
        }
        backend.state().attempts - before
    }

    /// Contract point 14: a release wakes only the waiters it admits, so a
    /// crowd costs each waiter a few attempts, not one per release.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_crowd_costs_each_waiter_a_few_attempts() {
        let n = 100;
        let p3 = LockKind::Permit { permits: 3 };
        let rw = |i: usize| if i % 10 == 9 { LockKind::Write } else { LockKind::Read };
        let mixed = |i: usize| [LockKind::Mutex, p3, LockKind::Read, LockKind::Write][i % 4];
        for (what, attempts) in [
            ("mutex", crowd_attempts(n, LockKind::Mutex, |_| LockKind::Mutex).await),
            ("semaphore", crowd_attempts(n, p3, |_| p3).await),
            ("read-write lock", crowd_attempts(n, LockKind::Write, rw).await),
            (
                "every kind on one name",
                crowd_attempts(n, LockKind::Mutex, mixed).await,
            ),
        ] {
            eprintln!("{what}: {n} waiters, {attempts} attempts after the gate opened");
            assert!(
                attempts <= 3 * n as u64,
                "{what}: {attempts} attempts for {n} waiters: a release woke waiters it did not admit"
            );
        }
    }
}
