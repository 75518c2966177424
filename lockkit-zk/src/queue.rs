//! The contender queue of one lock name on ZooKeeper primitives: joining
//! it, reading it and the hold it carries, changing the shares a node
//! carries, and the operator's listing and forced release.

use std::collections::BTreeSet;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::LockInfo;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult, Stat};

use crate::conn::Session;
use crate::conn::reconnect::Reconnect;
use crate::error::{BACKEND, is_connection_loss, is_session_end};
use crate::layout::{
    Child, NodeData, Share, child_prefix, child_stem, decode_name, owner_tag, parent_path, queue, shares,
};

pub(crate) type ZkResult<T> = Result<T, ZkError>;

/// A contender's node, and the queue as last listed.
pub(crate) struct Queued {
    pub(crate) parent: String,
    pub(crate) me: Child,
    pub(crate) path: String,
    /// The contender node as created (or found again after a lost create).
    pub(crate) node: Known,
    pub(crate) queue: Vec<Child>,
    /// The share nodes of the last listing.
    pub(crate) shares: Vec<Share>,
    /// The connection epoch the listing was made in.
    pub(crate) epoch: CancellationToken,
}

/// What a contender does next, from the last listing.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Its node is gone (session ended, or deleted by somebody).
    Gone,
    /// It is first and no share node of another owner stands: it holds the
    /// lock.
    Holder,
    /// The hold carries this owner's tag: join it (re-entry).
    Join,
    /// Wait for the node of this name to go (or change).
    Wait(String),
}

/// The next step of the contender `q` whose owner has `tag`; `foreign`:
/// nodes whose name carries the tag but whose data names another owner.
///
/// A hold is the first contender's, or — once that one is gone — the share
/// nodes' that outlived it: the first contender holds the lock only when no
/// share node of another owner is left.
pub(crate) fn plan(q: &Queued, tag: u64, foreign: &[String]) -> Plan {
    let Some(me) = q.queue.iter().position(|c| c.seq == q.me.seq && c.name == q.me.name) else {
        return Plan::Gone;
    };
    let ours = |name: &String, t: u64| t == tag && !foreign.contains(name);
    if q.shares.iter().any(|s| ours(&s.name, s.owner_tag)) {
        return Plan::Join;
    }
    if let Some(share) = q.shares.first() {
        // Another owner's hold stands on its share nodes. The first
        // contender (or this owner's node, if it is first) waits for them.
        return match q.queue[..me].iter().position(|c| ours(&c.name, c.owner_tag)) {
            None if me == 0 => Plan::Wait(share.name.clone()),
            Some(0) => Plan::Wait(share.name.clone()),
            Some(i) => Plan::Wait(q.queue[i - 1].name.clone()),
            None => Plan::Wait(q.queue[me - 1].name.clone()),
        };
    }
    if me == 0 {
        return Plan::Holder;
    }
    let lowest = &q.queue[0];
    if ours(&lowest.name, lowest.owner_tag) {
        return Plan::Join;
    }
    // A node of this owner further ahead becomes the holder when its own
    // predecessor goes: watch that one, so re-entry is not missed.
    // Otherwise (always, unless one owner queues twice) the direct predecessor.
    let watch = q.queue[1..me]
        .iter()
        .position(|c| ours(&c.name, c.owner_tag))
        .unwrap_or(me - 1);
    Plan::Wait(q.queue[watch].name.clone())
}

/// The children of `parent` (none if it does not exist), retried over
/// connection losses (a retry waits for the reconnection).
pub(crate) async fn list(client: &Client, parent: &str) -> ZkResult<Vec<String>> {
    let mut lost = Reconnect::new(client);
    loop {
        match client.list_children(parent).await {
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(e) if is_connection_loss(&e) => lost.wait(e).await?,
            other => return other,
        }
    }
}

/// Brings the server this session reads from up to date with the leader
/// (as of the sync), retried over connection losses. Needed before looking
/// for the effect of a write whose answer was lost: after a reconnection
/// the session may read from a server that has not applied it yet.
pub(crate) async fn sync(client: &Client, path: &str) -> ZkResult<()> {
    let mut lost = Reconnect::new(client);
    loop {
        match client.sync(path).await {
            Err(e) if is_connection_loss(&e) => lost.wait(e).await?,
            other => return other,
        }
    }
}

/// A node's data (`None` inside if it is not lockkit's) and stat; `None` if
/// the node does not exist.
pub(crate) async fn read(client: &Client, path: &str) -> ZkResult<Option<(Option<NodeData>, Stat)>> {
    let mut lost = Reconnect::new(client);
    loop {
        match client.get_data(path).await {
            Ok((data, stat)) => return Ok(Some((NodeData::decode(&data), stat))),
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) if is_connection_loss(&e) => lost.wait(e).await?,
            Err(e) => return Err(e),
        }
    }
}

/// Lists the parent again, noting the connection epoch first.
pub(crate) async fn refresh(session: &Session, q: &mut Queued) -> ZkResult<()> {
    q.epoch = session.epoch();
    let children = list(&session.client, &q.parent).await?;
    q.queue = queue(&children);
    q.shares = shares(&children);
    Ok(())
}

