//! [`ZkBackend`]: the lock recipe on ZooKeeper primitives.
//!
//! # The recipe
//!
//! Each contender creates an ephemeral-sequential child of the name's parent
//! (a container node), named by its owner's tag and its attempt id and
//! holding its owner id and that attempt id, and lists the parent in the
//! same round trip (requests of one session are answered in order). The
//! lowest sequence holds the lock, unless share nodes of another owner's
//! hold are left (below); its creation zxid is the fencing token. Any other
//! contender
//!
//! * joins the hold instead, if it is its own owner's (re-entry, see
//!   below), and deletes its own child;
//! * or, for `try_lock`, deletes its child and reports the name busy;
//! * or watches its direct predecessor's going only (a children watch on
//!   that node, which has no children: its data changing wakes nobody) and
//!   lists the parent again when that one goes — it may have given up
//!   rather than released, so the contender may have a new predecessor
//!   rather than the lock. One release wakes one waiter, in queue order.
//!   A contender that holds after it waited claims its node before it
//!   takes the hold (see [`crate::claim`]); one that waits takes a dead waiter's node ahead of
//!   it out of the line (see [`crate::dead`]).
//!
//! # Shares of a hold, and sessions
//!
//! A node records the attempt ids of the shares of the hold it carries (the
//! hold count is their number over all the hold's nodes). A re-entry adds
//! its attempt id to *its own session's* node of the hold with a versioned
//! `set_data`; a session that has no node of the hold yet (another process
//! with the same owner id) creates an ephemeral **share node** of its own,
//! `share-<owner tag>-<session id>`, carrying the hold's token, in one
//! `multi` with a versioned rewrite of a node of the hold (its data as it
//! is): the share is made only while that node stands, and the node's
//! version goes up, so its holder's next versioned write notices that the
//! hold has another node now. A hold stands while its contender node or any
//! of its share nodes does: the first contender waits (watching one of them)
//! while another owner's share nodes are left. So each session's share lives
//! and dies with that session, and a guard's lost signal rests on its own
//! session's node only — a process never holds a lock through another
//! process's session.
//!
//! Every change is idempotent by attempt id ([the contract](lockkit_core::contract#attempts-are-idempotent)): an attempt
//! already recorded is not added again, a release whose attempt is gone
//! changes nothing and reports the holds left, and a write whose answer was
//! lost with the connection is recognised on the next read by its attempt id
//! (a create by its name, after a `sync` so that the server read from has
//! applied what the leader did).
//!
//! An acquisition that fails or is given up takes back whatever it may have
//! made ([the contract](lockkit_core::contract#lock-waits-cancel-safe)): its contender node — found by the attempt id in
//! its name when the create's answer never came, which is also what the
//! client library reports when it gives a silent connection up — and a
//! share a join or re-entry may have added to this session's node of the
//! hold. At once while connected, otherwise in the background, tried again
//! (a bounded number of times) while the session lives; only this
//! attempt's share and nodes are touched. An acquisition that started over
//! in a new session (the client gave the old one up) also takes back the
//! contender node the old session queued for it, which the server keeps
//! until it closes that session: when it is granted through another node
//! of the hold, fails, or is given up. Left in the queue, that node would
//! come first later and stand as a hold of the owner with the share of a
//! call that has returned, and the owner's next acquisition would join it
//! and count that share.
//!
//! This backend remembers its own node of each hold (path, data, version,
//! and whether other nodes carried the hold as of its last write), so an
//! uncontended acquire + release costs two round trips, like a bare create +
//! delete: the create (with the listing pipelined behind it) and the
//! versioned delete. Only when another session joined the hold (the delete
//! then meets a new version) or a share node was seen before does a release
//! list the parent to report the holds left. A hold that lives past 100 ms
//! also gets one get-data watch on its own node (armed off the acquisition's
//! path by one task per session), so that a node deleted under its holder
//! fires the lost signal; shorter holds cost no watch.
//!
//! Reads are answered by the server a session is connected to, which may lag
//! the leader; a contender's own listing always includes its own create and
//! everything committed before it, so "lowest node" is decided on a state at
//! least as new as the contender's node. A share node made after that
//! listing needed a node of its hold standing when it was made, so that
//! hold's nodes are in the listing too: a contender that sees none of
//! another owner's nodes ahead of it holds the lock for good. `inspect` and
//! `list` may briefly show a holder that has just released.
//!
//! The crate's own `Client::lock` recipe was not used: it has no way to try
//! without waiting, no hold count shared by an owner across processes, and
//! no token; the contract needs all three.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::raw::{
    AcquireRequest, ConnectUrl, ExtendOutcome, Hold, HolderWatch, Lease, LockBackend, ReleaseOutcome, TryAcquire,
};
use lockkit_core::{Capabilities, LockError, LockInfo, LockKind};
use tokio::time::Instant;

