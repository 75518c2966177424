//! The [`LockBackend`] trait: what a backend implements, and nothing more.
//!
//! Applications use [`LockClient`](crate::LockClient); the client validates
//! names and options, owns the watchdog, builds guards and emits traces. A
//! backend only talks to its server.

use std::fmt;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::LockError;
use crate::lease::SessionDeadline;

/// What kind of hold a request asks for. A name is one lock whatever the
/// kind: while `"x"` is held as one kind (a mutex, a semaphore's permits,
/// a read-write lock's read or write holds), a request of another kind
/// waits (`try_lock`: busy) until those holds are gone, and
/// [`LockInfo::kind`] names the kind that holds it
/// ([the contract](crate::contract#one-name-one-lock)). Read and write
/// holds of one name are one read-write lock: they follow its own rules
/// ([`same_lock`](Self::same_lock)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LockKind {
    /// A mutex: one owner holds the name at a time ([`LockClient::lock`]).
    ///
    /// [`LockClient::lock`]: crate::LockClient::lock
    #[default]
    Mutex,
    /// One permit of a semaphore of `permits` ([`LockClient::semaphore`]):
    /// at most that many permits are held at once, each one a hold of its
    /// own with a fencing token of its own (an owner asking again takes
    /// another permit; a repeated attempt is the same one). The count is
    /// part of the name's state: a request with another count while the
    /// name is in use fails with [`LockError::Conflict`].
    ///
    /// [`LockClient::semaphore`]: crate::LockClient::semaphore
    Permit {
        /// How many permits the semaphore has (at least 1).
        permits: u32,
    },
    /// A read hold of a read-write lock ([`LockClient::rw_lock`]): shared
    /// with every other reader, never beside another owner's write hold,
    /// and not granted while a writer waits (no writer starvation).
    /// Re-entrant by owner; an owner that holds the write lock may read
    /// too (and so downgrade). Its token is that of the last write hold.
    ///
    /// [`LockClient::rw_lock`]: crate::LockClient::rw_lock
    Read,
    /// The write hold of a read-write lock: alone on the name, re-entrant
    /// by owner, with a token greater than every earlier writer's. An owner
    /// holding only a read hold cannot upgrade: [`LockError::Conflict`].
    Write,
}

impl LockKind {
    /// The short name of the kind, for messages and traces.
    pub fn as_str(self) -> &'static str {
        match self {
            LockKind::Mutex => "mutex",
            LockKind::Permit { .. } => "permit",
            LockKind::Read => "read",
            LockKind::Write => "write",
        }
    }

    /// Whether holds of `self` and `other` on one name are of one lock, and
    /// so follow that lock's rules (a mutex's one holder, a semaphore's
    /// permits, a read-write lock's readers and writer): both mutex, both
    /// permits (whatever their counts: a count that disagrees is a
    /// [`LockError::Conflict`]), or both read or write. Holds of kinds for
    /// which it is false never stand together on one name.
    pub fn same_lock(self, other: LockKind) -> bool {
        matches!(
            (self, other),
            (LockKind::Mutex, LockKind::Mutex)
                | (LockKind::Permit { .. }, LockKind::Permit { .. })
                | (LockKind::Read | LockKind::Write, LockKind::Read | LockKind::Write)
        )
    }

    /// What a hold of this kind belongs to: `"lock"`, `"semaphore"` or
    /// `"read-write lock"` (in messages, e.g. what a backend does not
    /// support).
    pub fn family(self) -> &'static str {
        match self {
            LockKind::Mutex => "lock",
            LockKind::Permit { .. } => "semaphore",
            LockKind::Read | LockKind::Write => "read-write lock",
        }
    }
}