/// Creates this contender's node (and the parent, if needed) and lists the
/// parent in the same round trip. The node's name carries the attempt id,
/// so a create whose answer was lost with the connection is found again
/// (after a `sync`, so that the server listing has applied it if the leader
/// did) instead of leaving a second node of the same attempt.
pub(crate) async fn enqueue(session: &Session, parent: &str, owner: &str, tag: u64, attempt: &str) -> ZkResult<Queued> {
    let prefix = child_prefix(parent, tag, attempt);
    let stem = child_stem(tag, attempt);
    let data = NodeData::contender(owner, attempt);
    let encoded = data.encode();
    let client = &session.client;
    let mut lost = Reconnect::new(client);
    loop {
        let epoch = session.epoch();
        // Sent now, answered in order: the listing includes our node. The
        // create checks this session's marker (see `conn::SESSIONS`).
        let mut multi = client.new_multi_writer();
        if let Some(marker) = &session.marker {
            multi.add_check_version(marker, -1)?;
        }
        multi.add_create(&prefix, &encoded, &session.contender_options())?;
        let sent = std::time::Instant::now();
        let create = multi.commit();
        let listing = client.list_children(parent);
        let created = match create.await {
            Ok(results) => match results.into_iter().last() {
                Some(MultiWriteResult::Create { path, stat }) => Ok((path, stat)),
                other => Err(ZkError::UnexpectedError(format!("a create answered {other:?}"))),
            },
            // The marker is gone: this backend has moved on to a new session.
            Err(MultiWriteError::OperationFailed { index: 0, .. }) if session.marker.is_some() => {
                Err(ZkError::SessionExpired)
            }
            Err(e) => Err(ZkError::from(e)),
        };
        let (name, node) = match created {
            Ok((path, stat)) => {
                // A lease proven by this answer may follow a suspension
                // that left the heartbeat's deadline behind.
                session.proven(sent);
                let name = path.rsplit('/').next().unwrap_or(&path).to_owned();
                let node = match stat.is_invalid() {
                    false => Known {
                        data: data.clone(),
                        version: stat.version,
                        czxid: stat.czxid,
                    },
                    // Some servers answer a create in a multi without its stat.
                    true => match read(client, &format!("{parent}/{name}")).await? {
                        Some((_, stat)) => Known {
                            data: data.clone(),
                            version: stat.version,
                            czxid: stat.czxid,
                        },
                        None => continue,
                    },
                };
                (name, node)
            }
            Err(ZkError::NoNode) => match client.create(parent, &[], &session.parent_options()).await {
                Ok(_) | Err(ZkError::NodeExists) => continue,
                Err(e) if is_connection_loss(&e) => {
                    lost.wait(e).await?;
                    continue;
                }
                Err(e) => return Err(e),
            },
            Err(e) if is_connection_loss(&e) => {
                sync(client, parent).await?;
                let children = list(client, parent).await?;
                // This session's node of the attempt: one an earlier session
                // of this backend made (before it was fenced) is not ours.
                let mut found = None;
                for name in children.into_iter().filter(|c| c.starts_with(&stem)) {
                    if let Some((Some(data), stat)) = read(client, &format!("{parent}/{name}")).await?
                        && stat.ephemeral_owner == session.id
                    {
                        let known = Known {
                            data,
                            version: stat.version,
                            czxid: stat.czxid,
                        };
                        found = Some((name, known));
                        break;
                    }
                }
                match found {
                    Some(found) => found,
                    None => continue,
                }
            }
            Err(e) => return Err(e),
        };
        let children = match listing.await {
            Ok(children) if children.contains(&name) => children,
            _ => list(client, parent).await?,
        };
        let me = Child::parse(&name).ok_or_else(|| ZkError::UnexpectedError(format!("created node {name}")))?;
        return Ok(Queued {
            parent: parent.to_owned(),
            path: me.path(parent),
            me,
            node,
            queue: queue(&children),
            shares: shares(&children),
            epoch,
        });
    }
}

/// A node's data as last known: skips the read before a versioned write.
#[derive(Debug, Clone)]
pub(crate) struct Known {
    pub(crate) data: NodeData,
    pub(crate) version: i32,
    /// The node's own creation zxid.
    pub(crate) czxid: i64,
}

impl Known {
    /// The fencing token of the hold the node is part of.
    pub(crate) fn token(&self) -> i64 {
        self.data.hold_token(self.czxid)
    }
}

/// A node after a change of its shares.
#[derive(Debug, Clone)]
pub(crate) struct Changed {
    /// Its data and version now; `None` once it is deleted.
    pub(crate) node: Option<(NodeData, i32)>,
    /// Its creation zxid.
    pub(crate) czxid: i64,
    /// Somebody else wrote the node since the state the change started
    /// from (a version conflict, a stale known state, or an answer lost
    /// with the connection): a session joining the hold bumps its node's
    /// version.
    pub(crate) raced: bool,
}

impl Changed {
    /// How many shares the node carries now.
    pub(crate) fn count(&self) -> u32 {
        self.node.as_ref().map_or(0, |(d, _)| d.count())
    }

    /// What is known of the node now, unless it is deleted.
    pub(crate) fn known(&self) -> Option<Known> {
        self.node.as_ref().map(|(data, version)| Known {
            data: data.clone(),
            version: *version,
            czxid: self.czxid,
        })
    }
}

