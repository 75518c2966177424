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
//! round trips, like a bare create + delete.
//!
//! The crate's own `Client::lock` recipe was not used: it has no way to try
//! without waiting, no hold count shared by an owner across processes, and no
//! token; the contract needs all three.

use std::collections::HashMap;
use std::fmt;
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
use zookeeper_client::{Client, Error as ZkError, EventType};

use crate::config::ZkConfig;
use crate::error::{BACKEND, ForeignNode, is_session_end, zk};
use crate::nodes::{Child, NodeData, child_prefix, child_stem, owner_tag, parent_path, queue};
use crate::session::{CONTENDER, Counters, PARENT, Session, Sessions};

type ZkResult<T> = Result<T, ZkError>;

/// How often an operation starts over with a new session when its session
/// ends under it, before it gives up.
const SESSION_RESTARTS: usize = 3;

/// Connects to the ZooKeeper ensemble a `zk://` URL names, taking its own
/// query parameters (`session_timeout`, `connect_timeout`) from `url`.
///
/// This is what `lockkit::connect` calls; the caller checks that no unknown
/// parameter is left.
pub async fn connect(url: &mut ConnectUrl) -> Result<Arc<dyn LockBackend>, LockError> {
    let config = ZkConfig::from_url(url)?;
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
    held: Mutex<HashMap<String, HeldNode>>,
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
            held: Mutex::new(HashMap::new()),
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
        Capabilities::session(true)
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

    async fn release(&self, hold: &Hold) -> Result<ReleaseOutcome, LockError> {
        self.inner.release(hold).await
    }

    async fn extend(&self, hold: &Hold, _ttl: Duration) -> Result<ExtendOutcome, LockError> {
        self.inner.extend(hold).await
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(name).await
    }
}

/// A contender's node, and the queue as last listed.
struct Queued {
    parent: String,
    me: Child,
    path: String,
    czxid: i64,
    queue: Vec<Child>,
    /// The connection epoch the listing was made in.
    epoch: CancellationToken,
}

/// What a contender does next, from the last listing.
enum Plan {
    /// Its node is gone (session ended, or deleted by somebody).
    Gone,
    /// It is first: it holds the lock.
    Holder,
    /// The holder's node carries this owner's tag: re-enter it.
    Reenter(Child),
    /// Wait for this node to go.
    Wait(Child),
}

