//! The watchdog against a wrapped memory backend: batched renewals, and the
//! lost signal when renewals fail.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit_core::memory::MemoryBackend;
use lockkit_core::raw::{AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, TryAcquire};
use lockkit_core::{Capabilities, LockClient, LockError, LockInfo, LockOptions, LostReason, async_trait};

/// Memory, counting extension calls, with a switch that makes them fail.
#[derive(Debug, Default)]
struct Probe {
    inner: MemoryBackend,
    batches: AtomicUsize,
    singles: AtomicUsize,
    failing: AtomicBool,
}

#[async_trait]
impl LockBackend for Probe {
    fn name(&self) -> &'static str {
        "probe"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.inner.try_acquire(req).await
    }
    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        self.inner.acquire(req, wait).await
    }
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.inner.release(hold, attempt).await
    }
    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.singles.fetch_add(1, Ordering::SeqCst);
        self.inner.extend(hold, ttl).await
    }
    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        if self.failing.load(Ordering::SeqCst) {
            return holds
                .iter()
                .map(|_| Err(LockError::backend("probe", "extend", None, true, "server unreachable")))
                .collect();
        }
        self.inner.extend_many(holds).await
    }
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }
}

fn client(probe: &Arc<Probe>, ttl: Duration) -> LockClient {
    LockClient::from_arc(probe.clone(), LockOptions::new().ttl(ttl)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_holds_renew_in_batches() {
    let probe = Arc::new(Probe::default());
    let ttl = Duration::from_millis(600);
    let locks = client(&probe, ttl);
    let mut guards = Vec::new();
    for i in 0..500 {
        guards.push(locks.lock(&format!("held/{i}")).await.unwrap());
        if i % 100 == 0 {
            // Scatter the acquisition times over a renewal period.
            tokio::time::sleep(ttl / 10).await;
        }
    }
    let started = Instant::now();
    tokio::time::sleep(ttl * 5).await;
    let periods = (started.elapsed().as_secs_f64() / (ttl / 3).as_secs_f64()).ceil() as usize;
    let batches = probe.batches.load(Ordering::SeqCst);
    assert!(guards.iter().all(|g| !g.is_lost()), "every hold must stay valid");
    assert_eq!(
        probe.singles.load(Ordering::SeqCst),
        0,
        "renewals go through extend_many"
    );
    // Unbatched, 500 holds would cost 500 calls per period.
    assert!(
        batches <= 3 * periods + 5,
        "{batches} batches in {periods} periods for 500 holds"
    );
    for g in guards {
        assert!(g.unlock().await.unwrap().is_free());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_renewals_fire_lost_before_the_lease_ends() {
    let probe = Arc::new(Probe::default());
    let ttl = Duration::from_millis(900);
    let locks = client(&probe, ttl);
    let guard = locks.lock("fragile").await.unwrap();
    probe.failing.store(true, Ordering::SeqCst);
    tokio::time::timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("lost must fire");
    let fired = Instant::now();
    assert_eq!(guard.lost_reason(), Some(LostReason::Expired));
    // The server-side lease still runs at the moment the signal fired.
    let info = locks.inspect("fragile").await.unwrap();
    assert!(info.is_some(), "lost fired after the lease had already ended");
    assert!(probe.batches.load(Ordering::SeqCst) >= 2, "failed renewals are retried");
    // Another owner gets the lock only after the signal.
    let other = locks.with_new_owner();
    let g = other
        .lock_with("fragile", &other.options().wait(Duration::from_secs(15)))
        .await
        .unwrap();
    assert!(Instant::now() >= fired);
    assert!(matches!(guard.unlock().await, Err(LockError::NotHeld { .. })));
    g.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_hold_fires_not_held() {
    let probe = Arc::new(Probe::default());
    let locks = client(&probe, Duration::from_millis(600));
    let guard = locks.lock("stolen").await.unwrap();
    // An operator removes the hold behind the holder's back.
    let removed = probe.inner.force_release("stolen").await.unwrap().expect("held");
    assert_eq!(
        (removed.owner.as_str(), removed.token),
        (guard.owner(), guard.fencing_token())
    );
    tokio::time::timeout(Duration::from_secs(15), guard.lost())
        .await
        .expect("lost must fire");
    assert_eq!(guard.lost_reason(), Some(LostReason::NotHeld));
}

#[test]
fn client_and_guard_are_send_sync() {
    fn check<T: Send + Sync + Clone>() {}
    fn send<T: Send>() {}
    check::<LockClient>();
    send::<lockkit_core::LockGuard>();
}