/// One acquisition attempt: who wants which name for how long.
#[derive(Clone, Copy, Debug)]
pub struct AcquireRequest<'a> {
    /// The lock name, already validated (1 to 255 bytes of UTF-8).
    pub name: &'a str,
    /// The owner id; equal owners share one hold (reentrancy).
    pub owner: &'a str,
    /// The lease length (TTL backends). At least 1 ms.
    pub ttl: Duration,
    /// The attempt id: one per `lock`/`try_lock` call (see
    /// [`new_attempt_id`](crate::name::new_attempt_id)), the same for every
    /// try within that call. The backend records it with the hold, as this
    /// acquisition's share of the hold count, so that a repeat of the same
    /// attempt — lockkit's own retry, or a client library re-sending a
    /// command after a lost reply — is recognised and counted once
    /// ([the contract](crate::contract#attempts-are-idempotent)). Release
    /// names it again to take exactly this share back.
    pub attempt: &'a str,
    /// Serve waiters in order ([the contract](crate::contract#fair-by-default), [`LockOptions::fair`]):
    /// a free name goes to the first in line, not to whoever asks first.
    /// An unfair acquisition takes a free name whoever waits.
    ///
    /// [`LockOptions::fair`]: crate::LockOptions::fair
    pub fair: bool,
    /// What kind of hold ([`LockKind::Mutex`] for a lock).
    pub kind: LockKind,
}

/// One existing hold: a name held by an owner under a fencing token.
///
/// Release and extend act only when all three match on the server, so a stale
/// guard can never touch a newer hold of the same name.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Hold {
    /// The lock name.
    pub name: String,
    /// The owner id.
    pub owner: String,
    /// The fencing token of the hold.
    pub token: u64,
    /// What kind of hold it is.
    pub kind: LockKind,
}

impl Hold {
    /// A mutex hold of `name` by `owner` under `token`.
    pub fn mutex(name: impl Into<String>, owner: impl Into<String>, token: u64) -> Self {
        Hold {
            name: name.into(),
            owner: owner.into(),
            token,
            kind: LockKind::Mutex,
        }
    }
}

/// A granted hold, as the backend reports it.
#[derive(Debug, Clone)]
pub struct Lease {
    /// The fencing token: unchanged on re-entry, strictly greater than every
    /// earlier token of the name on a first acquisition.
    pub token: u64,
    /// The hold count after this acquisition (1 on a first acquisition).
    pub hold_count: u32,
    /// Until when the holder may trust it holds the lock, by this process's
    /// monotonic clock; `None` for session leases (ZooKeeper), which end with
    /// the session instead.
    pub valid_until: Option<Instant>,
    /// A backend's own loss signal (e.g. a ZooKeeper session that expired);
    /// the guard's lost signal fires when it is cancelled.
    pub lost: Option<CancellationToken>,
    /// A session lease's moving deadline (see [`SessionDeadline`]): the
    /// guard is lost once it passes, even before `lost` is cancelled, and
    /// reports it as its `valid_until`. `None` for TTL leases.
    pub session_deadline: Option<SessionDeadline>,
}

impl Lease {
    /// A TTL lease: granted by a request sent at `sent_at` (by this
    /// process's monotonic clock) with `remaining` of it left on the server,
    /// so valid until `sent_at + remaining` less the clock-drift allowance
    /// (see [`lease::valid_until`](crate::lease::valid_until)).
    pub fn ttl(token: u64, hold_count: u32, sent_at: Instant, remaining: Duration) -> Self {
        Lease {
            token,
            hold_count,
            valid_until: Some(crate::lease::valid_until(sent_at, remaining)),
            lost: None,
            session_deadline: None,
        }
    }
}

/// The outcome of a single acquisition attempt.
#[derive(Debug)]
pub enum TryAcquire {
    /// The hold was granted (or re-entered).
    Acquired(Lease),
    /// Another owner holds the name.
    Busy {
        /// How long the current holder's lease still runs, if known: a waiter
        /// need not try again before then unless it is told of a release.
        retry_in: Option<Duration>,
    },
}

impl TryAcquire {
    /// The fencing token of the hold, if the attempt got one.
    pub fn token(&self) -> Option<u64> {
        match self {
            TryAcquire::Acquired(lease) => Some(lease.token),
            TryAcquire::Busy { .. } => None,
        }
    }
}

/// The outcome of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseOutcome {
    /// The hold count was decremented; at zero the name is free.
    Released {
        /// Holds left for this owner (0: the name is free).
        remaining: u32,
    },
    /// This owner does not hold the name under that token: nothing changed.
    NotHeld,
}

