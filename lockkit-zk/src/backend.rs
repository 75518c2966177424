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
//! * or watches its direct predecessor only (a get-data watch) and lists the
//!   parent again when that one goes — it may have given up rather than
//!   released, so the contender may have a new predecessor rather than the
//!   lock. One release wakes one waiter, in queue order.
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
//! Every change is idempotent by attempt id (contract point 13): an attempt
//! already recorded is not added again, a release whose attempt is gone
//! changes nothing and reports the holds left, and a write whose answer was
//! lost with the connection is recognised on the next read by its attempt id
//! (a create by its name, after a `sync` so that the server read from has
//! applied what the leader did).
//!
//! An acquisition that fails or is given up takes back whatever it may have
//! made (contract point 4): its contender node — found by the attempt id in
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
use lockkit_core::name::is_attempt_id;
use lockkit_core::url::{ConnectUrl, Scheme};
use lockkit_core::{LockError, detach};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Error as ZkError, EventType, MultiWriteError, MultiWriteResult};

use crate::change::{Change, Known, change};
use crate::config::ZkConfig;
use crate::conn::{Counters, Session, Sessions};
use crate::error::{BACKEND, ForeignNode, is_connection_loss, is_session_end, zk};
use crate::hold::{DeleteError, View, count_after, delete_hold, hold_of, list_held};
use crate::layout::{NodeData, Share, owner_tag, parent_path, queue, share_name};
use crate::leftover::{Cleanup, Leftover, Orphan};
use crate::queue::{Plan, Queued, ZkResult, enqueue, list, plan, read, refresh, sync};

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
    sessions: Arc<Sessions>,
    counters: Arc<Counters>,
    /// This backend's own node of each hold it has, by lock name: where it
    /// is and what its data was after our last write, so release and
    /// re-entry skip a read. A stale entry only costs a failed versioned
    /// write.
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
    /// This session's node of the hold: its contender node, or its share
    /// node of a hold another session's node carries too.
    path: String,
    owner: String,
    /// The hold's fencing token.
    token: i64,
    known: Known,
    session: i64,
    /// No other node carried the hold as of our last write: our node is
    /// its contender node and no share node was seen. A session joining
    /// the hold later bumps our node's version, so our next write notices.
    alone: bool,
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
            sessions: Arc::new(Sessions::new(config, counters.clone())),
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
        // Zxids keep growing across restarts and leader changes. The queue
        // of sequential nodes is FIFO whatever the request's `fair` says.
        Capabilities::session(true)
            .with_admin()
            .with_idempotent_attempts()
            .with_fair()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        let (inner, name, owner, attempt) = (
            self.inner.clone(),
            req.name.to_owned(),
            req.owner.to_owned(),
            req.attempt.to_owned(),
        );
        let orphan = (self.inner.clone(), name.clone(), owner.clone(), attempt.clone());
        detach(
            BACKEND,
            async move { inner.try_acquire(&name, &owner, &attempt).await },
            move |r| async move {
                if let Ok(TryAcquire::Acquired(lease)) = r {
                    let (inner, name, owner, attempt) = orphan;
                    inner.release_orphan(name, owner, lease.token, attempt).await;
                }
            },
        )
        .await?
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| Instant::now() + w);
        self.inner.acquire(req.name, req.owner, req.attempt, deadline).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        self.inner.release(hold, attempt).await
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

    async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        // Every contender node but the first (the holder's) waits.
        Ok(self.contenders(name).await?.saturating_sub(1))
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.inner.force_release(name).await
    }
}

/// An acquisition carried on from a session that ended, until it queues
/// in a new one: if it ends first (its wait runs out or fails while a new
/// session is made, or the caller drops it), whatever it left in the ended
/// session — which the server may keep a while — goes to the backend's next
/// session to take back (see `Leftover::orphaned`).
struct CarriedOn(Option<(Arc<Session>, Orphan)>);

impl Drop for CarriedOn {
    fn drop(&mut self) {
        if let Some((session, orphan)) = self.0.take() {
            session.orphan(orphan);
        }
    }
}

/// How a wait in one session ended.
enum Waited {
    Acquired(Lease),
    TimedOut,
    /// The session ended (or the node vanished): start over in a new one.
    Restart,
}