use crate::config::ZkConfig;
use crate::conn::counters::Counters;
use crate::conn::session::Sessions;
use crate::dead::Liveness;
use crate::error::{BACKEND, zk};
use crate::held::Held;
use crate::layout::{Child, Mark, parent_path, queue};
use crate::leftover::Leftover;
use crate::queue::list;
use crate::scheme::SCHEME_NAMES;

/// The ZooKeeper lock backend. Cheap to clone; clones share the session.
///
/// Leases are the session's: they last until the lock is released, the
/// session expires (the holder crashed or was cut off for the session
/// timeout), or the node is deleted. The lost signal fires as soon as the
/// connection is suspended, since from then on the holder cannot know
/// whether the server has expired its session.
#[derive(Clone)]
pub struct ZkBackend {
    inner: Arc<Inner>,
}

/// Counters of one backend since it was made.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ZkStats {
    /// Sessions established (more than one after an expiry).
    pub sessions: u64,
    /// Predecessor watches set by waiting acquisitions.
    pub watches: u64,
    /// Waiting acquisitions woken by their predecessor's watch. With no herd
    /// effect, one release wakes one waiter.
    pub wakeups: u64,
    /// Times the connection was suspended (every lease then held was lost).
    pub suspensions: u64,
    /// Listings of a line's children (`getChildren`) by acquisitions: one
    /// per queueing and one per wake-up of a waiter.
    pub listings: u64,
    /// Reads of contender nodes by acquisitions, besides their own.
    pub reads: u64,
    /// Dead waiters' nodes this backend's waiters took out of a line (see
    /// the crate docs).
    pub dead_waiters: u64,
    /// Rewrites of the session's liveness record, made while it has
    /// waiters (never for acquisitions that hold at once).
    pub refreshes: u64,
    /// Reads of a contender's own node after its create was answered: the
    /// server left the stat out of the answer (ZooKeeper before 3.8.1) and
    /// the read sent with the create guessed another name.
    pub late_stat_reads: u64,
}

/// The backend's state, shared by its clones; its operations are in the
/// modules named for them (`acquire`, `wait`, `join`, `release`, `extend`,
/// `admin`, `cache`).
pub(crate) struct Inner {
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) counters: Arc<Counters>,
    /// This backend's own node of each hold it has, by lock name: where it
    /// is and what its data was after our last write, so release and
    /// re-entry skip a read. A stale entry only costs a failed versioned
    /// write.
    pub(crate) held: Mutex<Held>,
    /// The liveness records of other sessions, as this backend's waiters
    /// saw them (see [`crate::dead`]).
    pub(crate) liveness: Liveness,
}

impl fmt::Debug for ZkBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = self.inner.sessions.config();
        f.debug_struct("ZkBackend")
            .field("hosts", &config.hosts)
            .field("chroot", &config.chroot)
            .field("session_timeout", &config.session_timeout)
            .field("session", &self.inner.sessions.peek())
            .finish()
    }
}

impl ZkBackend {
    /// Connects (the first session is made now, so a wrong address fails
    /// here) and creates the chroot node if it is missing.
    pub async fn connect(config: ZkConfig) -> Result<Self, LockError> {
        let counters = Arc::new(Counters::default());
        let inner = Arc::new(Inner {
            sessions: Arc::new(Sessions::new(config, counters.clone(), Leftover::adopt)),
            counters,
            held: Mutex::new(Held::default()),
            liveness: Liveness::default(),
        });
        inner.sessions.get().await?;
        Ok(ZkBackend { inner })
    }