/// A change of the shares a node carries.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change<'a> {
    /// Adds this attempt's share (a re-entry), unless the node carries it.
    Add(&'a str),
    /// Takes this attempt's share back (a release), deleting the node when
    /// it was the last; nothing if the node does not carry it.
    Remove(&'a str),
}

/// Changes the shares the node at `path` carries — only if `owner` holds it
/// (and, with `token`, as part of the hold with that token). Every write is
/// versioned and retried on a version conflict. `None`: not held that way
/// (or the node is gone). With `list_after`, that parent is listed right
/// behind the write, in the same round trip: the listing (made after the
/// write) comes back too.
///
/// Idempotent by attempt id: an `Add` of an attempt the node carries and a
/// `Remove` of one it does not change nothing — after a fresh read, since a
/// `known` state may be stale. So a write whose answer was lost with the
/// connection is recognised on the next read by its attempt id alone (the
/// node gone after a delete), never by comparing data that an identical
/// concurrent write could have produced.
pub(crate) async fn change(
    client: &Client,
    path: &str,
    owner: &str,
    token: Option<i64>,
    mut known: Option<Known>,
    change: Change<'_>,
    list_after: Option<&str>,
) -> ZkResult<(Option<Changed>, Option<Vec<String>>)> {
    let mut deleted_lost = false;
    let mut fresh = false;
    let mut raced = false;
    let mut czxid = known.as_ref().map_or(0, |k| k.czxid);
    let started = known.as_ref().map(|k| k.version);
    let mut lost = Reconnect::new(client);
    loop {
        let current = match known.take() {
            Some(k) => k,
            None => match client.get_data(path).await {
                Ok((data, stat)) => {
                    fresh = true;
                    let data = NodeData::decode(&data)
                        .filter(|d| d.owner == owner && token.is_none_or(|t| t == d.hold_token(stat.czxid)));
                    let Some(data) = data else {
                        return Ok((None, None));
                    };
                    raced |= started.is_some_and(|v| v != stat.version);
                    Known {
                        data,
                        version: stat.version,
                        czxid: stat.czxid,
                    }
                }
                Err(ZkError::NoNode) => {
                    let deleted = deleted_lost.then_some(Changed {
                        node: None,
                        czxid,
                        raced: true,
                    });
                    return Ok((deleted, None));
                }
                Err(e) if is_connection_loss(&e) => {
                    lost.wait(e).await?;
                    continue;
                }
                Err(e) => return Err(e),
            },
        };
        czxid = current.czxid;
        let mut next = current.data.clone();
        match change {
            Change::Add(attempt) if !next.has(attempt) => next.attempts.push(attempt.to_owned()),
            Change::Add(_) => {}
            Change::Remove(attempt) => next.attempts.retain(|a| a != attempt),
        }
        if next == current.data {
            // Nothing to do, if the node really is this way.
            if !fresh {
                continue;
            }
            let changed = Changed {
                czxid: current.czxid,
                node: Some((current.data, current.version)),
                raced,
            };
            let listing = match list_after {
                Some(parent) => client.list_children(parent).await.ok(),
                None => None,
            };
            return Ok((Some(changed), listing));
        }
        let deleting = next.attempts.is_empty();
        // The listing is sent behind the write: answered after it, so it
        // includes it.
        let listing;
        let result = if deleting {
            let delete = client.delete(path, Some(current.version));
            listing = list_after.map(|parent| client.list_children(parent));
            delete.await.map(|()| Changed {
                node: None,
                czxid: current.czxid,
                raced,
            })
        } else {
            let set = client.set_data(path, &next.encode(), Some(current.version));
            listing = list_after.map(|parent| client.list_children(parent));
            set.await.map(|stat| Changed {
                node: Some((next, stat.version)),
                czxid: current.czxid,
                raced,
            })
        };
        let listing = match listing {
            Some(l) => l.await.ok(),
            None => None,
        };
        match result {
            Ok(changed) => return Ok((Some(changed), listing)),
            Err(ZkError::BadVersion) => raced = true,
            Err(ZkError::NoNode) => {
                let deleted = deleted_lost.then_some(Changed {
                    node: None,
                    czxid: current.czxid,
                    raced: true,
                });
                return Ok((deleted, None));
            }
            Err(e) if is_connection_loss(&e) => {
                deleted_lost |= deleting;
                raced = true;
                lost.wait(e).await?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// How often taking back what a failed or abandoned acquisition left is
/// tried, before it is left to the session's end. Every try waits for the
/// connection to be back, so each failure is one more lost connection.
const LEFTOVER_TRIES: u32 = 8;
/// The pause after the first failed try; doubled after each one, up to
/// [`LEFTOVER_PAUSE_MAX`].
const LEFTOVER_PAUSE: Duration = Duration::from_millis(100);
const LEFTOVER_PAUSE_MAX: Duration = Duration::from_secs(2);

/// What an acquisition that did not take the lock may have left under
/// `parent`: its contender nodes, and its share in a node of this session's
/// hold (a join or re-entry whose outcome is unknown). Taking it back takes
/// `attempt`'s share out of those nodes, deleting a node left without
/// shares: never another attempt's share.
///
/// The contender nodes are the one of this session and any that an earlier
/// session of the backend queued for the same attempt before it started
/// over in this one: the server keeps a session (and its nodes) a while
/// after the client gave it up. Such a node outliving the call would come
/// first later and stand as a hold of the owner carrying the share of a
/// call that has returned, counted by the owner's next acquisition, which
/// joins it.
pub(crate) struct Leftover {
    session: Arc<Session>,
    parent: String,
    owner: String,
    attempt: String,
    /// The contender node as created, when its create was answered.
    node: Option<(String, Known)>,
    /// Look for this attempt's contender nodes by listing (its create's
    /// outcome is unknown, the known node's write failed, or the listing
    /// behind the create showed a node of an earlier session): their names
    /// carry the attempt id.
    find_node: bool,
    /// Look for this attempt's share in this session's nodes of the hold (a
    /// join or re-entry whose outcome is unknown).
    find_share: bool,
    /// Handed over from a session that ended: its nodes may still stand on
    /// the server (it keeps a session until its timeout after it last heard
    /// of it), so a share is looked for in every node of the hold.
    orphaned: bool,
}

/// What an acquisition whose session ended before it could take back its
/// leftover asks the backend's next session to take back (see
/// [`Leftover::orphaned`]). Holds no session: an ended one is not kept
/// alive by it.
#[derive(Debug, Clone)]
pub(crate) struct Orphan {
    parent: String,
    owner: String,
    attempt: String,
    /// The leftover may include a share in a node of the hold (not only
    /// the contender node).
    find_share: bool,
}

impl Orphan {
    /// Everything `attempt` of `owner` may have left under `parent` (its
    /// contender nodes, its share in any node of the hold).
    pub(crate) fn new(parent: &str, owner: &str, attempt: &str) -> Self {
        Orphan {
            parent: parent.to_owned(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            find_share: true,
        }
    }
}

impl Leftover {
    /// The contender node of `q`, as created, and any other node of the
    /// attempt that `q`'s first listing shows (an earlier session's: it
    /// is older, so it is listed if it still stands).
    pub(crate) fn queued(session: &Arc<Session>, q: &Queued, owner: &str, attempt: &str) -> Self {
        let stem = child_stem(q.me.owner_tag, attempt);
        let earlier = q.queue.iter().any(|c| c.name != q.me.name && c.name.starts_with(&stem));
        Leftover {
            session: session.clone(),
            parent: q.parent.clone(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            node: Some((q.path.clone(), q.node.clone())),
            find_node: earlier,
            find_share: false,
            orphaned: false,
        }
    }

    /// The leftover of an acquisition whose session ended first, taken back
    /// by a later session of the backend: the server may keep the ended
    /// session (and its nodes) until its timeout, and the call has returned
    /// — left standing, its contender node could come first and stand as a
    /// hold of the owner that the owner's other processes join, counting a
    /// share nobody holds. Its nodes are found by the attempt id (in the
    /// contender node's name, in every node's shares), whichever session.
    pub(crate) fn orphaned(session: &Arc<Session>, orphan: Orphan) -> Self {
        Leftover {
            session: session.clone(),
            parent: orphan.parent,
            owner: orphan.owner,
            attempt: orphan.attempt,
            node: None,
            find_node: true,
            find_share: orphan.find_share,
            orphaned: true,
        }
    }

    /// Hands this leftover to the backend's next session: its own ended.
    fn orphan(self) {
        tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, "the session ended first: the next session takes the acquisition's leftover back");
        let session = self.session.clone();
        session.orphan(self.into_orphan());
    }

    fn into_orphan(self) -> Orphan {
        Orphan {
            parent: self.parent,
            owner: self.owner,
            attempt: self.attempt,
            find_share: self.find_share,
        }
    }

    /// Takes this leftover of an ended session back in the backend's next
    /// session before the call that left it returns, if that can be done
    /// within one session timeout (the server may keep the ended session,
    /// and its nodes, while it still hears from the client: the owner's
    /// other processes must not meet the call's node as a hold after it
    /// failed). By then a server that stopped hearing from the old session
    /// has ended it. Otherwise, and for what that try leaves, the next
    /// session does it later.
    pub(crate) async fn in_next_session(self) {
        let started = tokio::time::Instant::now();
        let bound = self.session.client.session_timeout();
        let Some(sessions) = self.session.sessions() else {
            return self.orphan();
        };
        let next = match tokio::time::timeout(bound, sessions.get()).await {
            Ok(Ok(next)) if !next.is_dead() => next,
            _ => return self.orphan(),
        };
        let mut leftover = Leftover::orphaned(&next, self.into_orphan());
        let left = bound.saturating_sub(started.elapsed());
        match tokio::time::timeout(left, leftover.take_back()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if is_session_end(&e) => leftover.orphan(),
            Ok(Err(_)) | Err(_) => leftover.spawn(),
        }
    }

    /// A contender node whose create failed without an answer that says it
    /// was not made: the server may have made it.
    pub(crate) fn unknown_node(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str) -> Self {
        Leftover {
            session: session.clone(),
            parent: parent.to_owned(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            node: None,
            find_node: true,
            find_share: false,
            orphaned: false,
        }
    }

    /// A share of a hold this session has a node of, whose write failed
    /// without an answer that says it was not made.
    pub(crate) fn unknown_share(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str) -> Self {
        Leftover {
            find_node: false,
            find_share: true,
            ..Self::unknown_node(session, parent, owner, attempt)
        }
    }

    /// Looks for a share joined to the hold too: a join failed.
    pub(crate) fn join_failed(&mut self) {
        self.find_share = true;
    }

    /// One try. Ok: nothing of this attempt is left (as far as it looks).
    /// Cancel safe: a try cut short leaves the leftover whole for the next.
    async fn take_back(&mut self) -> ZkResult<()> {
        let client = &self.session.client;
        if let Some((path, known)) = self.node.clone() {
            let token = Some(known.czxid);
            let removed = change(
                client,
                &path,
                &self.owner,
                token,
                Some(known),
                Change::Remove(&self.attempt),
                None,
            )
            .await;
            self.node = None;
            if let Err(e) = removed {
                self.find_node = true;
                return Err(e);
            }
        }
        if !self.find_node && !self.find_share {
            return Ok(());
        }
        // The server read from has applied whatever the leader did of a
        // write whose answer was lost.
        sync(client, &self.parent).await?;
        let stem = child_stem(owner_tag(&self.owner), &self.attempt);
        loop {
            let children = list(client, &self.parent).await?;
            if self.find_node {
                for child in children.iter().filter(|c| c.starts_with(&stem)) {
                    let path = format!("{}/{child}", self.parent);
                    // Whichever session's: the attempt id names this call,
                    // and a node of another session carrying it is one an
                    // earlier session of this backend queued for it.
                    let Some((Some(data), stat)) = read(client, &path).await? else {
                        continue;
                    };
                    let known = Known {
                        data,
                        version: stat.version,
                        czxid: stat.czxid,
                    };
                    let remove = Change::Remove(&self.attempt);
                    change(client, &path, &self.owner, Some(stat.czxid), Some(known), remove, None).await?;
                }
            }
            if !self.find_share {
                return Ok(());
            }
            let Some(view) = read_hold(client, &self.parent, &children).await? else {
                continue;
            };
            if let View::Held(view) = view {
                let mine = view
                    .nodes
                    .iter()
                    .filter(|n| (self.orphaned || n.session == self.session.id) && n.known.data.has(&self.attempt));
                for n in mine {
                    let known = Some(n.known.clone());
                    let remove = Change::Remove(&self.attempt);
                    change(client, &n.path, &self.owner, Some(view.token), known, remove, None).await?;
                }
            }
            return Ok(());
        }
    }

    /// Takes the leftover back, trying again after an error while the
    /// session lives, at most [`LEFTOVER_TRIES`] times; each try waits for
    /// the connection to be up. If the session ends first, the backend's
    /// next session takes it back (see [`Leftover::orphaned`]).
    pub(crate) async fn take_back_retrying(mut self) {
        let session = self.session.clone();
        let mut pause = LEFTOVER_PAUSE;
        for tried in 1..=LEFTOVER_TRIES {
            if !session.until_connected().await {
                return self.orphan();
            }
            let result = tokio::select! {
                r = self.take_back() => r,
                _ = session.ended() => return self.orphan(),
            };
            match result {
                Ok(()) => {
                    if tried > 1 || self.orphaned {
                        tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, tried, orphaned = self.orphaned, "took a failed acquisition's node back");
                    }
                    return;
                }
                Err(e) if is_session_end(&e) => return self.orphan(),
                Err(error) if tried == LEFTOVER_TRIES => {
                    tracing::warn!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error, tried, "could not take a failed acquisition's node back; it goes with the session");
                }
                Err(error) => {
                    tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error, tried, "taking a failed acquisition's node back failed; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = session.ended() => return self.orphan(),
                    }
                    pause = (pause * 2).min(LEFTOVER_PAUSE_MAX);
                }
            }
        }
    }

    /// Takes the leftover back before the failing call returns: tried
    /// again while the connection is lost or slow, for up to one session
    /// timeout (the rest then goes on in the background). A slow connection
    /// (latency) or a suspended one keeps the session, and with it the
    /// call's node, on the server: left to the background, the node could
    /// come first in the queue after the call returned and stand as a hold
    /// of the owner that its other processes join (a torture run saw that
    /// 0.8 s after such a call failed, when the first try gave up after
    /// 250 ms). A session that ends meanwhile hands the leftover to the
    /// next one (see [`in_next_session`](Self::in_next_session)).
    pub(crate) async fn take_back_now(mut self) {
        if self.session.is_dead() {
            return self.in_next_session().await;
        }
        let bound = self.session.client.session_timeout();
        let started = tokio::time::Instant::now();
        let mut pause = LEFTOVER_PAUSE;
        loop {
            let left = bound.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, self.take_back()).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) if is_session_end(&e) => return self.in_next_session().await,
                Ok(Err(error)) if started.elapsed() + pause < bound => {
                    tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error,
                        "taking a failed acquisition's node back failed; trying again before the call returns");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.session.ended() => return self.in_next_session().await,
                    }
                    pause = (pause * 2).min(LEFTOVER_PAUSE_MAX);
                }
                Ok(Err(_)) | Err(_) => return self.spawn(),
            }
        }
    }

    /// Takes the leftover back in the background.
    pub(crate) fn spawn(self) {
        if self.session.is_dead() {
            return self.orphan();
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(self.take_back_retrying());
            }
            Err(_) => tracing::debug!(
                backend = BACKEND,
                "no runtime to delete a queued node; it goes with the session"
            ),
        }
    }
}

