//! [`LockBackend`] for `Arc<T>` and `Box<T>`: a shared or boxed backend is
//! a backend. Every method forwards, the provided ones too (a wrapper that
//! kept a default would answer `Unsupported` where the backend answers);
//! `clippy::missing_trait_methods` fails the build if a method is added to
//! the trait and not here.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::LockError;
use crate::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, HolderWatch, Lease, LockBackend, LockInfo, LockKind,
    ReleaseOutcome, TryAcquire,
};

macro_rules! forward {
    ($ptr:ident) => {
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<T: LockBackend + ?Sized> LockBackend for $ptr<T> {
            fn name(&self) -> &'static str {
                (**self).name()
            }

            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }

            async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
                (**self).try_acquire(req).await
            }

            async fn acquire(
                &self,
                req: &AcquireRequest<'_>,
                wait: Option<Duration>,
            ) -> Result<Option<Lease>, LockError> {
                (**self).acquire(req, wait).await
            }

            async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
                (**self).release(hold, attempt).await
            }

            async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
                (**self).extend(hold, ttl).await
            }

            async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
                (**self).extend_many(holds).await
            }

            async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
                (**self).inspect(name).await
            }

            async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
                (**self).holders(name, kind).await
            }

            async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
                (**self).waiting_for(name, kind).await
            }

            async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
                (**self).watch_holder(name, within).await
            }

            async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
                (**self).list(prefix, limit).await
            }

            async fn waiting(&self, name: &str) -> Result<usize, LockError> {
                (**self).waiting(name).await
            }

            async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
                (**self).force_release(name).await
            }
        }
    };
}

forward!(Arc);
forward!(Box);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::MemoryBackend;
    use crate::{LockClient, LockOptions};

    /// A client over `Arc<MemoryBackend>` (as a wrapper holds its backend)
    /// reaches the backend's own `list` and `force_release`, not the
    /// trait's `Unsupported` defaults.
    #[tokio::test]
    async fn a_shared_backend_forwards_every_method() {
        let shared: Arc<MemoryBackend> = Arc::new(MemoryBackend::new());
        let client = LockClient::new(shared.clone(), LockOptions::new()).unwrap();
        let guard = client.lock("forward/a").await.unwrap();
        let listed = client.list("forward/", 10).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].name, "forward/a");
        let removed = client.force_release("forward/a").await.unwrap();
        assert_eq!(removed.map(|i| i.token), Some(guard.fencing_token()));
        assert!(client.inspect("forward/a").await.unwrap().is_none());
        assert_eq!(shared.name(), client.backend().name());
    }
}