/// How joining the hold of this owner ended.
enum Joined {
    /// Joined, with this session's node of the hold at this path.
    Lease(Lease, String),
    /// The hold's nodes carry this owner's tag but another owner's data:
    /// these nodes are not this owner's.
    Foreign(Vec<String>),
    /// The hold changed meanwhile: plan again on a new listing.
    Again,
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
    // With the acquisition's clean-up: an error takes its node (and any
    // share it may have made) back before it is returned. A session that
    // ended disarms it: the call carries on with the same attempt in a new
    // session, where the old session's node (which the server may keep a
    // while) is taken back as one of the attempt's earlier nodes — a
    // clean-up handed to the new session now could take the carried-on
    // attempt's new node for a leftover.
    ($session:expr, $name:expr, $restart:expr, $e:expr, $cleanup:ident) => {
        match $e {
            Ok(v) => v,
            Err(e) if is_session_end(&e) => {
                $session.end(&e);
                $cleanup.disarm();
                return Ok($restart);
            }
            Err(e) => {
                $cleanup.run().await;
                return Err(zk("acquire", Some($name), e));
            }
        }
    };
}

/// The last segment of a node's path.
fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

/// Refuses an attempt id that lockkit-core did not make: it is part of node
/// names and data.
fn check_attempt(attempt: &str) -> Result<(), LockError> {
    if is_attempt_id(attempt) {
        Ok(())
    } else {
        Err(LockError::config(
            "attempt",
            format!("{attempt:?} is not an attempt id (16 lowercase hex digits, lockkit_core::name::new_attempt_id)"),
        ))
    }
}