/// A queued node to take out of the queue unless the acquisition took the
/// lock with it: at once on a give-up or an error, in the background when
/// the waiting future is dropped.
pub(crate) struct Cleanup {
    leftover: Option<Leftover>,
}

impl Cleanup {
    pub(crate) fn new(session: &Arc<Session>, q: &Queued, owner: &str, attempt: &str) -> Self {
        Cleanup {
            leftover: Some(Leftover::queued(session, q, owner, attempt)),
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.leftover = None;
    }

    /// A join failed: its share may have been made.
    pub(crate) fn join_failed(&mut self) {
        if let Some(l) = &mut self.leftover {
            l.join_failed();
        }
    }

    pub(crate) async fn run(mut self) {
        if let Some(leftover) = self.leftover.take() {
            leftover.take_back_now().await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(leftover) = self.leftover.take() {
            leftover.spawn();
        }
    }
}

/// One node of a hold, as read.
#[derive(Debug, Clone)]
pub(crate) struct HoldNode {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) known: Known,
    /// The session the (ephemeral) node belongs to.
    pub(crate) session: i64,
}

/// A hold and the nodes that carry it: the first contender's node, and the
/// share nodes of other sessions of the same owner.
#[derive(Debug, Clone)]
pub(crate) struct HoldView {
    pub(crate) owner: String,
    pub(crate) token: i64,
    pub(crate) nodes: Vec<HoldNode>,
}

impl HoldView {
    /// The hold count: the attempts its nodes carry, each once. One attempt
    /// can stand in two nodes: carried on in a new session (after the
    /// client gave its session up) while the old session's node still
    /// stands, until the server closes that session, the acquisition takes
    /// the old node's share back (see [`Leftover`]), or the release takes
    /// the attempt from both.
    pub(crate) fn count(&self) -> u32 {
        distinct_attempts(self.nodes.iter().map(|n| &n.known.data))
    }

