//! The Redlock backend's [`LockBackend`] impl: each method delegates to
//! `acquire`, `release`, `extend`, `inspect` or `kinds`.

use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::raw::{AcquireRequest, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome, TryAcquire};
use lockkit_core::{Capabilities, LockError, LockInfo, LockKind};

use super::nodes::{KIND, RedlockBackend};

#[async_trait]
impl LockBackend for RedlockBackend {
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
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.try_acquire_once(req).await
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        self.acquire_waiting(req, wait).await
    }

    /// Takes `attempt`'s share back on every node. The holds left are the
    /// quorum's: the largest count a quorum of nodes still has (nodes that
    /// did not answer count as having none), so a name that fewer than a
    /// quorum still hold reads as free — and any other guard of this client
    /// on the hold turns lost. Nodes that did not answer get the release
    /// again in the background (it is idempotent by `attempt`).
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.release_share(hold, attempt).await
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let mut results = self.extend_many(&[(hold.clone(), ttl)]).await;
        results.pop().unwrap_or(Ok(ExtendOutcome::NotHeld))
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        self.extend_holds(holds).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inspect_name(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.list_held(prefix, limit).await
    }

    /// The clients a quorum of nodes has queued for `name` (the quorum-th
    /// largest queue).
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        self.queued(name, LockKind::Mutex).await
    }

    /// As [`waiting`](Self::waiting), for `kind`'s line of `name`.
    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        self.queued(name, kind).await
    }

    /// The holds a quorum of nodes agrees on (see `kinds`).
    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        self.holders_of(name, kind).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.force_release_name(name).await
    }
}
