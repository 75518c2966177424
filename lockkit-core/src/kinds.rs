//! More than a mutex: [`Semaphore`] and [`RwLock`], handles on a name of
//! those kinds. Their guards are [`LockGuard`]s: the same lease, watchdog,
//! lost signal, fencing token and release as a lock's.

use crate::backend::{LockInfo, LockKind};
use crate::name::validate_name;
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A semaphore of `permits` on one name: at most that many permits are held
/// at once, across every process. Made by [`LockClient::semaphore`].
///
/// Each [`acquire`](Self::acquire) takes one permit: a hold of its own, with
/// a fencing token of its own (the same owner asking again takes another
/// permit). A holder that crashes gives its permit back when its lease
/// ends (its session, on ZooKeeper) — permits never leak. Waiters are
/// served in order. The permit count is part of the name's state: while
/// the semaphore is in use, a handle with another count gets
/// [`LockError::Conflict`], never more permits.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockkit_core::LockError> {
/// use lockkit_core::memory::MemoryBackend;
/// use lockkit_core::{LockClient, LockOptions};
///
/// let locks = LockClient::new(MemoryBackend::new(), LockOptions::new())?;
/// let slots = locks.semaphore("render-farm", 2)?;
/// let a = slots.acquire().await?;
/// let b = slots.acquire().await?;
/// assert!(slots.try_acquire().await?.is_none(), "both permits are out");
/// assert_ne!(a.fencing_token(), b.fencing_token());
/// a.unlock().await?;
/// assert!(slots.try_acquire().await?.is_some());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    client: LockClient,
    name: String,
    permits: u32,
}

