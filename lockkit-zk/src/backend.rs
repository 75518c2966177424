//! [`ZkBackend`]: the lock recipe on ZooKeeper primitives.
//!
//! # The recipe
//!
//! Each contender creates an ephemeral-sequential child of the name's
//! parent (a container node) holding its owner id and a hold count of 1, and
//! lists the parent in the same round trip (requests of one session are
//! answered in order). The lowest sequence holds the lock; its creation
//! zxid is the fencing token. Any other contender
//!
//! * re-enters instead, if the holder is its own owner (a process sharing
//!   the owner id): the holder's count goes up with a versioned `set_data`,
//!   and its own child is deleted;
//! * or, for `try_lock`, deletes its child and reports the name busy;
//! * or watches its direct predecessor only (a get-data watch) and lists the
//!   parent again when that one goes — it may have given up rather than
//!   released, so the contender may have a new predecessor rather than the
//!   lock. One release wakes one waiter, in queue order.
//!
//! Release and re-entry change the count with versioned writes (a
//! compare-and-set on the node's data version), and delete the node at zero,
//! only if owner and token match. This backend remembers the nodes it holds
//! (path, count, version), so an uncontended acquire + release costs two
//! round trips, like a bare create + delete: the create (with the listing
//! pipelined behind it) and the versioned delete. A hold that lives past
//! 100 ms also gets one get-data watch on its own node (armed off the
//! acquisition's path by one task per session), so that a node deleted under
//! its holder fires the lost signal; shorter holds cost no watch.
//!
//! Reads are answered by the server a session is connected to, which may lag
//! the leader; a contender's own listing always includes its own create and
//! everything committed before it, so "lowest node" is decided on a state at
//! least as new as the contender's node. `inspect` and `list` may briefly
//! show a holder that has just released.
//!
//! The crate's own `Client::lock` recipe was not used: it has no way to try
//! without waiting, no hold count shared by an owner across processes, and no
//! token; the contract needs all three.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use lockkit_core::backend::{
    AcquireRequest, Capabilities, ExtendOutcome, Hold, Lease, LockBackend, LockInfo, ReleaseOutcome, TryAcquire,
};
use lockkit_core::url::{ConnectUrl, Scheme};
use lockkit_core::{LockError, detach};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Error as ZkError, EventType};

use crate::config::ZkConfig;
use crate::error::{BACKEND, ForeignNode, is_session_end, zk};
use crate::nodes::{owner_tag, parent_path, queue};
use crate::queue::{
    Changed, Cleanup, DeleteError, Known, Plan, ZkResult, change_count, delete_holder, enqueue, holder, list,
    list_held, plan, read, refresh, remove_node,
};
use crate::session::{Counters, Session, Sessions};

/// How often an operation starts over with a new session when its session
/// ends under it, before it gives up.
const SESSION_RESTARTS: usize = 3;

/// Connects to the ZooKeeper ensemble a `zk://` URL names, taking its own
/// query parameters (`session_timeout`, `connect_timeout`) from `url`.
///
/// This is what `lockkit::connect` calls. A query parameter left over is
/// refused with [`ConnectUrl::finish`] before any connection is tried.
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = ZkConfig::from_url(url)?;
    url.finish()?;
    Ok(Arc::new(ZkBackend::connect(config).await?))
}

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
}

struct Inner {
    sessions: Sessions,
    counters: Arc<Counters>,
    /// The nodes this backend holds, by lock name: where they are and what
    /// their data was after our last write, so release and re-entry skip a
    /// read. A stale entry only costs a failed versioned write.
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    /// The session the entries were last purged for: entries of earlier
    /// sessions are dropped when a new one records its first hold.
    session: i64,
    nodes: HashMap<String, HeldNode>,
}