    /// The count with the node called `name` as `own` now (`None`:
    /// deleted), whether or not the view has it.
    pub(crate) fn count_with(&self, name: &str, own: Option<&NodeData>) -> u32 {
        let others = self.nodes.iter().filter(|n| n.name != name).map(|n| &n.known.data);
        distinct_attempts(others.chain(own))
    }

    pub(crate) fn info(&self, name: &str) -> LockInfo {
        LockInfo {
            name: name.to_owned(),
            owner: self.owner.clone(),
            hold_count: self.count(),
            token: self.token as u64,
            remaining: None,
        }
    }
}

/// What a lock's parent holds.
#[derive(Debug, Clone)]
pub(crate) enum View {
    Free,
    Held(HoldView),
    /// The first contender's data is not lockkit's.
    Foreign(String),
}

/// A node's data being read.
type Reading<'a> = Pin<Box<dyn Future<Output = ZkResult<(Vec<u8>, Stat)>> + Send + 'a>>;

/// The reads of a hold's candidate nodes, sent (see [`read_hold`]).
pub(crate) struct HoldReads<'a> {
    parent: String,
    first: Option<(Child, Reading<'a>)>,
    shares: Vec<(Share, Reading<'a>)>,
}

/// Sends the reads of [`read_hold`] at once (requests go out when made), so
/// that the reads of many holds share a round trip.
pub(crate) fn start_read_hold<'a>(client: &'a Client, parent: &str, children: &[String]) -> HoldReads<'a> {
    let first = queue(children).into_iter().next().map(|c| {
        let read: Reading<'a> = Box::pin(client.get_data(&c.path(parent)));
        (c, read)
    });
    let shares = shares(children)
        .into_iter()
        .map(|s| {
            let read: Reading<'a> = Box::pin(client.get_data(&s.path(parent)));
            (s, read)
        })
        .collect();
    HoldReads {
        parent: parent.to_owned(),
        first,
        shares,
    }
}