/// The outcome of an extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtendOutcome {
    /// The lease now runs until `valid_until` (`None`: session lease).
    /// Extending never shortens a lease.
    Extended {
        /// The new validity deadline by this process's monotonic clock.
        valid_until: Option<Instant>,
    },
    /// This owner does not hold the name under that token: nothing changed.
    NotHeld,
}

/// What the server knows about one held name.
///
/// [`LockBackend::inspect`] answers with the name's first hold whatever its
/// kind, and [`kind`](Self::kind) says which: a caller whose `try_lock`
/// was busy learns that way whether a mutex, a semaphore or a read-write
/// lock holds the name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockInfo {
    /// The lock name.
    pub name: String,
    /// The current holder's owner id.
    pub owner: String,
    /// How many times the owner holds it.
    pub hold_count: u32,
    /// The fencing token of the hold.
    pub token: u64,
    /// How long the lease still runs (`None`: session lease).
    pub remaining: Option<Duration>,
    /// The kind of the hold: [`LockKind::Mutex`], a permit of a semaphore
    /// of N ([`LockKind::Permit`]), or a read-write lock's
    /// [`LockKind::Read`] or [`LockKind::Write`] hold.
    pub kind: LockKind,
}

/// How a backend's leases end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseKind {
    /// A lease lasts its ttl unless extended (Redis, SQL, memory).
    Ttl,
    /// A lease lasts as long as the client's session (ZooKeeper).
    Session,
}

/// What a backend supports, declared honestly; the conformance kit picks its
/// checks from this instead of silently skipping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// How leases end.
    pub leases: LeaseKind,
    /// `extend_many` costs O(1) round trips, not one per lock.
    pub batch_extend: bool,
    /// The most holds one `extend_many` call should carry (`usize::MAX`: no
    /// limit). The watchdog splits bigger batches into parts of this size
    /// and sends them concurrently, each part's results taking effect as soon
    /// as it answers — so thousands of holds on a backend that extends a few
    /// hundred per statement are renewed in parallel, not one slow batch.
    pub extend_batch_max: usize,
    /// Fencing tokens keep growing across a server restart.
    pub durable_tokens: bool,
    /// [`LockBackend::list`] and [`LockBackend::force_release`] are
    /// implemented.
    pub admin: bool,
    /// Attempts are idempotent
    /// ([the contract](crate::contract#attempts-are-idempotent)): an
    /// acquisition or a release repeated with the same attempt id takes
    /// effect once. A backend that does not declare it may count a retried
    /// acquisition as a re-entry; the conformance kit checks it wherever it is declared.
    pub idempotent_attempts: bool,
    /// Waiters are served in order when the request asks for it
    /// ([`AcquireRequest::fair`]), and [`LockBackend::waiting`] counts them;
    /// the conformance kit's fairness cases run wherever it is declared.
    pub fair: bool,
    /// Semaphores ([`LockKind::Permit`]) are implemented, with the same
    /// leases, idempotence and order of service as the mutex.
    pub semaphores: bool,
    /// Read-write locks ([`LockKind::Read`], [`LockKind::Write`]) are
    /// implemented, likewise.
    pub rw_locks: bool,
    /// The server tells of a name's holder changing (a grant, a release,
    /// an expiry): [`LockBackend::watch_holder`] resolves then, not after
    /// its fallback interval, and leader election's `observe` is pushed.
    pub pushes_changes: bool,
    /// A hold's owner, count and token live on the server (contract point
    /// 2): every client sees them ([`LockBackend::inspect`] from another
    /// client names the owner), and a client configured with the same owner
    /// id shares the hold. Backends whose holds live on a connection of the
    /// holding client (the SQL backend's session mode) do not declare it:
    /// their `inspect` of another client's hold says only that the name is
    /// held (owner `""`, count 0, token 0), and re-entry is by owner within
    /// one client. The conformance kit checks the shared hold wherever it
    /// is declared, and otherwise only who holds and who does not.
    pub shared_holds: bool,
}