#[derive(Debug, Clone)]
struct HeldNode {
    path: String,
    owner: String,
    czxid: i64,
    count: u32,
    version: i32,
    session: i64,
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
            sessions: Sessions::new(config, counters.clone()),
            counters,
            held: Mutex::new(Held::default()),
        });
        inner.sessions.get().await?;
        Ok(ZkBackend { inner })
    }

    /// Connects to the ensemble of a `zk://` URL (see [`ZkConfig::from_url`]);
    /// fails on query parameters it does not know. The URL's lock options
    /// (`ttl`, `wait`, …) are ignored here: they belong to a `LockClient`.
    pub async fn from_url(url: &str) -> Result<Self, LockError> {
        let mut url = ConnectUrl::parse(url)?;
        if url.scheme != Scheme::Zookeeper {
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
        }
    }

    /// The id of the current session, unless it has ended (the next
    /// operation then makes a new one).
    pub fn session_id(&self) -> Option<i64> {
        self.inner.sessions.peek().map(|s| s.id)
    }

    /// How many contenders are queued for `name`, the holder included.
    pub async fn contenders(&self, name: &str) -> Result<usize, LockError> {
        lockkit_core::name::validate_name(name)?;
        let session = self.inner.sessions.get().await?;
        let children = list(&session.client, &parent_path(name))
            .await
            .map_err(|e| zk("list contenders", Some(name), e))?;
        Ok(queue(&children).len())
    }
}

#[async_trait]
impl LockBackend for ZkBackend {
    fn kind(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Zxids keep growing across restarts and leader changes.
        Capabilities::session(true).with_admin()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        let (inner, name, owner) = (self.inner.clone(), req.name.to_owned(), req.owner.to_owned());
        let orphan = (self.inner.clone(), name.clone(), owner.clone());
        detach(
            BACKEND,
            async move { inner.try_acquire(&name, &owner).await },
            move |r| async move {
                if let Ok(TryAcquire::Acquired(lease)) = r {
                    let (inner, name, owner) = orphan;
                    inner.release_orphan(name, owner, lease.token).await;
                }
            },
        )
        .await?
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| Instant::now() + w);
        self.inner.acquire(req.name, req.owner, deadline).await
    }

    async fn release(&self, hold: &Hold, _attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.inner.release(hold).await
    }

    async fn extend(&self, hold: &Hold, _ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.inner.extend(hold).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        self.inner.list(prefix, limit).await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.force_release(name).await
    }
}

/// How a wait in one session ended.
enum Waited {
    Acquired(Lease),
    TimedOut,
    /// The session ended (or the node vanished): start over in a new one.
    Restart,
}

/// Unwraps a ZooKeeper result in a function returning `Result<Waited, _>`
/// (or `Result<Option<_>, _>`): a session that ended means "start over".
macro_rules! step {
    ($session:expr, $name:expr, $restart:expr, $e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) if is_session_end(&e) => {
                $session.end(&e);
                return Ok($restart);
            }
            Err(e) => return Err(zk("acquire", Some($name), e)),
        }
    };
}

impl Inner {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what a hold looks like after our write (`count` 0: gone).
    fn remember(&self, name: &str, path: &str, owner: &str, changed: &Changed, session: i64) {
        let mut held = self.held();
        if held.session != session && self.sessions.peek().is_some_and(|s| s.id == session) {
            // The nodes of an ended session went with it.
            held.nodes.retain(|_, h| h.session == session);
            held.session = session;
        }
        match changed.version {
            Some(version) if changed.count > 0 => {
                held.nodes.insert(
                    name.to_owned(),
                    HeldNode {
                        path: path.to_owned(),
                        owner: owner.to_owned(),
                        czxid: changed.czxid,
                        count: changed.count,
                        version,
                        session,
                    },
                );
            }
            _ => {
                if held.nodes.get(name).is_some_and(|h| h.path == path) {
                    held.nodes.remove(name);
                }
            }
        }
    }

    /// Whether this backend has a record of holding `name` for `owner`.
    fn holds(&self, name: &str, owner: &str) -> bool {
        self.held().nodes.get(name).is_some_and(|h| h.owner == owner)
    }