impl Inner {
    fn held(&self) -> MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records this session's node of a hold after our write (`known`
    /// `None`: deleted).
    fn remember(&self, name: &str, path: &str, owner: &str, known: Option<Known>, session: i64, alone: bool) {
        let mut held = self.held();
        if held.session != session && self.sessions.peek().is_some_and(|s| s.id == session) {
            // The nodes of an ended session went with it.
            held.nodes.retain(|_, h| h.session == session);
            held.session = session;
        }
        match known {
            Some(known) => {
                held.nodes.insert(
                    name.to_owned(),
                    HeldNode {
                        path: path.to_owned(),
                        owner: owner.to_owned(),
                        token: known.token(),
                        known,
                        session,
                        alone,
                    },
                );
            }
            None => {
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

    /// A lease on the hold this session's node at `path` (as `node` now)
    /// is part of; `count`: the hold count over all the hold's nodes.
    #[allow(clippy::too_many_arguments)]
    fn lease(
        &self,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        path: &str,
        node: Known,
        count: u32,
        epoch: &CancellationToken,
    ) -> Lease {
        let (token, czxid) = (node.token(), node.czxid);
        // Alone: a contender node that carries the whole count.
        let alone = Share::parse(node_name(path)).is_none() && count == node.data.count();
        self.remember(name, path, owner, Some(node), session.id, alone);
        Lease {
            token: token as u64,
            hold_count: count,
            valid_until: None,
            lost: Some(session.lease_token(path, czxid, epoch)),
            session_deadline: Some(session.deadline.clone()),
        }
    }

    /// Re-entry of a hold this backend already has a node of for `owner`:
    /// one versioned write (with a listing pipelined behind it).
    async fn reenter_cached(&self, name: &str, owner: &str, attempt: &str) -> Result<Option<Lease>, LockError> {
        let Some(h) = self.held().nodes.get(name).filter(|h| h.owner == owner).cloned() else {
            return Ok(None);
        };
        let Some(session) = self.sessions.peek().filter(|s| s.id == h.session) else {
            self.forget(name, &h.path);
            return Ok(None);
        };
        let epoch = session.epoch();
        let parent = parent_path(name);
        let client = &session.client;
        let reentered = async {
            // Alone, the node's own count is the hold's unless somebody
            // wrote it meanwhile: no listing needed.
            let list_after = (!h.alone).then_some(parent.as_str());
            let (changed, listing) = change(
                client,
                &h.path,
                owner,
                Some(h.token),
                Some(h.known.clone()),
                Change::Add(attempt),
                list_after,
            )
            .await?;
            let Some(changed) = changed else {
                return Ok(None);
            };
            let raced = changed.raced;
            let Some(node) = changed.known() else {
                return Ok(None);
            };
            let count = if h.alone && !raced {
                node.data.count()
            } else {
                let own = Some(&node.data);
                count_after(client, &parent, node_name(&h.path), own, owner, h.token, listing)
                    .await?
                    .count
            };
            Ok(Some((node, count)))
        };
        match reentered.await {
            Ok(Some((node, count))) => Ok(Some(self.lease(&session, name, owner, &h.path, node, count, &epoch))),
            Ok(None) => {
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) if is_session_end(&e) => {
                session.end(&e);
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) => {
                // The share may have been added all the same.
                Leftover::unknown_share(&session, &parent, owner, attempt)
                    .take_back_now()
                    .await;
                Err(zk("acquire", Some(name), e))
            }
        }
    }

    /// Joins the hold of `owner` on `name` with `attempt`'s share: in this
    /// session's node of the hold if it has one (a versioned write), or else
    /// in a new share node of this session, created in one `multi` with a
    /// check that a node of the hold still stands — so the share never
    /// outlives the hold it joins without carrying it on.
    async fn join(
        &self,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        attempt: &str,
        parent: &str,
    ) -> ZkResult<Joined> {
        let client = &session.client;
        loop {
            let epoch = session.epoch();
            let view = match hold_of(client, parent).await? {
                View::Held(view) => view,
                View::Foreign(path) => return Ok(Joined::Foreign(vec![node_name(&path).to_owned()])),
                View::Free => return Ok(Joined::Again),
            };
            if view.owner != owner {
                return Ok(Joined::Foreign(view.nodes.iter().map(|n| n.name.clone()).collect()));
            }
            if let Some(own) = view.nodes.iter().find(|n| n.session == session.id) {
                let (changed, listing) = change(
                    client,
                    &own.path,
                    owner,
                    Some(view.token),
                    Some(own.known.clone()),
                    Change::Add(attempt),
                    Some(parent),
                )
                .await?;
                let Some(node) = changed.and_then(|c| c.known()) else {
                    continue;
                };
                let own_data = Some(&node.data);
                let after = count_after(client, parent, &own.name, own_data, owner, view.token, listing).await?;
                let count = after.count;
                let lease = self.lease(session, name, owner, &own.path, node, count, &epoch);
                return Ok(Joined::Lease(lease, own.path.clone()));
            }
            let path = format!("{parent}/{}", share_name(owner_tag(owner), session.id));
            let data = NodeData {
                owner: owner.to_owned(),
                token: Some(view.token),
                attempts: vec![attempt.to_owned()],
            };
            // The write to a node of the hold (its data as it is, under its
            // version) makes sure that node stands, and bumps its version:
            // its holder's next versioned write notices that the hold has
            // another node now (see `HeldNode::alone`).
            let checked = &view.nodes[0];
            // And this session's marker stands (see `conn::SESSIONS`).
            let mut multi = client.new_multi_writer();
            let fenced = session.marker.is_some();
            if let Some(marker) = &session.marker {
                multi.add_check_version(marker, -1)?;
            }
            multi.add_set_data(&checked.path, &checked.known.data.encode(), Some(checked.known.version))?;
            multi.add_create(&path, &data.encode(), &session.share_options())?;
            match multi.commit().await {
                Ok(results) => {
                    let czxid = match results.last() {
                        Some(MultiWriteResult::Create { stat, .. }) if !stat.is_invalid() => stat.czxid,
                        // Some servers answer a create in a multi without its stat.
                        _ => match read(client, &path).await? {
                            Some((_, stat)) => stat.czxid,
                            None => continue,
                        },
                    };
                    let count = view.count_with(node_name(&path), Some(&data));
                    let node = Known {
                        data,
                        version: 0,
                        czxid,
                    };
                    let lease = self.lease(session, name, owner, &path, node, count, &epoch);
                    return Ok(Joined::Lease(lease, path));
                }
                // The marker is gone: this backend has moved on to a new
                // session.
                Err(MultiWriteError::OperationFailed { index: 0, .. }) if fenced => {
                    return Err(ZkError::SessionExpired);
                }
                // The checked node went or changed (look at the hold again),
                // or this session's share node exists already (a concurrent
                // attempt of this session made it: join that one).
                Err(MultiWriteError::OperationFailed {
                    source: ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion,
                    ..
                }) => {}
                Err(e) => match ZkError::from(e) {
                    // Made or not: the next reading says, once the server
                    // read from has caught up.
                    e if is_connection_loss(&e) => sync(client, parent).await?,
                    e => return Err(e),
                },
            }
        }
    }

    async fn try_acquire(self: &Arc<Self>, name: &str, owner: &str, attempt: &str) -> Result<TryAcquire, LockError> {
        check_attempt(attempt)?;
        // While suspended, requests wait for the reconnection: a try that
        // must not wait says so instead.
        if self.sessions.peek().is_some_and(|s| s.epoch().is_cancelled()) {
            return Err(zk("acquire", Some(name), ZkError::ConnectionLoss));
        }
        if let Some(lease) = self.reenter_cached(name, owner, attempt).await? {
            return Ok(TryAcquire::Acquired(lease));
        }
        let mut carried = CarriedOn(None);
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            carried.0 = None;
            if let Some(outcome) = self.try_in_session(&session, name, owner, attempt).await? {
                return Ok(outcome);
            }
            carried.0 = Some((session, Orphan::new(&parent_path(name), owner, attempt)));
        }
        Err(session_kept_ending("acquire", name))
    }

    /// One try in one session; `None`: the session ended, start over.
    async fn try_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        attempt: &str,
    ) -> Result<Option<TryAcquire>, LockError> {
        let tag = owner_tag(owner);
        let parent = parent_path(name);
        let mut q = match enqueue(session, &parent, owner, tag, attempt).await {
            Ok(q) => q,
            Err(e) if is_session_end(&e) => {
                session.end(&e);
                return Ok(None);
            }
            Err(e) => {
                // The server may have made the node all the same.
                Leftover::unknown_node(session, &parent, owner, attempt)
                    .take_back_now()
                    .await;
                return Err(zk("acquire", Some(name), e));
            }
        };
        let mut cleanup = Cleanup::new(session, &q, owner, attempt);
        let mut foreign = Vec::new();
        loop {
            match plan(&q, tag, &foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(None);
                }
                Plan::Holder if q.epoch.is_cancelled() => {
                    step!(session, name, None, refresh(session, &mut q).await, cleanup);
                }
                Plan::Holder => {
                    cleanup.disarm();
                    let count = q.node.data.count();
                    let lease = self.lease(session, name, owner, &q.path, q.node.clone(), count, &q.epoch);
                    return Ok(Some(TryAcquire::Acquired(lease)));
                }
                Plan::Join => match step!(
                    session,
                    name,
                    None,
                    self.join(session, name, owner, attempt, &parent)
                        .await
                        .inspect_err(|_| cleanup.join_failed()),
                    cleanup
                ) {
                    Joined::Lease(lease, path) => {
                        if path == q.path {
                            cleanup.disarm();
                        } else {
                            cleanup.run().await;
                        }
                        return Ok(Some(TryAcquire::Acquired(lease)));
                    }
                    Joined::Foreign(nodes) => {
                        foreign.extend(nodes);
                        step!(session, name, None, refresh(session, &mut q).await, cleanup);
                    }
                    Joined::Again => step!(session, name, None, refresh(session, &mut q).await, cleanup),
                },
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
        attempt: &str,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, LockError> {
        check_attempt(attempt)?;
        if self.holds(name, owner) {
            let (inner, n, o, a) = (self.clone(), name.to_owned(), owner.to_owned(), attempt.to_owned());
            let orphan = (self.clone(), name.to_owned(), owner.to_owned(), attempt.to_owned());
            let cached = detach(
                BACKEND,
                async move { inner.reenter_cached(&n, &o, &a).await },
                move |r| async move {
                    if let Ok(Some(lease)) = r {
                        let (inner, name, owner, attempt) = orphan;
                        inner.release_orphan(name, owner, lease.token, attempt).await;
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
        let mut carried = CarriedOn(None);
        loop {
            let Some(session) = until(deadline, self.sessions.get()).await else {
                if let Some((ended, orphan)) = carried.0.take() {
                    Leftover::orphaned(&ended, orphan).in_next_session().await;
                }
                return Ok(None);
            };
            let session = session?;
            // Queued again: the new session's clean-up covers the attempt's
            // earlier nodes (see `Leftover::queued`).
            carried.0 = None;
            match self.wait_in_session(&session, name, owner, attempt, deadline).await? {
                Waited::Acquired(lease) => return Ok(Some(lease)),
                Waited::TimedOut => return Ok(None),
                Waited::Restart => {
                    restarts += 1;
                    carried.0 = Some((session, Orphan::new(&parent_path(name), owner, attempt)));
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
        attempt: &str,
        deadline: Option<Instant>,
    ) -> Result<Waited, LockError> {
        let tag = owner_tag(owner);
        let parent = parent_path(name);
        let (s, p, o, a) = (session.clone(), parent.clone(), owner.to_owned(), attempt.to_owned());
        let orphan = (session.clone(), parent.clone(), owner.to_owned(), attempt.to_owned());
        let queued = detach(
            BACKEND,
            async move { enqueue(&s, &p, &o, tag, &a).await },
            move |r| async move {
                let (session, parent, owner, attempt) = orphan;
                match r {
                    Ok(q) => {
                        Leftover::queued(&session, &q, &owner, &attempt)
                            .take_back_retrying()
                            .await
                    }
                    Err(e) if is_session_end(&e) => {}
                    // The server may have made the node all the same.
                    Err(_) => {
                        Leftover::unknown_node(&session, &parent, &owner, &attempt)
                            .take_back_retrying()
                            .await
                    }
                }
            },
        );
        let mut queued = std::pin::pin!(queued);
        let Some(queued) = until(deadline, queued.as_mut()).await else {
            // The wait ran out while the node was being made: it may stand
            // (or come) all the same. It is taken back before the call
            // returns, as after a wait (see `give_up`).
            return Ok(queued_too_late(session, &parent, owner, attempt, queued).await);
        };
        let mut q = match queued? {
            Ok(q) => q,
            Err(e) if is_session_end(&e) => {
                session.end(&e);
                return Ok(Waited::Restart);
            }
            Err(e) => {
                // The server may have made the node all the same.
                Leftover::unknown_node(session, &parent, owner, attempt)
                    .take_back_now()
                    .await;
                return Err(zk("acquire", Some(name), e));
            }
        };
        let mut cleanup = Cleanup::new(session, &q, owner, attempt);
        let mut foreign = Vec::new();
        // A network step, bounded by the deadline; a session that ended means
        // start over.
        macro_rules! bounded {
            ($e:expr) => {
                match until(deadline, $e).await {
                    Some(r) => step!(session, name, Waited::Restart, r, cleanup),
                    None => return Ok(give_up(cleanup).await),
                }
            };
        }
        loop {
            match plan(&q, tag, &foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(Waited::Restart);
                }
                Plan::Holder if q.epoch.is_cancelled() => bounded!(refresh(session, &mut q)),
                Plan::Holder => {
                    cleanup.disarm();
                    let count = q.node.data.count();
                    let lease = self.lease(session, name, owner, &q.path, q.node.clone(), count, &q.epoch);
                    return Ok(Waited::Acquired(lease));
                }
                Plan::Join => {
                    let (inner, s, n, o, a, p) = (
                        self.clone(),
                        session.clone(),
                        name.to_owned(),
                        owner.to_owned(),
                        attempt.to_owned(),
                        parent.clone(),
                    );
                    let orphan = (
                        self.clone(),
                        session.clone(),
                        name.to_owned(),
                        owner.to_owned(),
                        attempt.to_owned(),
                    );
                    let joined = detach(
                        BACKEND,
                        async move { inner.join(&s, &n, &o, &a, &p).await },
                        move |r| async move {
                            let (inner, session, name, owner, attempt) = orphan;
                            match r {
                                Ok(Joined::Lease(lease, _)) => {
                                    inner.release_orphan(name, owner, lease.token, attempt).await;
                                }
                                Ok(_) => {}
                                Err(e) if is_session_end(&e) => {}
                                // The share may have been made all the same.
                                Err(_) => {
                                    Leftover::unknown_share(&session, &parent_path(&name), &owner, &attempt)
                                        .take_back_retrying()
                                        .await
                                }
                            }
                        },
                    );
                    let Some(joined) = until(deadline, joined).await else {
                        return Ok(give_up(cleanup).await);
                    };
                    let joined = joined?.inspect_err(|_| cleanup.join_failed());
                    match step!(session, name, Waited::Restart, joined, cleanup) {
                        Joined::Lease(lease, path) => {
                            if path == q.path {
                                cleanup.disarm();
                            } else {
                                cleanup.run().await;
                            }
                            return Ok(Waited::Acquired(lease));
                        }
                        Joined::Foreign(nodes) => {
                            foreign.extend(nodes);
                            bounded!(refresh(session, &mut q));
                        }
                        Joined::Again => bounded!(refresh(session, &mut q)),
                    }
                }
                Plan::Wait(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(give_up(cleanup).await);
                }
                Plan::Wait(node) => {
                    Counters::bump(&self.counters.watches);
                    let path = format!("{}/{node}", q.parent);
                    let armed = until(deadline, session.client.get_and_watch_data(&path)).await;
                    match armed {
                        None => return Ok(give_up(cleanup).await),
                        Some(Ok((_, _, watcher))) => {
                            tokio::select! {
                                event = watcher.changed() => {
                                    Counters::bump(&self.counters.wakeups);
                                    tracing::trace!(backend = BACKEND, lock = %name, ?event, "woken by the node waited for");
                                    if event.event_type == EventType::Session && event.session_state.is_terminated() {
                                        session.end(event.session_state);
                                        cleanup.disarm();
                                        return Ok(Waited::Restart);
                                    }
                                }
                                _ = sleep_until(deadline) => return Ok(give_up(cleanup).await),
                                _ = session.ended() => {
                                    cleanup.disarm();
                                    return Ok(Waited::Restart);
                                }
                            }
                        }
                        // Gone already, or the answer was lost: look again.
                        Some(Err(e)) if e == ZkError::NoNode || is_connection_loss(&e) => {}
                        Some(Err(e)) => step!(session, name, Waited::Restart, Err::<(), _>(e), cleanup),
                    }
                    bounded!(refresh(session, &mut q));
                }
            }
        }
    }

    /// Releases a hold whose acquirer stopped waiting for it.
    async fn release_orphan(&self, name: String, owner: String, token: u64, attempt: String) {
        let hold = Hold { name, owner, token };
        match self.release(&hold, &attempt).await {
            Ok(outcome) => {
                tracing::debug!(backend = BACKEND, lock = %hold.name, ?outcome, "released an abandoned acquisition")
            }
            Err(error) => {
                tracing::warn!(backend = BACKEND, lock = %hold.name, %error, "could not release an abandoned acquisition; it ends with the session")
            }
        }
    }

    /// This session's node of `hold` as last written, if any.
    fn cached(&self, session: &Session, hold: &Hold, token: i64) -> Option<HeldNode> {
        self.held()
            .nodes
            .get(&hold.name)
            .filter(|h| h.owner == hold.owner && h.token == token && h.session == session.id)
            .cloned()
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match self.release_in(&session, hold, token, attempt).await {
                Ok(outcome) => return Ok(outcome),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("release", Some(&hold.name), e)),
            }
        }
        Err(session_kept_ending("release", &hold.name))
    }

    /// Takes `attempt`'s share of `hold` back: from this session's node as
    /// last written (one round trip, the listing that tells whether other
    /// nodes carry the hold pipelined behind the write), or from whichever
    /// node of the hold carries it — and from every other node that carries
    /// it too (an attempt carried on in a new session, see
    /// [`HoldView::count`](crate::hold::HoldView::count)). A share already
    /// gone (a repeated release) changes nothing; the holds left are
    /// reported again.
    async fn release_in(&self, session: &Session, hold: &Hold, token: i64, attempt: &str) -> ZkResult<ReleaseOutcome> {
        let client = &session.client;
        let parent = parent_path(&hold.name);
        let mut next = self
            .cached(session, hold, token)
            .filter(|h| h.known.data.has(attempt))
            .map(|h| (h.path, h.known, true, h.alone));
        let mut took = false;
        loop {
            let (path, known, mine, alone) = match next.take() {
                Some(node) => node,
                None => match hold_of(client, &parent).await? {
                    View::Held(view) if view.owner == hold.owner && view.token == token => {
                        match view.nodes.iter().find(|n| n.known.data.has(attempt)) {
                            Some(n) => (n.path.clone(), n.known.clone(), n.session == session.id, false),
                            None => {
                                return Ok(ReleaseOutcome::Released {
                                    remaining: view.count(),
                                });
                            }
                        }
                    }
                    _ if took => return Ok(ReleaseOutcome::Released { remaining: 0 }),
                    _ => return Ok(ReleaseOutcome::NotHeld),
                },
            };
            // Alone (the common case), the release is the versioned write
            // alone: nobody wrote the node since, so no other node carries
            // the hold. Otherwise a listing behind it tells.
            let list_after = (!alone).then_some(parent.as_str());
            let (changed, listing) = change(
                client,
                &path,
                &hold.owner,
                Some(token),
                Some(known),
                Change::Remove(attempt),
                list_after,
            )
            .await?;
            let Some(changed) = changed else {
                // That node is gone: the hold may stand on others.
                self.forget(&hold.name, &path);
                continue;
            };
            took = true;
            if changed.node.is_none() {
                session.released(&path);
            }
            let own = changed.count();
            let (remaining, view) = if alone && !changed.raced {
                (own, None)
            } else {
                let own_data = changed.node.as_ref().map(|(data, _)| data);
                let after =
                    count_after(client, &parent, node_name(&path), own_data, &hold.owner, token, listing).await?;
                (after.count, after.view)
            };
            if mine {
                let alone = Share::parse(node_name(&path)).is_none() && remaining == own;
                self.remember(&hold.name, &path, &hold.owner, changed.known(), session.id, alone);
            }
            let also = view.and_then(|v| {
                v.nodes
                    .into_iter()
                    .find(|n| n.path != path && n.known.data.has(attempt))
            });
            if let Some(n) = also {
                next = Some((n.path, n.known, n.session == session.id, false));
                continue;
            }
            return Ok(ReleaseOutcome::Released { remaining });
        }
    }

    async fn extend(&self, hold: &Hold) -> Result<ExtendOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ExtendOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let parent = parent_path(&hold.name);
            // The lease rests on this session's node of the hold.
            let checked = async {
                if let Some(h) = self.cached(&session, hold, token)
                    && let Some((Some(data), stat)) = read(&session.client, &h.path).await?
                    && data.owner == hold.owner
                    && data.hold_token(stat.czxid) == token
                {
                    return Ok(true);
                }
                Ok::<_, ZkError>(match hold_of(&session.client, &parent).await? {
                    View::Held(view) => {
                        view.owner == hold.owner
                            && view.token == token
                            && view.nodes.iter().any(|n| n.session == session.id)
                    }
                    _ => false,
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
            match hold_of(&session.client, &parent).await {
                Ok(View::Free) => return Ok(None),
                Ok(View::Held(view)) => return Ok(Some(view.info(name))),
                Ok(View::Foreign(path)) => {
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
                Err(e) if is_connection_loss(&e) => {}
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
            match delete_hold(&session, name).await {
                Ok(Some((paths, info))) => {
                    for path in &paths {
                        self.forget(name, path);
                    }
                    tracing::warn!(backend = BACKEND, lock = %name, owner = %info.owner, token = info.token, nodes = paths.len(), "lock force-released");
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

/// Leaves the queue after the wait ran out while the node was being made:
/// waits for the create's answer, for up to a session timeout, then takes
/// the node back as [`give_up`] does. A create still unanswered by then
/// goes on in the background, and its detached clean-up takes the node
/// back. Before, the call returned at once and left that clean-up to a
/// slow connection: the node came after the call returned and stood first
/// in the queue as a hold the owner's other processes joined.
async fn queued_too_late<F>(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str, queued: F) -> Waited
where
    F: Future<Output = Result<ZkResult<Queued>, LockError>>,
{
    match tokio::time::timeout(session.client.session_timeout(), queued).await {
        Ok(Ok(Ok(q))) => Cleanup::new(session, &q, owner, attempt).run().await,
        Ok(Ok(Err(e))) if is_session_end(&e) => {}
        Ok(Ok(Err(_))) => {
            Leftover::unknown_node(session, parent, owner, attempt)
                .take_back_now()
                .await
        }
        Ok(Err(_)) | Err(_) => {}
    }
    Waited::TimedOut
}

/// Leaves the queue after the wait ran out: at once while connected (so no
/// node is left when `lock` returns; a connection that stopped answering
/// gets a quarter second, then the rest goes on in the background), in the
/// background while the connection is suspended (its requests would wait
/// for the reconnection), and in the backend's next session if this one
/// ended: at once if one can be had within a quarter second (see
/// `Leftover::in_next_session`), else when the next one is made.
async fn give_up(cleanup: Cleanup) -> Waited {
    cleanup.run().await;
    Waited::TimedOut
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