impl Capabilities {
    /// A TTL-lease backend that declares nothing else yet; add what it
    /// supports with the `with_*` methods, e.g.
    /// `Capabilities::ttl_leases().with_batch_extend().with_admin()`.
    pub const fn ttl_leases() -> Self {
        Self::bare(LeaseKind::Ttl)
    }

    /// A session-lease backend that declares nothing else yet (see
    /// [`ttl_leases`](Self::ttl_leases)).
    pub const fn session_leases() -> Self {
        Self::bare(LeaseKind::Session)
    }

    /// The same, declaring `extend_many` in O(1) round trips (see
    /// [`batch_extend`](Self::batch_extend)).
    pub const fn with_batch_extend(mut self) -> Self {
        self.batch_extend = true;
        self
    }

    /// The same, declaring tokens that keep growing across a server
    /// restart (see [`durable_tokens`](Self::durable_tokens)).
    pub const fn with_durable_tokens(mut self) -> Self {
        self.durable_tokens = true;
        self
    }

    const fn bare(leases: LeaseKind) -> Self {
        Capabilities {
            leases,
            batch_extend: false,
            extend_batch_max: usize::MAX,
            durable_tokens: false,
            admin: false,
            idempotent_attempts: false,
            fair: false,
            semaphores: false,
            rw_locks: false,
            pushes_changes: false,
            shared_holds: false,
        }
    }

    /// The same, declaring holds kept on the server for every client to
    /// see and share (see [`shared_holds`](Self::shared_holds)).
    pub const fn with_shared_holds(mut self) -> Self {
        self.shared_holds = true;
        self
    }

    /// The same, declaring semaphores (see [`semaphores`](Self::semaphores)).
    pub const fn with_semaphores(mut self) -> Self {
        self.semaphores = true;
        self
    }

    /// The same, declaring read-write locks (see [`rw_locks`](Self::rw_locks)).
    pub const fn with_rw_locks(mut self) -> Self {
        self.rw_locks = true;
        self
    }

    /// The same, declaring pushed changes (see
    /// [`pushes_changes`](Self::pushes_changes)).
    pub const fn with_pushed_changes(mut self) -> Self {
        self.pushes_changes = true;
        self
    }

    /// Whether requests of `kind` are implemented.
    pub const fn supports(&self, kind: LockKind) -> bool {
        match kind {
            LockKind::Mutex => true,
            LockKind::Permit { .. } => self.semaphores,
            LockKind::Read | LockKind::Write => self.rw_locks,
        }
    }

    /// The same, with at most `max` holds (at least 1) per `extend_many`
    /// call (see [`extend_batch_max`](Self::extend_batch_max)).
    pub const fn with_extend_batch_max(mut self, max: usize) -> Self {
        self.extend_batch_max = if max == 0 { 1 } else { max };
        self
    }

    /// The same, declaring attempts idempotent (see
    /// [`idempotent_attempts`](Self::idempotent_attempts)).
    pub const fn with_idempotent_attempts(mut self) -> Self {
        self.idempotent_attempts = true;
        self
    }

    /// The same, declaring fair queues (see [`fair`](Self::fair)).
    pub const fn with_fair(mut self) -> Self {
        self.fair = true;
        self
    }

    /// The same, declaring [`LockBackend::list`] and
    /// [`LockBackend::force_release`] implemented.
    pub const fn with_admin(mut self) -> Self {
        self.admin = true;
        self
    }
}

/// What [`LockBackend::watch_holder`] gives: resolves when the holder may
/// have changed, or when the watch's time is up.
pub type HolderWatch = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + 'static>>;

