//! The contender queue of one lock name on ZooKeeper primitives: joining
//! it, reading it, changing the hold count in a node, and the operator's
//! listing and forced release.

use std::sync::Arc;

use lockkit_core::LockInfo;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, Error as ZkError};

use crate::error::BACKEND;
use crate::nodes::{Child, NodeData, child_prefix, child_stem, decode_name, parent_path, queue};
use crate::session::Session;

pub(crate) type ZkResult<T> = Result<T, ZkError>;

/// A contender's node, and the queue as last listed.
pub(crate) struct Queued {
    pub(crate) parent: String,
    pub(crate) me: Child,
    pub(crate) path: String,
    pub(crate) czxid: i64,
    pub(crate) queue: Vec<Child>,
    /// The connection epoch the listing was made in.
    pub(crate) epoch: CancellationToken,
}

/// What a contender does next, from the last listing.
pub(crate) enum Plan {
    /// Its node is gone (session ended, or deleted by somebody).
    Gone,
    /// It is first: it holds the lock.
    Holder,
    /// The holder's node carries this owner's tag: re-enter it.
    Reenter(Child),
    /// Wait for this node to go.
    Wait(Child),
}

pub(crate) fn plan(q: &Queued, tag: u64, foreign: Option<i64>) -> Plan {
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

/// The children of `parent` (none if it does not exist), retried over
/// connection losses (a retry waits for the reconnection).
pub(crate) async fn list(client: &Client, parent: &str) -> ZkResult<Vec<String>> {
    loop {
        match client.list_children(parent).await {
            Err(ZkError::NoNode) => return Ok(Vec::new()),
            Err(ZkError::ConnectionLoss) => continue,
            other => return other,
        }
    }
}

/// The holder of the lock whose parent is `parent`: the first in line.
pub(crate) async fn holder(client: &Client, parent: &str) -> ZkResult<Option<Child>> {
    Ok(queue(&list(client, parent).await?).into_iter().next())
}

/// A node's data (`None` inside if it is not lockkit's), czxid and data
/// version; `None` if the node does not exist.
pub(crate) async fn read(client: &Client, path: &str) -> ZkResult<Option<(Option<NodeData>, i64, i32)>> {
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
pub(crate) async fn refresh(session: &Session, q: &mut Queued) -> ZkResult<()> {
    q.epoch = session.epoch();
    q.queue = queue(&list(&session.client, &q.parent).await?);
    Ok(())
}

/// Creates this contender's node (and the parent, if needed) and lists the
/// parent in the same round trip. A create whose answer was lost with the
/// connection is found again by its random attempt id.
pub(crate) async fn enqueue(session: &Session, parent: &str, owner: &str, tag: u64) -> ZkResult<Queued> {
    let attempt = rand::random::<u64>();
    let prefix = child_prefix(parent, tag, attempt);
    let stem = child_stem(tag, attempt);
    let data = NodeData::encode(owner, 1);
    let client = &session.client;
    loop {
        let epoch = session.epoch();
        // Sent now, answered in order: the listing includes our node.
        let create = client.create(&prefix, &data, &session.contender_options());
        let listing = client.list_children(parent);
        let (name, czxid) = match create.await {
            Ok((stat, seq)) => (format!("{stem}{seq}"), stat.czxid),
            Err(ZkError::NoNode) => match client.create(parent, &[], &session.parent_options()).await {
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
pub(crate) struct Known {
    pub(crate) count: u32,
    pub(crate) version: i32,
    pub(crate) czxid: i64,
}

/// A hold count after a change; `version` is `None` once the node is deleted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Changed {
    pub(crate) count: u32,
    pub(crate) version: Option<i32>,
    pub(crate) czxid: i64,
}

impl Changed {
    /// A contender's own node, as created: count 1, data version 0.
    pub(crate) fn created(czxid: i64) -> Self {
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
pub(crate) async fn change_count(
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
pub(crate) async fn remove_node(session: Arc<Session>, path: String, owner: String, czxid: i64) {
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
pub(crate) struct Cleanup {
    session: Arc<Session>,
    path: String,
    owner: String,
    czxid: i64,
    armed: bool,
}

impl Cleanup {
    pub(crate) fn new(session: &Arc<Session>, q: &Queued, owner: &str) -> Self {
        Cleanup {
            session: session.clone(),
            path: q.path.clone(),
            owner: owner.to_owned(),
            czxid: q.czxid,
            armed: true,
        }
    }

    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    pub(crate) async fn run(mut self) {
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

/// Held names starting with `prefix`, in name order, at most `limit`: the
/// chroot's lock parents, their first children and those children's data,
/// each step pipelined over a batch of names. The chroot's children come in
/// one answer, bounded by the server's `jute.maxbuffer` (1 MB by default:
/// tens of thousands of lock names of ordinary length).
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
        let mut holders = Vec::new();
        for ((name, parent), listing) in batch.iter().zip(&parents).zip(listings) {
            match listing.await {
                Ok(children) => {
                    if let Some(first) = queue(&children).into_iter().next() {
                        holders.push((name, first.path(parent)));
                    }
                }
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(e),
            }
        }
        let reads: Vec<_> = holders.iter().map(|(_, path)| client.get_data(path)).collect();
        for ((name, _), read) in holders.iter().zip(reads) {
            match read.await {
                Ok((data, stat)) => {
                    if let Some(data) = NodeData::decode(&data) {
                        held.push(LockInfo {
                            name: (*name).clone(),
                            owner: data.owner,
                            hold_count: data.count,
                            token: stat.czxid as u64,
                            remaining: None,
                        });
                    }
                }
                // Released between the listing and the read.
                Err(ZkError::NoNode) => {}
                Err(e) => return Err(e),
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

/// Deletes the holder node of `name`, whoever holds it; returns its path and
/// what it held. A delete whose answer was lost is checked by reading the
/// node again, so a retry never deletes the next holder too.
pub(crate) async fn delete_holder(session: &Session, name: &str) -> Result<Option<(String, LockInfo)>, DeleteError> {
    let client = &session.client;
    let parent = parent_path(name);
    loop {
        let Some(first) = holder(client, &parent).await? else {
            return Ok(None);
        };
        let path = first.path(&parent);
        let Some((data, czxid, version)) = read(client, &path).await? else {
            continue;
        };
        let data = data.ok_or_else(|| DeleteError::Foreign(path.clone()))?;
        let info = LockInfo {
            name: name.to_owned(),
            owner: data.owner,
            hold_count: data.count,
            token: czxid as u64,
            remaining: None,
        };
        loop {
            match client.delete(&path, Some(version)).await {
                Ok(()) => return Ok(Some((path, info))),
                Err(ZkError::ConnectionLoss) => match read(client, &path).await? {
                    None => return Ok(Some((path, info))),
                    Some((_, c, v)) if c == czxid && v == version => continue,
                    Some(_) => break,
                },
                Err(ZkError::BadVersion | ZkError::NoNode) => break,
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
        Child::parse(&format!("{}{seq:010}", child_stem(tag, seq as u64))).unwrap()
    }

    /// The queue `line` (owner tags in order, sequences 1, 2, …) with this
    /// contender at `me`.
    fn queued(line: &[u64], me: usize) -> Queued {
        let queue: Vec<Child> = line.iter().enumerate().map(|(i, t)| child(*t, i as i64 + 1)).collect();
        Queued {
            parent: "/lock-x".into(),
            me: queue[me].clone(),
            path: queue[me].path("/lock-x"),
            czxid: 1,
            queue,
            epoch: CancellationToken::new(),
        }
    }

    fn waits_for(p: Plan) -> i64 {
        match p {
            Plan::Wait(c) => c.seq,
            _ => panic!("expected to wait"),
        }
    }

    #[test]
    fn first_holds_others_watch_their_predecessor() {
        assert!(matches!(plan(&queued(&[ME, OTHER], 0), ME, None), Plan::Holder));
        assert_eq!(waits_for(plan(&queued(&[OTHER, OTHER, ME], 2), ME, None)), 2);
        assert_eq!(waits_for(plan(&queued(&[OTHER, ME], 1), ME, None)), 1);
        let mut gone = queued(&[OTHER, ME], 1);
        gone.queue.pop();
        assert!(matches!(plan(&gone, ME, None), Plan::Gone));
    }

    #[test]
    fn the_same_owner_reenters_or_watches_for_its_own_turn() {
        match plan(&queued(&[ME, OTHER, ME], 2), ME, None) {
            Plan::Reenter(c) => assert_eq!(c.seq, 1),
            _ => panic!("the holder is this owner: re-enter"),
        }
        // The tag matched but the data said otherwise: wait like anybody.
        assert_eq!(waits_for(plan(&queued(&[ME, OTHER, ME], 2), ME, Some(1))), 2);
        // This owner's other node becomes the holder when *its* predecessor
        // goes: watch that one.
        assert_eq!(waits_for(plan(&queued(&[OTHER, OTHER, ME, OTHER, ME], 4), ME, None)), 2);
    }
}