impl Semaphore {
    pub(crate) fn new(client: LockClient, name: &str, permits: u32) -> Result<Self, LockError> {
        validate_name(name)?;
        if !(1..=MAX_PERMITS).contains(&permits) {
            return Err(LockError::config(
                "permits",
                format!("{permits} permits: a semaphore has 1 to {MAX_PERMITS}"),
            ));
        }
        Ok(Semaphore {
            client,
            name: name.to_owned(),
            permits,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn kind(&self) -> LockKind {
        LockKind::Permit { permits: self.permits }
    }

    /// Takes a permit, waiting up to the client's default wait bound.
    pub async fn acquire(&self) -> Result<LockGuard, LockError> {
        self.acquire_with(&self.client.options()).await
    }

    /// Takes a permit with `options` (start from
    /// [`LockClient::options`]); [`LockError::WaitTimeout`] when the wait
    /// runs out.
    pub async fn acquire_with(&self, options: &LockOptions) -> Result<LockGuard, LockError> {
        self.client.acquire_waiting(&self.name, self.kind(), options).await
    }

    /// Takes a permit if one is free and nobody waits; never waits.
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>, LockError> {
        self.try_acquire_with(&self.client.options()).await
    }

    /// [`try_acquire`](Self::try_acquire) with `options` (the wait is
    /// ignored).
    pub async fn try_acquire_with(&self, options: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.client.acquire(&self.name, self.kind(), options, true).await
    }

    /// How many acquisitions wait for a permit.
    pub async fn waiting(&self) -> Result<usize, LockError> {
        self.client.backend().waiting_for(&self.name, self.kind()).await
    }

    /// The permits held now, in the order they were granted.
    pub async fn holders(&self) -> Result<Vec<LockInfo>, LockError> {
        self.client.backend().holders(&self.name, self.kind()).await
    }
}

/// A read-write lock on one name. Made by [`LockClient::rw_lock`].
///
/// Readers share it; a writer holds it alone. Both are re-entrant by
/// owner, and an owner that holds the write lock may read too — so it can
/// [`downgrade`](LockGuard::downgrade). A read hold cannot be upgraded
/// ([`LockError::Conflict`]). A writer that waits keeps new readers out,
/// so a stream of readers cannot starve it. Writers get fencing tokens that
/// order them after every earlier writer; a reader's token is that of the
/// last writer.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockkit_core::LockError> {
/// use lockkit_core::memory::MemoryBackend;
/// use lockkit_core::{LockClient, LockOptions};
///
/// let locks = LockClient::new(MemoryBackend::new(), LockOptions::new())?;
/// let config = locks.rw_lock("config")?;
/// let other = locks.with_new_owner().rw_lock("config")?;
/// let write = config.write().await?;
/// assert!(other.try_read().await?.is_none(), "no reader beside a writer");
/// let read = write.downgrade().await?;
/// let shared = other.try_read().await?.expect("readers share");
/// assert_eq!(read.fencing_token(), shared.fencing_token());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLock {
    client: LockClient,
    name: String,
}

impl RwLock {
    pub(crate) fn new(client: LockClient, name: &str) -> Result<Self, LockError> {
        validate_name(name)?;
        Ok(RwLock {
            client,
            name: name.to_owned(),
        })
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Takes a read hold, waiting up to the client's default wait bound.
    pub async fn read(&self) -> Result<LockGuard, LockError> {
        self.read_with(&self.client.options()).await
    }

    /// Takes a read hold with `options`.
    pub async fn read_with(&self, options: &LockOptions) -> Result<LockGuard, LockError> {
        self.client.acquire_waiting(&self.name, LockKind::Read, options).await
    }

    /// Takes a read hold unless a writer holds the lock or waits for it;
    /// never waits.
    pub async fn try_read(&self) -> Result<Option<LockGuard>, LockError> {
        self.try_read_with(&self.client.options()).await
    }

    /// [`try_read`](Self::try_read) with `options` (the wait is ignored).
    pub async fn try_read_with(&self, options: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.client.acquire(&self.name, LockKind::Read, options, true).await
    }

    /// Takes the write hold, waiting up to the client's default wait bound.
    pub async fn write(&self) -> Result<LockGuard, LockError> {
        self.write_with(&self.client.options()).await
    }

    /// Takes the write hold with `options`.
    pub async fn write_with(&self, options: &LockOptions) -> Result<LockGuard, LockError> {
        self.client.acquire_waiting(&self.name, LockKind::Write, options).await
    }

    /// Takes the write hold if nobody holds the lock (or waits for it);
    /// never waits.
    pub async fn try_write(&self) -> Result<Option<LockGuard>, LockError> {
        self.try_write_with(&self.client.options()).await
    }

    /// [`try_write`](Self::try_write) with `options` (the wait is ignored).
    pub async fn try_write_with(&self, options: &LockOptions) -> Result<Option<LockGuard>, LockError> {
        self.client.acquire(&self.name, LockKind::Write, options, true).await
    }

    /// How many acquisitions (readers and writers) wait for the lock.
    pub async fn waiting(&self) -> Result<usize, LockError> {
        self.client.backend().waiting_for(&self.name, LockKind::Write).await
    }

    /// The read holds now, one per owner, in the order granted.
    pub async fn readers(&self) -> Result<Vec<LockInfo>, LockError> {
        self.client.backend().holders(&self.name, LockKind::Read).await
    }

    /// The write hold, if there is one.
    pub async fn writer(&self) -> Result<Option<LockInfo>, LockError> {
        Ok(self
            .client
            .backend()
            .holders(&self.name, LockKind::Write)
            .await?
            .into_iter()
            .next())
    }
}

impl LockClient {
    /// A semaphore of `permits` (1 to [`MAX_PERMITS`]) on `name` (see
    /// [`Semaphore`]). [`LockError::Unsupported`] at the first acquisition
    /// where the backend has no semaphores ([`Capabilities::semaphores`]).
    ///
    /// [`Capabilities::semaphores`]: crate::Capabilities::semaphores
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore, LockError> {
        Semaphore::new(self.clone(), name, permits)
    }

    /// A read-write lock on `name` (see [`RwLock`]).
    /// [`LockError::Unsupported`] at the first acquisition where the
    /// backend has none ([`Capabilities::rw_locks`]).
    ///
    /// [`Capabilities::rw_locks`]: crate::Capabilities::rw_locks
    pub fn rw_lock(&self, name: &str) -> Result<RwLock, LockError> {
        RwLock::new(self.clone(), name)
    }
}