/// A lock store. Implemented once per backend; used through
/// [`LockClient`](crate::LockClient).
///
/// Names and owners arrive validated. Every method must be **cancel safe**:
/// if its future is dropped at any await point, no hold and no queue entry
/// may be left behind (or it must be cleaned up at once in the background,
/// e.g. with [`detach`](crate::raw::detach)).
#[async_trait]
pub trait LockBackend: Send + Sync + fmt::Debug + 'static {
    /// The backend's name for messages, traces and metrics, e.g. `redis`.
    fn name(&self) -> &'static str;

    /// What this backend supports.
    fn capabilities(&self) -> Capabilities;

    /// One attempt that never waits for another owner: acquire, re-enter, or
    /// report `Busy`.
    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError>;

    /// Acquire, waiting up to `wait` (`None`: forever) for other owners to
    /// release. Returns `Ok(None)` when the wait ran out. The backend owns
    /// waiting: it should be told of releases by its server, not poll.
    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError>;

    /// Takes back the share of `hold` that the acquisition `attempt` made,
    /// decrementing the hold count and freeing the name at zero; only if
    /// owner and token match.
    ///
    /// Idempotent: when `attempt`'s share is already gone but the hold
    /// still stands (a repeated release), nothing changes and the holds left
    /// are reported again — a release runs at most once.
    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError>;

    /// Extend `hold` to at least `ttl` from now; only if owner and token match.
    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError>;

    /// Extend many holds at once; one result per hold, in order. The default
    /// sends the single extensions concurrently; backends that can do it in
    /// O(1) round trips override it and say so in [`Capabilities`].
    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        futures_util::future::join_all(holds.iter().map(|(h, ttl)| self.extend(h, *ttl))).await
    }

    /// Who holds `name`, if anybody, whatever the kind
    /// ([`LockInfo::kind`]): the mutex's holder, or the first hold of the
    /// semaphore or read-write lock that holds the name.
    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError>;

    /// Every hold of `kind` on `name`: a semaphore's permits, a read-write
    /// lock's readers ([`LockKind::Read`]) or its writer
    /// ([`LockKind::Write`]), in the order they were granted. The default
    /// answers for the mutex from [`inspect`](Self::inspect); backends that
    /// implement more kinds override it.
    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self
                .inspect(name)
                .await?
                .into_iter()
                .filter(|i| i.kind == LockKind::Mutex)
                .collect()),
            _ => Err(LockError::Unsupported {
                backend: self.name(),
                operation: kind.family(),
            }),
        }
    }

    /// Arms a watch on the holder of the mutex `name` and returns it: a
    /// future that resolves once the holder may have changed (a grant, a
    /// release, an expiry, a forced release) after this call returned — or
    /// spuriously — and at the latest after `within`. Leader election's
    /// `observe` arms it, then reads the leader, then waits on it: a change
    /// between the read and the wait is not missed.
    ///
    /// The default cannot be told and sleeps `within` (the caller looks
    /// again then). Backends whose server pushes changes override it and
    /// declare [`Capabilities::pushes_changes`].
    async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
        let _ = name;
        Ok(Box::pin(tokio::time::sleep(within)))
    }

    /// Held names starting with `prefix`, in name order, at most `limit`.
    /// Operator tooling; backends that cannot enumerate keep the default.
    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let _ = (prefix, limit);
        Err(LockError::Unsupported {
            backend: self.name(),
            operation: "list",
        })
    }

    /// How many acquisitions wait for `name` (queued behind its holder, not
    /// counting the holder's shares): operator tooling and the fairness
    /// cases of the conformance kit. Backends without a queue keep the
    /// default.
    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let _ = name;
        Err(LockError::Unsupported {
            backend: self.name(),
            operation: "waiting",
        })
    }

    /// How many acquisitions of `kind` wait for `name` (see
    /// [`waiting`](Self::waiting), which answers for the mutex: the
    /// default). Backends that implement more kinds override it.
    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        match kind {
            LockKind::Mutex => self.waiting(name).await,
            _ => Err(LockError::Unsupported {
                backend: self.name(),
                operation: "waiting",
            }),
        }
    }

    /// Deletes the hold on `name` whoever holds it — the operator's override
    /// for a stuck lock. Returns the hold that was removed. The holder's
    /// guard notices at its next extension (its lost signal fires).
    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let _ = name;
        Err(LockError::Unsupported {
            backend: self.name(),
            operation: "force_release",
        })
    }
}

/// Compile-time check that the trait stays object safe.
fn _object_safe(_: Box<dyn LockBackend>) {}