/// The hold of the lock whose parent `parent` had `children`: the first
/// contender and every share node are read, pipelined. `None`: the first
/// contender went between the listing and the read (list again).
///
/// Share nodes of a hold outlive its contender node; while one stands, the
/// first contender is part of the hold only if it is the hold's own node
/// (its creation zxid is the hold's token), and waits otherwise.
pub(crate) async fn read_hold(client: &Client, parent: &str, children: &[String]) -> ZkResult<Option<View>> {
    start_read_hold(client, parent, children).finish().await
}

impl HoldReads<'_> {
    /// The hold, once the reads are answered (see [`read_hold`]).
    pub(crate) async fn finish(self) -> ZkResult<Option<View>> {
        let HoldReads { parent, first, shares } = self;
        let parent = parent.as_str();
        let first = match first {
            Some((c, read)) => match read.await {
                Ok((data, stat)) => Some((c.name, NodeData::decode(&data), stat)),
                Err(e) if e == ZkError::NoNode || is_connection_loss(&e) => return Ok(None),
                Err(e) => return Err(e),
            },
            None => None,
        };
        let mut nodes = Vec::new();
        for (share, read) in shares {
            match read.await {
                Ok((data, stat)) => {
                    if let Some(data) = NodeData::decode(&data).filter(|d| d.token.is_some()) {
                        nodes.push(HoldNode {
                            path: share.path(parent),
                            name: share.name,
                            session: stat.ephemeral_owner,
                            known: Known {
                                data,
                                version: stat.version,
                                czxid: stat.czxid,
                            },
                        });
                    }
                }
                // Released meanwhile: not part of the hold any more.
                Err(ZkError::NoNode) => {}
                Err(e) if is_connection_loss(&e) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        if let Some(token) = nodes.iter().map(|n| n.known.token()).min() {
            // One hold at a time: share nodes are only made while a node of
            // their hold stands, and a contender holds only once none is left.
            let owner = nodes
                .iter()
                .find(|n| n.known.token() == token)
                .map(|n| n.known.data.owner.clone())
                .unwrap_or_default();
            nodes.retain(|n| n.known.token() == token && n.known.data.owner == owner);
            if let Some((name, Some(data), stat)) = first
                && stat.czxid == token
                && data.owner == owner
            {
                nodes.insert(
                    0,
                    HoldNode {
                        path: format!("{parent}/{name}"),
                        name,
                        session: stat.ephemeral_owner,
                        known: Known {
                            data,
                            version: stat.version,
                            czxid: stat.czxid,
                        },
                    },
                );
            }
            return Ok(Some(View::Held(HoldView { owner, token, nodes })));
        }
        Ok(Some(match first {
            None => View::Free,
            Some((name, None, _)) => View::Foreign(format!("{parent}/{name}")),
            Some((name, Some(data), stat)) => View::Held(HoldView {
                owner: data.owner.clone(),
                token: stat.czxid,
                nodes: vec![HoldNode {
                    path: format!("{parent}/{name}"),
                    name,
                    session: stat.ephemeral_owner,
                    known: Known {
                        data,
                        version: stat.version,
                        czxid: stat.czxid,
                    },
                }],
            }),
        }))
    }
}

/// The hold of the lock whose parent is `parent`, listed and read now.
pub(crate) async fn hold_of(client: &Client, parent: &str) -> ZkResult<View> {
    loop {
        let children = list(client, parent).await?;
        if let Some(view) = read_hold(client, parent, &children).await? {
            return Ok(view);
        }
    }
}

/// The number of distinct attempts `nodes` carry.
fn distinct_attempts<'a>(nodes: impl Iterator<Item = &'a NodeData>) -> u32 {
    let attempts: BTreeSet<&str> = nodes.flat_map(|d| d.attempts.iter().map(String::as_str)).collect();
    u32::try_from(attempts.len()).unwrap_or(u32::MAX)
}