fn plan(q: &Queued, tag: u64, foreign: Option<i64>) -> Plan {
    let Some(me) = q.queue.iter().position(|c| c.seq == q.me.seq && c.name == q.me.name) else {
        return Plan::Gone;
    };
    if me == 0 {
        return Plan::Holder;
    }
    let lowest = &q.queue[0];
    if lowest.owner_tag == tag && foreign != Some(lowest.seq) {
        return Plan::Reenter(lowest.clone());
    }
    // A node of this owner further ahead becomes the holder when its own
    // predecessor goes: watch that one, so re-entry is not missed.
    // Otherwise (always, unless one owner queues twice) the direct predecessor.
    let watch = q.queue[1..me].iter().position(|c| c.owner_tag == tag).unwrap_or(me - 1);
    Plan::Wait(q.queue[watch].clone())
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
    fn held(&self) -> MutexGuard<'_, HashMap<String, HeldNode>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what a hold looks like after our write (`count` 0: gone).
    fn remember(&self, name: &str, path: &str, owner: &str, changed: &Changed, session: i64) {
        let mut held = self.held();
        match changed.version {
            Some(version) if changed.count > 0 => {
                held.insert(
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
                if held.get(name).is_some_and(|h| h.path == path) {
                    held.remove(name);
                }
            }
        }
    }

    fn forget(&self, name: &str, path: &str) {
        let mut held = self.held();
        if held.get(name).is_some_and(|h| h.path == path) {
            held.remove(name);
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
        let Some(h) = self.held().get(name).filter(|h| h.owner == owner).cloned() else {
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
        )
        .await??;
        if let Some(lease) = cached {
            return Ok(Some(lease));
        }
        let mut restarts = 0;
        loop {
            let session = self.sessions.get().await?;
            match self.wait_in_session(&session, name, owner, deadline).await? {
                Waited::Acquired(lease) => return Ok(Some(lease)),
                Waited::TimedOut => return Ok(None),
                Waited::Restart => {
                    restarts += 1;
                    tracing::debug!(backend = BACKEND, lock = %name, restarts, "queueing again in a new session");
                    if deadline.is_some_and(|d| Instant::now() >= d) {
                        return Ok(None);
                    }
                }
            }
        }
    }

    /// Queues in `session` and waits there for the lock, up to `deadline`.
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
        )
        .await?;
        let mut q = step!(session, name, Waited::Restart, queued);
        let mut cleanup = Cleanup::new(session, &q, owner);
        let mut foreign = None;
        loop {
            match plan(&q, tag, foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(Waited::Restart);
                }
                Plan::Holder if q.epoch.is_cancelled() => {
                    step!(session, name, Waited::Restart, refresh(session, &mut q).await);
                }
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
                    )
                    .await?;
                    match step!(session, name, Waited::Restart, reentered) {
                        Some(lease) => {
                            cleanup.run().await;
                            return Ok(Waited::Acquired(lease));
                        }
                        None => {
                            foreign = Some(lowest.seq);
                            step!(session, name, Waited::Restart, refresh(session, &mut q).await);
                        }
                    }
                }
                Plan::Wait(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    // The bound ran out: one last look, then leave the queue.
                    step!(session, name, Waited::Restart, refresh(session, &mut q).await);
                    if matches!(plan(&q, tag, foreign), Plan::Holder) && !q.epoch.is_cancelled() {
                        cleanup.disarm();
                        let lease = self.lease(session, name, owner, &q.path, Changed::created(q.czxid), &q.epoch);
                        return Ok(Waited::Acquired(lease));
                    }
                    cleanup.run().await;
                    return Ok(Waited::TimedOut);
                }
                Plan::Wait(pred) => {
                    Counters::bump(&self.counters.watches);
                    let armed = session.client.get_and_watch_data(&pred.path(&q.parent)).await;
                    match armed {
                        Ok((_, _, watcher)) => {
                            tokio::select! {
                                event = watcher.changed() => {
                                    Counters::bump(&self.counters.wakeups);
                                    tracing::trace!(backend = BACKEND, lock = %name, ?event, "woken by the predecessor");
                                    if event.event_type == EventType::Session && event.session_state.is_terminated() {
                                        session.end(event.session_state);
                                        return Ok(Waited::Restart);
                                    }
                                }
                                _ = sleep_until(deadline) => {}
                                _ = session.ended() => return Ok(Waited::Restart),
                            }
                        }
                        // Gone already, or the answer was lost: look again.
                        Err(ZkError::NoNode | ZkError::ConnectionLoss) => {}
                        Err(e) => step!(session, name, Waited::Restart, Err::<(), _>(e)),
                    }
                    step!(session, name, Waited::Restart, refresh(session, &mut q).await);
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
        let cached = self.held().get(&hold.name).cloned();
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

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// The children of `parent` (none if it does not exist), retried over
/// connection losses (a retry waits for the reconnection).
async fn list(client: &Client, parent: &str) -> ZkResult<Vec<String>> {
    loop {
        match client.list_children(parent).await {
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(ZkError::ConnectionLoss) => continue,
            other => return other,
        }
    }
}

/// The holder of the lock whose parent is `parent`: the first in line.
async fn holder(client: &Client, parent: &str) -> ZkResult<Option<Child>> {
    Ok(queue(&list(client, parent).await?).into_iter().next())
}

/// A node's data (`None` inside if it is not lockkit's), czxid and data
/// version; `None` if the node does not exist.
async fn read(client: &Client, path: &str) -> ZkResult<Option<(Option<NodeData>, i64, i32)>> {
    loop {
        match client.get_data(path).await {
            Ok((data, stat)) => return Ok(Some((NodeData::decode(&data), stat.czxid, stat.version))),
            Err(ZkError::NoNode) => return Ok(None),
            Err(ZkError::ConnectionLoss) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Lists the parent again, noting the connection epoch first.
async fn refresh(session: &Session, q: &mut Queued) -> ZkResult<()> {
    q.epoch = session.epoch();
    q.queue = queue(&list(&session.client, &q.parent).await?);
    Ok(())
}

/// Creates this contender's node (and the parent, if needed) and lists the
/// parent in the same round trip. A create whose answer was lost with the
/// connection is found again by its random attempt id.
async fn enqueue(session: &Session, parent: &str, owner: &str, tag: u64) -> ZkResult<Queued> {
    let attempt = rand::random::<u64>();
    let prefix = child_prefix(parent, tag, attempt);
    let stem = child_stem(tag, attempt);
    let data = NodeData::encode(owner, 1);
    let client = &session.client;
    loop {
        let epoch = session.epoch();
        // Sent now, answered in order: the listing includes our node.
        let create = client.create(&prefix, &data, &CONTENDER);
        let listing = client.list_children(parent);
        let (name, czxid) = match create.await {
            Ok((stat, seq)) => (format!("{stem}{seq}"), stat.czxid),
            Err(ZkError::NoNode) => match client.create(parent, &[], &PARENT).await {
                Ok(_) | Err(ZkError::NodeExists | ZkError::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            },
            Err(ZkError::ConnectionLoss) => {
                let children = list(client, parent).await?;
                let Some(name) = children.into_iter().find(|c| c.starts_with(&stem)) else {
                    continue;
                };
                match read(client, &format!("{parent}/{name}")).await? {
                    Some((_, czxid, _)) => (name, czxid),
                    None => continue,
                }
            }
            Err(e) => return Err(e),
        };
        let children = match listing.await {
            Ok(children) => children,
            Err(_) => list(client, parent).await?,
        };
        let me = Child::parse(&name).ok_or_else(|| ZkError::UnexpectedError(format!("created node {name}")))?;
        return Ok(Queued {
            parent: parent.to_owned(),
            path: me.path(parent),
            me,
            czxid,
            queue: queue(&children),
            epoch,
        });
    }
}

/// A node's data as last known: skips the read before a versioned write.
#[derive(Debug, Clone, Copy)]
struct Known {
    count: u32,
    version: i32,
    czxid: i64,
}

/// A hold count after a change; `version` is `None` once the node is deleted.
#[derive(Debug, Clone, Copy)]
struct Changed {
    count: u32,
    version: Option<i32>,
    czxid: i64,
}

impl Changed {
    /// A contender's own node, as created: count 1, data version 0.
    fn created(czxid: i64) -> Self {
        Changed {
            count: 1,
            version: Some(0),
            czxid,
        }
    }
}

/// Changes the hold count in the node at `path` by `delta`, deleting the
/// node at zero — only if `owner` holds it (and, with `token`, under that
/// creation zxid). Every write is versioned and retried on a version
/// conflict. `None`: not held that way (or the node is gone).
///
/// A write whose answer was lost with the connection is recognised on the
/// next read: the node gone after a delete, or the data version one up with
/// the count we wrote.
async fn change_count(
    client: &Client,
    path: &str,
    owner: &str,
    token: Option<i64>,
    mut known: Option<Known>,
    delta: i32,
) -> ZkResult<Option<Changed>> {
    enum Lost {
        Delete,
        Set { count: u32, version: i32 },
    }
    let mut lost: Option<Lost> = None;
    loop {
        let current = match known.take() {
            Some(k) => k,
            None => match client.get_data(path).await {
                Ok((data, stat)) => {
                    let data = NodeData::decode(&data);
                    let mine = data.as_ref().is_some_and(|d| d.owner == owner) && token.is_none_or(|t| t == stat.czxid);
                    let Some(data) = data.filter(|_| mine) else {
                        return Ok(None);
                    };
                    if let Some(Lost::Set { count, version }) = lost.take()
                        && stat.version == version
                        && data.count == count
                    {
                        return Ok(Some(Changed {
                            count,
                            version: Some(version),
                            czxid: stat.czxid,
                        }));
                    }
                    Known {
                        count: data.count,
                        version: stat.version,
                        czxid: stat.czxid,
                    }
                }
                Err(ZkError::NoNode) => {
                    return Ok(match lost {
                        Some(Lost::Delete) => Some(Changed {
                            count: 0,
                            version: None,
                            czxid: token.unwrap_or_default(),
                        }),
                        _ => None,
                    });
                }
                Err(ZkError::ConnectionLoss) => continue,
                Err(e) => return Err(e),
            },
        };
        let next = i64::from(current.count) + i64::from(delta);
        let result = if next <= 0 {
            client.delete(path, Some(current.version)).await.map(|()| Changed {
                count: 0,
                version: None,
                czxid: current.czxid,
            })
        } else {
            let count = u32::try_from(next).unwrap_or(u32::MAX);
            client
                .set_data(path, &NodeData::encode(owner, count), Some(current.version))
                .await
                .map(|stat| Changed {
                    count,
                    version: Some(stat.version),
                    czxid: current.czxid,
                })
        };
        match result {
            Ok(changed) => return Ok(Some(changed)),
            Err(ZkError::BadVersion) => {}
            Err(ZkError::NoNode) => return Ok(None),
            Err(ZkError::ConnectionLoss) => {
                lost = Some(if next <= 0 {
                    Lost::Delete
                } else {
                    Lost::Set {
                        count: u32::try_from(next).unwrap_or(u32::MAX),
                        version: current.version.wrapping_add(1),
                    }
                });
            }
            Err(e) => return Err(e),
        }
    }
}

/// Takes a contender's node out of the queue: deleted, or (if it became the
/// holder and a peer of the same owner re-entered it meanwhile) its count
/// decremented.
async fn remove_node(session: Arc<Session>, path: String, owner: String, czxid: i64) {
    if session.is_dead() {
        return;
    }
    let queued = Known {
        count: 1,
        version: 0,
        czxid,
    };
    if let Err(error) = change_count(&session.client, &path, &owner, Some(czxid), Some(queued), -1).await {
        tracing::debug!(backend = BACKEND, node = %path, %error, "could not delete a queued node; it goes with the session");
    }
}

/// A queued node to take out of the queue unless the acquisition took the
/// lock with it: at once on a give-up, in the background when the waiting
/// future is dropped.
struct Cleanup {
    session: Arc<Session>,
    path: String,
    owner: String,
    czxid: i64,
    armed: bool,
}

impl Cleanup {
    fn new(session: &Arc<Session>, q: &Queued, owner: &str) -> Self {
        Cleanup {
            session: session.clone(),
            path: q.path.clone(),
            owner: owner.to_owned(),
            czxid: q.czxid,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    async fn run(mut self) {
        self.armed = false;
        remove_node(
            self.session.clone(),
            std::mem::take(&mut self.path),
            std::mem::take(&mut self.owner),
            self.czxid,
        )
        .await;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let work = remove_node(
            self.session.clone(),
            std::mem::take(&mut self.path),
            std::mem::take(&mut self.owner),
            self.czxid,
        );
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(work);
            }
            Err(_) => tracing::debug!(
                backend = BACKEND,
                "no runtime to delete a queued node; it goes with the session"
            ),
        }
    }
}