    /// Connects to the ensemble of a `zk://` URL (see [`ZkConfig::from_url`]);
    /// fails on query parameters it does not know. The URL's lock options
    /// (`ttl`, `wait`, …) are ignored here: they belong to a `LockClient`.
    pub async fn from_url(url: &str) -> Result<Self, LockError> {
        let mut url = ConnectUrl::parse(url)?;
        if !SCHEME_NAMES.contains(&url.scheme.as_str()) {
            return Err(LockError::config("url scheme", "expected zk:// or zookeeper://"));
        }
        let config = ZkConfig::from_url(&mut url)?;
        url.finish()?;
        Self::connect(config).await
    }

    /// The configuration.
    pub fn config(&self) -> &ZkConfig {
        self.inner.sessions.config()
    }

    /// The counters since this backend was made.
    pub fn stats(&self) -> ZkStats {
        let c = &self.inner.counters;
        ZkStats {
            sessions: c.sessions.load(Ordering::Relaxed),
            watches: c.watches.load(Ordering::Relaxed),
            wakeups: c.wakeups.load(Ordering::Relaxed),
            suspensions: c.suspensions.load(Ordering::Relaxed),
            listings: c.listings.load(Ordering::Relaxed),
            reads: c.reads.load(Ordering::Relaxed),
            dead_waiters: c.dead_waiters.load(Ordering::Relaxed),
            refreshes: c.refreshes.load(Ordering::Relaxed),
            late_stat_reads: c.late_stat_reads.load(Ordering::Relaxed),
        }
    }

    /// The backend's state, for the crate's own tests.
    #[cfg(test)]
    pub(crate) fn inner(&self) -> &Arc<Inner> {
        &self.inner
    }

    /// The id of the current session, unless it has ended (the next
    /// operation then makes a new one).
    pub fn session_id(&self) -> Option<i64> {
        self.inner.sessions.peek().map(|s| s.id)
    }

    /// How many contenders are queued for `name`, every kind, the
    /// holders included.
    pub async fn contenders(&self, name: &str) -> Result<usize, LockError> {
        Ok(self.line(name).await?.len())
    }

    /// The contenders queued for `name`, every kind, in line order.
    async fn line(&self, name: &str) -> Result<Vec<Child>, LockError> {
        lockkit_core::raw::validate_name(name)?;
        let session = self.inner.sessions.get().await?;
        let children = list(&session.client, &parent_path(name))
            .await
            .map_err(|e| zk("list contenders", Some(name), e))?;
        Ok(queue(&children))
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Zxids keep growing across restarts and leader changes. The queue
        // of sequential nodes is FIFO whatever the request's `fair` says.
        Capabilities::session_leases()
            .with_shared_holds()
            .with_durable_tokens()
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
            .with_semaphores()
            .with_rw_locks()
            .with_pushed_changes()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.inner.try_acquire_detached(req).await
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| Instant::now() + w);
        self.inner.acquire(req, deadline).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        match hold.kind {
            LockKind::Mutex => self.inner.release(hold, attempt).await,
            _ => self.inner.release_kind(hold, attempt).await,
        }
    }

    async fn extend(&self, hold: &Hold, _ttl: Duration) -> Result<ExtendOutcome, LockError> {
        match hold.kind {
            LockKind::Mutex => self.inner.extend(hold).await,
            _ => self.inner.extend_kind(hold).await,
        }
    }

    async fn holders(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self.inner.inspect(name).await?.into_iter().collect()),
            _ => self.inner.holders_kind(name, kind).await,
        }
    }

    async fn waiting_for(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        match kind {
            LockKind::Mutex => self.waiting(name).await,
            _ => self.inner.waiting_kind(name, kind).await,
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.inner.list(prefix, limit).await
    }

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        // Every mutex contender but the first of the line (the holder's)
        // waits.
        let line = self.line(name).await?;
        Ok(line.iter().skip(1).filter(|c| c.mark == Mark::Mutex).count())
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.force_release(name).await
    }

    async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
        self.inner.watch_holder(name, within).await
    }
}
