//! A [`LockBackend`] wrapper counting the round trips a client makes.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use lockkit::raw::{AcquireRequest, ExtendOutcome, Hold, HolderWatch, Lease, LockBackend, ReleaseOutcome, TryAcquire};
use lockkit::{Capabilities, LockError, LockInfo, LockKind};

/// Counts calls into the wrapped backend. A batched `extend_many` counts as
/// one round trip per `extend_batch_max` holds when the backend declares
/// `batch_extend`, else one per hold.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn LockBackend>,
    round_trips: AtomicU64,
}

impl Counting {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn LockBackend>) -> Self {
        Counting {
            inner,
            round_trips: AtomicU64::new(0),
        }
    }

    /// Round trips so far.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn count(&self, n: u64) {
        self.round_trips.fetch_add(n, Ordering::Relaxed);
    }
}

// Every method counts: one left to the trait's default would skip the
// count or answer `Unsupported` where the backend answers.
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LockBackend for Counting {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.count(1);
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        self.count(1);
        self.inner.acquire(req, wait).await
    }
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.count(1);
        self.inner.release(hold, attempt).await
    }
    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.count(1);
        self.inner.extend(hold, ttl).await
    }
    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let caps = self.inner.capabilities();
        let n = holds.len() as u64;
        self.count(if caps.batch_extend {
            n.div_ceil(caps.extend_batch_max.max(1) as u64)
        } else {
            n
        });
        self.inner.extend_many(holds).await
    }
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.count(1);
        self.inner.inspect(name).await
    }
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.count(1);
        self.inner.list(prefix, limit).await
    }
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.count(1);
        self.inner.waiting(name).await
    }

    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        self.count(1);
        self.inner.holders(name, kind).await
    }

    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        self.count(1);
        self.inner.waiting_for(name, kind).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.count(1);
        self.inner.force_release(name).await
    }

    async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
        self.count(1);
        self.inner.watch_holder(name, within).await
    }
}