/// A hold after a change of this session's node of it.
pub(crate) struct After {
    /// The hold count.
    pub(crate) count: u32,
    /// The hold as read after the change, when other nodes may carry it;
    /// `None` when the listing shows the changed node alone can.
    pub(crate) view: Option<HoldView>,
}

/// The hold `token` of `owner` after a change of this session's node `own`
/// (its data now `own_data`; `None`: deleted), from a listing made after
/// the change. Without share nodes in the listing (the common case) no
/// other node can carry the hold: no read is needed.
pub(crate) async fn count_after(
    client: &Client,
    parent: &str,
    own: &str,
    own_data: Option<&NodeData>,
    owner: &str,
    token: i64,
    listing: Option<Vec<String>>,
) -> ZkResult<After> {
    let own_count = own_data.map_or(0, NodeData::count);
    let mut listing = listing;
    loop {
        let children = match listing.take() {
            Some(children) => children,
            None => list(client, parent).await?,
        };
        let own_is_share = Share::parse(own).is_some();
        if !own_is_share && shares(&children).is_empty() {
            return Ok(After {
                count: own_count,
                view: None,
            });
        }
        match read_hold(client, parent, &children).await? {
            Some(View::Held(view)) if view.token == token && view.owner == owner => {
                return Ok(After {
                    count: view.count_with(own, own_data),
                    view: Some(view),
                });
            }
            Some(_) => {
                return Ok(After {
                    count: own_count,
                    view: None,
                });
            }
            None => {}
        }
    }
}