    fn forget(&self, name: &str, path: &str) {
        let mut held = self.held();
        if held.nodes.get(name).is_some_and(|h| h.path == path) {
            held.nodes.remove(name);
        }
    }

    fn lease(
        &self,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        path: &str,
        changed: Changed,
        epoch: &CancellationToken,
    ) -> Lease {
        self.remember(name, path, owner, &changed, session.id);
        Lease {
            token: changed.czxid as u64,
            hold_count: changed.count,
            valid_until: None,
            lost: Some(session.lease_token(path, changed.czxid, epoch)),
        }
    }

    /// Re-entry of a hold this backend already has for `owner`: one
    /// versioned write.
    async fn reenter_cached(&self, name: &str, owner: &str) -> Result<Option<Lease>, LockError> {
        let Some(h) = self.held().nodes.get(name).filter(|h| h.owner == owner).cloned() else {
            return Ok(None);
        };
        let Some(session) = self.sessions.peek().filter(|s| s.id == h.session) else {
            self.forget(name, &h.path);
            return Ok(None);
        };
        let epoch = session.epoch();
        let known = Known {
            count: h.count,
            version: h.version,
            czxid: h.czxid,
        };
        match change_count(&session.client, &h.path, owner, Some(h.czxid), Some(known), 1).await {
            Ok(Some(changed)) => Ok(Some(self.lease(&session, name, owner, &h.path, changed, &epoch))),
            Ok(None) => {
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) if is_session_end(&e) => {
                session.end(&e);
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) => Err(zk("acquire", Some(name), e)),
        }
    }

    /// Re-entry of the holder node at `path`, if `owner` holds it.
    async fn reenter(&self, session: &Arc<Session>, name: &str, owner: &str, path: &str) -> ZkResult<Option<Lease>> {
        let epoch = session.epoch();
        let changed = change_count(&session.client, path, owner, None, None, 1).await?;
        Ok(changed.map(|c| self.lease(session, name, owner, path, c, &epoch)))
    }

