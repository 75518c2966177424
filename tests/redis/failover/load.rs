//! The load a failover meets: tasks of several clients (each task its own
//! owner) lock a few names in a loop, write to the fenced store under their
//! token while they hold, and record each hold as they saw it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockGuard, LockOptions, LostReason};
use tokio::sync::watch;
use tokio::task::JoinSet;

use rand::RngExt;

use super::rng::{Rng, seeded};
use super::store::FencedStore;

/// A holder writes this often while it holds.
const WRITE_EVERY: Duration = Duration::from_millis(20);

/// The shape of the load (see docs/failover.md).
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub clients: usize,
    pub tasks_per_client: usize,
    pub names: usize,
    /// The lease; the watchdog extends every third of it.
    pub ttl: Duration,
}

pub const SHAPE: Shape = Shape {
    clients: 2,
    tasks_per_client: 8,
    names: 8,
    ttl: Duration::from_secs(5),
};

/// How a hold ended, as its holder saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// unlock said released.
    Released,
    /// unlock said the owner no longer held it.
    NotHeld,
    /// The lost signal fired first.
    Lost(LostReason),
    /// unlock failed otherwise (the server was down).
    Failed,
}

/// One granted lock, by its holder's clock (one process: one clock).
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    pub id: u64,
    pub name: usize,
    pub owner: usize,
    pub token: u64,
    /// When `lock` returned it.
    pub granted: Instant,
    /// When the holder stopped acting on it: it saw the lost signal, or it
    /// called `unlock`.
    pub ended: Instant,
    pub end: End,
    /// The lease's end as the holder knew it when it stopped.
    pub valid_until: Option<Instant>,
    /// When `unlock` returned.
    pub unlocked: Instant,
    /// Failovers begun before it was granted.
    pub epoch: usize,
}

/// What the load shares: the store, the record, and counters the
/// failover driver watches.
pub struct Load {
    pub names: Vec<String>,
    pub store: FencedStore,
    pub holds: Mutex<Vec<Hold>>,
    pub grants: AtomicU64,
    pub lock_errors: AtomicU64,
    /// Errors `lock` should not have given: not retryable.
    pub lock_failures: Mutex<Vec<String>>,
    /// Failovers begun so far (the driver bumps it at each kill).
    pub epoch: AtomicUsize,
    next_hold: AtomicU64,
    stop: watch::Sender<bool>,
}

impl Load {
    pub fn new(names: Vec<String>) -> Arc<Self> {
        Arc::new(Load {
            names,
            store: FencedStore::default(),
            holds: Mutex::new(Vec::new()),
            grants: AtomicU64::new(0),
            lock_errors: AtomicU64::new(0),
            lock_failures: Mutex::new(Vec::new()),
            epoch: AtomicUsize::new(0),
            next_hold: AtomicU64::new(1),
            stop: watch::channel(false).0,
        })
    }

    /// Starts every task on clients of `url`.
    pub async fn start(self: &Arc<Self>, url: &str, shape: Shape, seed: u64) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        for c in 0..shape.clients {
            let client = lockkit::connect(url).await.expect("connect");
            for t in 0..shape.tasks_per_client {
                let owner = c * shape.tasks_per_client + t;
                let rng = seeded(seed ^ (owner as u64 + 1).wrapping_mul(0x9e37_79b9));
                tasks.spawn(self.clone().task(client.with_new_owner(), owner, shape.ttl, rng));
            }
        }
        tasks
    }

    /// Ends the load: holds end at once, waiters give up; every hold taken
    /// is in the record when the tasks are joined.
    pub async fn stop(&self, mut tasks: JoinSet<()>) {
        self.stop.send_replace(true);
        while let Some(r) = tasks.join_next().await {
            r.expect("a load task panicked");
        }
    }

    async fn task(self: Arc<Self>, client: LockClient, owner: usize, ttl: Duration, mut rng: Rng) {
        let opts = LockOptions::new().ttl(ttl).wait(Duration::from_secs(60));
        let mut stop = self.stop.subscribe();
        while !*stop.borrow() {
            let name = rng.random_range(0..self.names.len());
            let locked = tokio::select! {
                r = client.lock_with(&self.names[name], &opts) => r,
                _ = stop.wait_for(|s| *s) => return,
            };
            match locked {
                Ok(guard) => self.hold(guard, name, owner, &mut rng).await,
                Err(e) => self.lock_failed(&e).await,
            }
        }
    }

    /// A server down or a replica not acknowledging: try again shortly,
    /// as an application would. An error that says not to try again is
    /// kept for the run's verdict; the task goes on, so the run is still
    /// measured.
    async fn lock_failed(&self, e: &LockError) {
        if !e.is_retryable() {
            let mut failures = self.lock_failures.lock().unwrap_or_else(|e| e.into_inner());
            failures.push(e.to_line());
        }
        self.lock_errors.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    /// Half the holds are short (up to 20 ms: a counter update), half long
    /// (1 to 4 s: a job), so a hold often outlasts a failover.
    fn hold_length(rng: &mut Rng) -> Duration {
        if rng.random_range(0..=1) == 0 {
            Duration::from_millis(rng.random_range(0..=20))
        } else {
            Duration::from_millis(rng.random_range(1000..=4000))
        }
    }

    async fn hold(&self, guard: LockGuard, name: usize, owner: usize, rng: &mut Rng) {
        let granted = Instant::now();
        let epoch = self.epoch.load(Ordering::SeqCst);
        self.grants.fetch_add(1, Ordering::Relaxed);
        let id = self.next_hold.fetch_add(1, Ordering::Relaxed);
        let token = guard.fencing_token();
        let until = granted + Self::hold_length(rng);
        let lost = self.work(&guard, name, owner, until).await;
        let ended = Instant::now();
        let reason = guard.lost_reason().unwrap_or(LostReason::Expired);
        let valid_until = guard.valid_until();
        let unlocked = guard.unlock().await;
        let end = match (lost, unlocked) {
            (true, _) => End::Lost(reason),
            (false, Ok(_)) => End::Released,
            (false, Err(LockError::NotHeld { .. })) => End::NotHeld,
            (false, Err(_)) => End::Failed,
        };
        self.holds.lock().unwrap_or_else(|e| e.into_inner()).push(Hold {
            id,
            name,
            owner,
            token,
            granted,
            ended,
            end,
            valid_until,
            unlocked: Instant::now(),
            epoch,
        });
    }

    /// Writes every [`WRITE_EVERY`] until `until`, the stop, or the lost
    /// signal; whether the signal ended it. A write is never made once the
    /// signal has fired: work stops there, as the contract asks.
    async fn work(&self, guard: &LockGuard, name: usize, owner: usize, until: Instant) -> bool {
        let mut stop = self.stop.subscribe();
        let lost = guard.lost();
        tokio::pin!(lost);
        loop {
            if guard.is_lost() {
                return true;
            }
            self.store.write(name, owner, guard.fencing_token());
            let now = Instant::now();
            if now >= until || *stop.borrow() {
                return false;
            }
            tokio::select! {
                _ = &mut lost => return true,
                _ = stop.wait_for(|s| *s) => return false,
                _ = tokio::time::sleep(WRITE_EVERY.min(until - now)) => {}
            }
        }
    }
}
