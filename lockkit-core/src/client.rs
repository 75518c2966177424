//! [`LockClient`]: what applications hold.

use std::fmt;
use std::sync::Arc;

use crate::acquire::Shared;
use crate::backend::{Capabilities, LockBackend, LockInfo, LockKind};
use crate::name::{random_owner, validate_name, validate_owner};
use crate::watchdog::Watchdog;
use crate::{LockError, LockGuard, LockOptions};

/// A handle on one lock backend, with an owner id and default options.
///
/// Cheap to clone; clones share the backend's connections, the watchdog and
/// the owner id. **Clones share the owner**, so two tasks locking the same
/// name through clones re-enter one hold rather than exclude each other —
/// give each independent worker its own owner with
/// [`with_new_owner`](Self::with_new_owner) (same connections, new owner).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockkit_core::LockError> {
/// use lockkit_core::memory::MemoryBackend;
/// use lockkit_core::{LockClient, LockOptions};
///
/// let locks = LockClient::new(MemoryBackend::shared("doc"), LockOptions::new())?;
/// let guard = locks.lock("order:42").await?;
/// assert!(locks.with_new_owner().try_lock("order:42").await?.is_none());
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct LockClient {
    shared: Arc<Shared>,
    owner: Arc<str>,
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("backend", &self.shared.backend)
            .field("owner", &self.owner)
            .field("defaults", &self.shared.defaults)
            .finish()
    }
}

impl LockClient {
    /// A client for `backend`. `defaults` apply to [`lock`](Self::lock) and
    /// [`try_lock`](Self::try_lock); its owner, if set, becomes the client's
    /// owner id, otherwise a random 128-bit id is made.
    pub fn new(backend: impl LockBackend, defaults: LockOptions) -> Result<Self, LockError> {
        Self::from_arc(Arc::new(backend), defaults)
    }

    /// Like [`new`](Self::new), for a backend already behind an `Arc`.
    pub fn from_arc(backend: Arc<dyn LockBackend>, defaults: LockOptions) -> Result<Self, LockError> {
        defaults.validate()?;
        let owner: Arc<str> = defaults.owner_value().map_or_else(random_owner, str::to_owned).into();
        Ok(LockClient {
            shared: Arc::new(Shared {
                watchdog: Watchdog::new(backend.clone()),
                backend,
                defaults,
            }),
            owner,
        })
    }

    /// This client's owner id.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// A client sharing this one's backend and watchdog, with another owner id
    /// (e.g. `"trade-center-1"`, shared by processes that should share holds).
    pub fn with_owner(&self, owner: impl Into<String>) -> Result<Self, LockError> {
        let owner = owner.into();
        validate_owner(&owner)?;
        Ok(LockClient {
            shared: self.shared.clone(),
            owner: owner.into(),
        })
    }

    /// A client sharing this one's backend and watchdog, with a new random
    /// owner id: an independent contender for every lock.
    pub fn with_new_owner(&self) -> Self {
        LockClient {
            shared: self.shared.clone(),
            owner: random_owner().into(),
        }
    }

    /// The default options, to adjust for one call of
    /// [`lock_with`](Self::lock_with).
    pub fn options(&self) -> LockOptions {
        self.shared.defaults.clone()
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.shared.backend
    }

    /// What the backend supports.
    pub fn capabilities(&self) -> Capabilities {
        self.shared.backend.capabilities()
    }

    #[cfg(test)]
    pub(crate) fn watchdog(&self) -> &Watchdog {
        &self.shared.watchdog
    }

    /// Acquires `name` with the default options, waiting up to the default
    /// wait bound ([`DEFAULT_WAIT`](crate::DEFAULT_WAIT) unless configured).
    ///
    /// Cancel safe: dropping the future at any point leaves no hold and no
    /// queue entry behind.
    pub async fn lock(&self, name: &str) -> Result<LockGuard, LockError> {
        self.lock_with(name, &self.shared.defaults).await
    }

    /// Acquires `name` with `options` (start from [`options`](Self::options)).
    /// Fails with [`LockError::WaitTimeout`] when the wait bound runs out.
    ///
    /// A call that fails with a retryable error (a reply lost to a timeout
    /// or a broken connection) may have been granted on the server all the
    /// same; the client then takes that share back in the background (by
    /// the call's attempt id), so no hold is left behind for the owner's
    /// next acquisition to re-enter.
    pub async fn lock_with(&self, name: &str, options: &LockOptions) -> Result<LockGuard, LockError> {
        self.acquire_waiting(name, LockKind::Mutex, options).await
    }

    /// Acquires a hold of `kind` on `name`, waiting as `options` say; a
    /// wait that runs out is a [`LockError::WaitTimeout`].
    pub(crate) async fn acquire_waiting(
        &self,
        name: &str,
        kind: LockKind,
        options: &LockOptions,
    ) -> Result<LockGuard, LockError> {
        let backend = self.shared.backend.name();
        match self.acquire(name, kind, options, false).await? {
            Some(guard) => Ok(guard),
            None => Err(LockError::WaitTimeout {
                backend,
                name: name.to_owned(),
                waited: options.wait_value().unwrap_or_default(),
            }),
        }
    }

    /// Acquires `name` if no other owner holds it; never waits for one.
    /// `Ok(None)` when the name is held by another owner.
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard>, LockError> {
        self.acquire(name, LockKind::Mutex, &self.shared.defaults, true).await
    }

    /// [`try_lock`](Self::try_lock) with `options` (the wait is ignored).
    pub async fn try_lock_with(&self, name: &str, options: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.acquire(name, LockKind::Mutex, options, true).await
    }

    /// Who holds `name`, if anybody, whatever the kind: the mutex's holder,
    /// or the first hold of the semaphore or read-write lock of that name
    /// ([`LockInfo::kind`] says which).
    pub async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        validate_name(name)?;
        self.shared.backend.inspect(name).await
    }

    /// How many acquisitions wait for `name` behind its holder.
    /// [`LockError::Unsupported`] where the backend keeps no queue
    /// ([`Capabilities::fair`]). Redis and Redlock count waiting clients: a
    /// client's several calls for one name stand in the server's queue once
    /// and take their turns one after another.
    pub async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        validate_name(name)?;
        self.shared.backend.waiting(name).await
    }

    /// Held names starting with `prefix`, in name order, at most `limit`
    /// (operator tooling). [`LockError::Unsupported`] where the backend cannot
    /// enumerate ([`Capabilities::admin`]).
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.shared.backend.list(prefix, limit).await
    }

    /// Removes the hold on `name` whoever holds it: the operator's override
    /// for a stuck lock. Returns what was removed (`None`: it was free). The
    /// holder's lost signal fires at its next extension — its work is no
    /// longer protected from that moment, so use this only on a holder known
    /// to be dead or stuck.
    pub async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        validate_name(name)?;
        let removed = self.shared.backend.force_release(name).await?;
        if let Some(info) = &removed {
            tracing::warn!(backend = self.shared.backend.name(), lock = %name, owner = %info.owner, token = info.token, "force-released");
        }
        Ok(removed)
    }

    /// One `lock`/`try_lock` (`no_wait`) of any kind.
    pub(crate) async fn acquire(
        &self,
        name: &str,
        kind: LockKind,
        options: &LockOptions,
        no_wait: bool,
    ) -> Result<Option<LockGuard>, LockError> {
        let granted = self.shared.acquire(&self.owner, name, kind, options, no_wait).await?;
        Ok(granted.map(|g| LockGuard::new(self.shared.clone(), g)))
    }
}