    async fn try_acquire(self: &Arc<Self>, name: &str, owner: &str) -> Result<TryAcquire, LockError> {
        // While suspended, requests wait for the reconnection: a try that
        // must not wait says so instead.
        if self.sessions.peek().is_some_and(|s| s.epoch().is_cancelled()) {
            return Err(zk("acquire", Some(name), ZkError::ConnectionLoss));
        }
        if let Some(lease) = self.reenter_cached(name, owner).await? {
            return Ok(TryAcquire::Acquired(lease));
        }
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            if let Some(outcome) = self.try_in_session(&session, name, owner).await? {
                return Ok(outcome);
            }
        }
        Err(session_kept_ending("acquire", name))
    }

    /// One try in one session; `None`: the session ended, start over.
    async fn try_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
    ) -> Result<Option<TryAcquire>, LockError> {
        let tag = owner_tag(owner);
        let parent = parent_path(name);
        let mut q = step!(session, name, None, enqueue(session, &parent, owner, tag).await);
        let mut cleanup = Cleanup::new(session, &q, owner);
        let mut foreign = None;
        loop {
            match plan(&q, tag, foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(None);
                }
                Plan::Holder if q.epoch.is_cancelled() => {
                    step!(session, name, None, refresh(session, &mut q).await);
                }
                Plan::Holder => {
                    cleanup.disarm();
                    let lease = self.lease(session, name, owner, &q.path, Changed::created(q.czxid), &q.epoch);
                    return Ok(Some(TryAcquire::Acquired(lease)));
                }
                Plan::Reenter(lowest) => {
                    let path = lowest.path(&q.parent);
                    match step!(session, name, None, self.reenter(session, name, owner, &path).await) {
                        Some(lease) => {
                            cleanup.run().await;
                            return Ok(Some(TryAcquire::Acquired(lease)));
                        }
                        None => {
                            foreign = Some(lowest.seq);
                            step!(session, name, None, refresh(session, &mut q).await);
                        }
                    }
                }
                Plan::Wait(_) => {
                    cleanup.run().await;
                    return Ok(Some(TryAcquire::Busy { retry_in: None }));
                }
            }
        }
    }

    async fn acquire(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, LockError> {
        if self.holds(name, owner) {
            let (inner, n, o) = (self.clone(), name.to_owned(), owner.to_owned());
            let orphan = (self.clone(), name.to_owned(), owner.to_owned());
            let cached = detach(
                BACKEND,
                async move { inner.reenter_cached(&n, &o).await },
                move |r| async move {
                    if let Ok(Some(lease)) = r {
                        let (inner, name, owner) = orphan;
                        inner.release_orphan(name, owner, lease.token).await;
                    }
                },
            );
            let Some(cached) = until(deadline, cached).await else {
                return Ok(None);
            };
            if let Some(lease) = cached?? {
                return Ok(Some(lease));
            }
        }
        let mut restarts = 0;
        loop {
            let Some(session) = until(deadline, self.sessions.get()).await else {
                return Ok(None);
            };
            match self.wait_in_session(&session?, name, owner, deadline).await? {
                Waited::Acquired(lease) => return Ok(Some(lease)),
                Waited::TimedOut => return Ok(None),
                Waited::Restart => {
                    restarts += 1;
                    tracing::debug!(backend = BACKEND, lock = %name, restarts, "queueing again in a new session");
                }
            }
        }
    }

    /// Queues in `session` and waits there for the lock, up to `deadline`.
    /// Every network step is bounded by the deadline too, so a suspended
    /// connection (whose requests wait for the reconnection) cannot stretch
    /// the wait.
    async fn wait_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        deadline: Option<Instant>,
    ) -> Result<Waited, LockError> {
        let tag = owner_tag(owner);
        let parent = parent_path(name);
        let (s, p, o) = (session.clone(), parent.clone(), owner.to_owned());
        let (orphan_session, orphan_owner) = (session.clone(), owner.to_owned());
        let queued = detach(
            BACKEND,
            async move { enqueue(&s, &p, &o, tag).await },
            move |r| async move {
                if let Ok(q) = r {
                    remove_node(orphan_session, q.path, orphan_owner, q.czxid).await;
                }
            },
        );
        // Giving up here leaves the node to the detached attempt's clean-up.
        let Some(queued) = until(deadline, queued).await else {
            return Ok(Waited::TimedOut);
        };
        let mut q = step!(session, name, Waited::Restart, queued?);
        let mut cleanup = Cleanup::new(session, &q, owner);
        let mut foreign = None;
        // A network step, bounded by the deadline; a session that ended means
        // start over.
        macro_rules! bounded {
            ($e:expr) => {
                match until(deadline, $e).await {
                    Some(r) => step!(session, name, Waited::Restart, r),
                    None => return Ok(give_up(session, cleanup).await),
                }
            };
        }
        loop {
            match plan(&q, tag, foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(Waited::Restart);
                }
                Plan::Holder if q.epoch.is_cancelled() => bounded!(refresh(session, &mut q)),
                Plan::Holder => {
                    cleanup.disarm();
                    let lease = self.lease(session, name, owner, &q.path, Changed::created(q.czxid), &q.epoch);
                    return Ok(Waited::Acquired(lease));
                }
                Plan::Reenter(lowest) => {
                    let path = lowest.path(&q.parent);
                    let (inner, s, n, o) = (self.clone(), session.clone(), name.to_owned(), owner.to_owned());
                    let orphan = (self.clone(), name.to_owned(), owner.to_owned());
                    let reentered = detach(
                        BACKEND,
                        async move { inner.reenter(&s, &n, &o, &path).await },
                        move |r| async move {
                            if let Ok(Some(lease)) = r {
                                let (inner, name, owner) = orphan;
                                inner.release_orphan(name, owner, lease.token).await;
                            }
                        },
                    );
                    let Some(reentered) = until(deadline, reentered).await else {
                        return Ok(give_up(session, cleanup).await);
                    };
                    match step!(session, name, Waited::Restart, reentered?) {
                        Some(lease) => {
                            cleanup.run().await;
                            return Ok(Waited::Acquired(lease));
                        }
                        None => {
                            foreign = Some(lowest.seq);
                            bounded!(refresh(session, &mut q));
                        }
                    }
                }
                Plan::Wait(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(give_up(session, cleanup).await);
                }
                Plan::Wait(pred) => {
                    Counters::bump(&self.counters.watches);
                    let armed = until(deadline, session.client.get_and_watch_data(&pred.path(&q.parent))).await;
                    match armed {
                        None => return Ok(give_up(session, cleanup).await),
                        Some(Ok((_, _, watcher))) => {
                            tokio::select! {
                                event = watcher.changed() => {
                                    Counters::bump(&self.counters.wakeups);
                                    tracing::trace!(backend = BACKEND, lock = %name, ?event, "woken by the predecessor");
                                    if event.event_type == EventType::Session && event.session_state.is_terminated() {
                                        session.end(event.session_state);
                                        return Ok(Waited::Restart);
                                    }
                                }
                                _ = sleep_until(deadline) => return Ok(give_up(session, cleanup).await),
                                _ = session.ended() => return Ok(Waited::Restart),
                            }
                        }
                        // Gone already, or the answer was lost: look again.
                        Some(Err(ZkError::NoNode | ZkError::ConnectionLoss)) => {}
                        Some(Err(e)) => step!(session, name, Waited::Restart, Err::<(), _>(e)),
                    }
                    bounded!(refresh(session, &mut q));
                }
            }
        }
    }

    /// Releases a hold whose acquirer stopped waiting for it.
    async fn release_orphan(&self, name: String, owner: String, token: u64) {
        let hold = Hold { name, owner, token };
        match self.release(&hold).await {
            Ok(outcome) => {
                tracing::debug!(backend = BACKEND, lock = %hold.name, ?outcome, "released an abandoned acquisition")
            }
            Err(error) => {
                tracing::warn!(backend = BACKEND, lock = %hold.name, %error, "could not release an abandoned acquisition; it ends with the session")
            }
        }
    }

    /// Where `hold` is: this backend's record of it, or the holder node.
    async fn locate(&self, session: &Session, hold: &Hold, token: i64) -> ZkResult<Option<(String, Option<Known>)>> {
        let cached = self.held().nodes.get(&hold.name).cloned();
        if let Some(h) = cached.filter(|h| h.owner == hold.owner && h.czxid == token) {
            if h.session == session.id {
                let known = Known {
                    count: h.count,
                    version: h.version,
                    czxid: h.czxid,
                };
                return Ok(Some((h.path, Some(known))));
            }
            // An ephemeral node of an ended session: gone.
            self.forget(&hold.name, &h.path);
        }
        Ok(holder(&session.client, &parent_path(&hold.name))
            .await?
            .map(|c| (c.path(&parent_path(&hold.name)), None)))
    }

    async fn release(&self, hold: &Hold) -> Result<ReleaseOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let located = match self.locate(&session, hold, token).await {
                Ok(Some(located)) => located,
                Ok(None) => return Ok(ReleaseOutcome::NotHeld),
                Err(e) if is_session_end(&e) => {
                    session.end(&e);
                    continue;
                }
                Err(e) => return Err(zk("release", Some(&hold.name), e)),
            };
            let (path, known) = located;
            let was_known = known.is_some();
            match change_count(&session.client, &path, &hold.owner, Some(token), known, -1).await {
                Ok(Some(changed)) => {
                    self.remember(&hold.name, &path, &hold.owner, &changed, session.id);
                    if changed.version.is_none() {
                        session.released(&path);
                    }
                    return Ok(ReleaseOutcome::Released {
                        remaining: changed.count,
                    });
                }
                Ok(None) => {
                    if was_known {
                        self.forget(&hold.name, &path);
                    }
                    return Ok(ReleaseOutcome::NotHeld);
                }
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("release", Some(&hold.name), e)),
            }
        }
        Err(session_kept_ending("release", &hold.name))
    }

    async fn extend(&self, hold: &Hold) -> Result<ExtendOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ExtendOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let checked = async {
                let Some((path, _)) = self.locate(&session, hold, token).await? else {
                    return Ok(false);
                };
                Ok(match read(&session.client, &path).await? {
                    Some((data, czxid, _)) => czxid == token && data.is_some_and(|d| d.owner == hold.owner),
                    None => false,
                })
            };
            match checked.await {
                Ok(true) => return Ok(ExtendOutcome::Extended { valid_until: None }),
                Ok(false) => return Ok(ExtendOutcome::NotHeld),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("extend", Some(&hold.name), e)),
            }
        }
        Err(session_kept_ending("extend", &hold.name))
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let parent = parent_path(name);
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let found = async {
                loop {
                    let Some(child) = holder(&session.client, &parent).await? else {
                        return Ok(None);
                    };
                    let path = child.path(&parent);
                    // Gone between the listing and the read: look again.
                    if let Some((data, czxid, _)) = read(&session.client, &path).await? {
                        return Ok(Some((path, data, czxid)));
                    }
                }
            };
            match found.await {
                Ok(None) => return Ok(None),
                Ok(Some((_, Some(data), czxid))) => {
                    return Ok(Some(LockInfo {
                        name: name.to_owned(),
                        owner: data.owner,
                        hold_count: data.count,
                        token: czxid as u64,
                        remaining: None,
                    }));
                }
                Ok(Some((path, None, _))) => {
                    return Err(LockError::backend(
                        BACKEND,
                        "inspect",
                        Some(name),
                        false,
                        ForeignNode { path },
                    ));
                }
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("inspect", Some(name), e)),
            }
        }
        Err(session_kept_ending("inspect", name))
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match list_held(&session, prefix, limit).await {
                Ok(held) => return Ok(held),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(ZkError::ConnectionLoss) => {}
                Err(e) => return Err(zk("list", None, e)),
            }
        }
        Err(LockError::backend(
            BACKEND,
            "list",
            None,
            true,
            "the ZooKeeper connection was lost again and again",
        ))
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match delete_holder(&session, name).await {
                Ok(Some((path, info))) => {
                    self.forget(name, &path);
                    tracing::warn!(backend = BACKEND, lock = %name, owner = %info.owner, token = info.token, "lock force-released");
                    return Ok(Some(info));
                }
                Ok(None) => return Ok(None),
                Err(DeleteError::Zk(e)) if is_session_end(&e) => session.end(&e),
                Err(DeleteError::Zk(e)) => return Err(zk("force_release", Some(name), e)),
                Err(DeleteError::Foreign(path)) => {
                    return Err(LockError::backend(
                        BACKEND,
                        "force_release",
                        Some(name),
                        false,
                        ForeignNode { path },
                    ));
                }
            }
        }
        Err(session_kept_ending("force_release", name))
    }
}

fn session_kept_ending(operation: &'static str, name: &str) -> LockError {
    LockError::backend(
        BACKEND,
        operation,
        Some(name),
        true,
        "the ZooKeeper session ended again and again",
    )
}

/// `fut`'s output, unless `deadline` passes first.
async fn until<F: Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// Leaves the queue after the wait ran out: at once while connected (so no
/// node is left when `lock` returns), in the background while the
/// connection is suspended (its requests would wait for the reconnection).
async fn give_up(session: &Session, cleanup: Cleanup) -> Waited {
    if session.epoch().is_cancelled() {
        drop(cleanup);
    } else {
        cleanup.run().await;
    }
    Waited::TimedOut
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