/// Held names starting with `prefix`, in name order, at most `limit`: the
/// chroot's lock parents, their children and the holds' nodes' data, each
/// step pipelined over a batch of names. The chroot's children come in one
/// answer, bounded by the server's `jute.maxbuffer` (1 MB by default: tens
/// of thousands of lock names of ordinary length).
pub(crate) async fn list_held(session: &Session, prefix: &str, limit: usize) -> ZkResult<Vec<LockInfo>> {
    let client = &session.client;
    let mut names: Vec<String> = list(client, "/")
        .await?
        .iter()
        .filter_map(|segment| decode_name(segment))
        .filter(|name| name.starts_with(prefix))
        .collect();
    names.sort();
    let mut held = Vec::new();
    for batch in names.chunks(64) {
        if held.len() >= limit {
            break;
        }
        let parents: Vec<String> = batch.iter().map(|n| parent_path(n)).collect();
        // Requests go out when made: all of a batch before the first answer.
        let listings: Vec<_> = parents.iter().map(|p| client.list_children(p)).collect();
        let mut children = Vec::new();
        for listing in listings {
            match listing.await {
                Ok(c) => children.push(c),
                Err(ZkError::NoNode) => children.push(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        // The reads of every name of the batch go out before the first
        // answer is awaited, too.
        let reads: Vec<_> = parents
            .iter()
            .zip(&children)
            .map(|(parent, children)| start_read_hold(client, parent, children))
            .collect();
        for ((name, parent), reads) in batch.iter().zip(&parents).zip(reads) {
            let view = match reads.finish().await? {
                Some(view) => view,
                // Changed between the listing and the reads: look again.
                None => hold_of(client, parent).await?,
            };
            if let View::Held(view) = view {
                held.push(view.info(name));
            }
        }
    }
    held.truncate(limit);
    Ok(held)
}

/// Why the holder node could not be deleted.
pub(crate) enum DeleteError {
    Zk(ZkError),
    Foreign(String),
}

impl From<ZkError> for DeleteError {
    fn from(e: ZkError) -> Self {
        DeleteError::Zk(e)
    }
}

/// Deletes every node of the hold on `name` (its contender node and its
/// share nodes), whoever holds it; returns the paths and what the hold was.
/// Deletes are versioned and the hold is read again until no node of it is
/// left, so a retry after a lost answer never deletes the next holder too.
pub(crate) async fn delete_hold(session: &Session, name: &str) -> Result<Option<(Vec<String>, LockInfo)>, DeleteError> {
    let client = &session.client;
    let parent = parent_path(name);
    let mut removed: Option<(Vec<String>, LockInfo)> = None;
    loop {
        let view = match hold_of(client, &parent).await? {
            View::Held(view) if removed.as_ref().is_none_or(|(_, info)| info.token == view.token as u64) => view,
            View::Foreign(path) if removed.is_none() => return Err(DeleteError::Foreign(path)),
            _ => return Ok(removed),
        };
        let (paths, _) = removed.get_or_insert_with(|| (Vec::new(), view.info(name)));
        let deletes: Vec<_> = view
            .nodes
            .iter()
            .map(|n| client.delete(&n.path, Some(n.known.version)))
            .collect();
        for (node, delete) in view.nodes.iter().zip(deletes) {
            match delete.await {
                Ok(()) => paths.push(node.path.clone()),
                // Changed, gone, or the answer lost: the next reading says.
                Err(e) if matches!(e, ZkError::BadVersion | ZkError::NoNode) || is_connection_loss(&e) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: u64 = 1;
    const OTHER: u64 = 2;

    fn child(tag: u64, seq: i64) -> Child {
        Child::parse(&format!("{}{seq:010}", child_stem(tag, &format!("{seq:016x}")))).unwrap()
    }

    fn share(tag: u64, session: i64) -> Share {
        Share::parse(&crate::layout::share_name(tag, session)).unwrap()
    }

    /// The queue `line` (owner tags in order, sequences 1, 2, …) with this
    /// contender at `me`.
    fn queued(line: &[u64], me: usize) -> Queued {
        let queue: Vec<Child> = line.iter().enumerate().map(|(i, t)| child(*t, i as i64 + 1)).collect();
        Queued {
            parent: "/lock-x".into(),
            me: queue[me].clone(),
            path: queue[me].path("/lock-x"),
            node: Known {
                data: NodeData::contender("me", "0000000000000001"),
                version: 0,
                czxid: 1,
            },
            queue,
            shares: Vec::new(),
            epoch: CancellationToken::new(),
        }
    }

    fn waits_for(p: Plan) -> String {
        match p {
            Plan::Wait(name) => name,
            other => panic!("expected to wait, got {other:?}"),
        }
    }

    fn seq(q: &Queued, i: usize) -> String {
        q.queue[i].name.clone()
    }

    #[test]
    fn first_holds_others_watch_their_predecessor() {
        assert!(matches!(plan(&queued(&[ME, OTHER], 0), ME, &[]), Plan::Holder));
        let q = queued(&[OTHER, OTHER, ME], 2);
        assert_eq!(waits_for(plan(&q, ME, &[])), seq(&q, 1));
        let q = queued(&[OTHER, ME], 1);
        assert_eq!(waits_for(plan(&q, ME, &[])), seq(&q, 0));
        let mut gone = queued(&[OTHER, ME], 1);
        gone.queue.pop();
        assert!(matches!(plan(&gone, ME, &[]), Plan::Gone));
    }

    #[test]
    fn the_same_owner_joins_or_watches_for_its_own_turn() {
        let q = queued(&[ME, OTHER, ME], 2);
        assert!(
            matches!(plan(&q, ME, &[]), Plan::Join),
            "the holder is this owner: join"
        );
        // The tag matched but the data said otherwise: wait like anybody.
        assert_eq!(waits_for(plan(&q, ME, &[seq(&q, 0)])), seq(&q, 1));
        // This owner's other node becomes the holder when *its* predecessor
        // goes: watch that one.
        let q = queued(&[OTHER, OTHER, ME, OTHER, ME], 4);
        assert_eq!(waits_for(plan(&q, ME, &[])), seq(&q, 1));
    }

    #[test]
    fn share_nodes_of_another_owner_hold_the_lock() {
        // First in line, but the hold stands on another owner's share node.
        let mut q = queued(&[ME, OTHER], 0);
        q.shares = vec![share(OTHER, 7)];
        assert_eq!(waits_for(plan(&q, ME, &[])), q.shares[0].name);
        // Further back: the direct predecessor, as ever.
        let mut q = queued(&[OTHER, ME], 1);
        q.shares = vec![share(OTHER, 7)];
        assert_eq!(waits_for(plan(&q, ME, &[])), seq(&q, 0));
        // This owner's node is first and waits for the shares: so does this one.
        let mut q = queued(&[ME, OTHER, ME], 2);
        q.shares = vec![share(OTHER, 7)];
        assert_eq!(waits_for(plan(&q, ME, &[])), q.shares[0].name);
        // A share node of this owner: the hold is this owner's, join it.
        let mut q = queued(&[OTHER, ME], 1);
        q.shares = vec![share(ME, 7)];
        assert!(matches!(plan(&q, ME, &[]), Plan::Join));
        let mut q = queued(&[ME], 0);
        q.shares = vec![share(ME, 7)];
        assert!(matches!(plan(&q, ME, &[]), Plan::Join));
        // Unless its data named another owner.
        let foreign = vec![q.shares[0].name.clone()];
        assert_eq!(waits_for(plan(&q, ME, &foreign)), q.shares[0].name);
    }
}
