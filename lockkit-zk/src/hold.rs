//! The hold of a lock as read from its nodes ([`View`], [`HoldView`]): the
//! first contender and the share nodes, read pipelined; the hold count
//! after a change; the operator's listing and forced release.

use std::collections::BTreeSet;
use std::pin::Pin;

use lockkit_core::LockInfo;
use zookeeper_client::{Client, Error as ZkError, Stat};

use crate::change::Known;
use crate::conn::session::Session;
use crate::error::is_connection_loss;
use crate::layout::{Child, Mark, NodeData, Share, decode_name, parent_path, queue, shares};
use crate::queue::list;
use crate::result::ZkResult;

/// One node of a hold, as read.
#[derive(Debug, Clone)]
pub(crate) struct HoldNode {
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) known: Known,
    /// The session the (ephemeral) node belongs to.
    pub(crate) session: i64,
}

impl HoldNode {
    /// The node at `path` (named `name`) as read.
    fn read(path: String, name: String, data: NodeData, stat: &Stat) -> Self {
        HoldNode {
            path,
            name,
            session: stat.ephemeral_owner,
            known: Known::read(data, stat),
        }
    }
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
    /// the old node's share back (see [`Leftover`](crate::leftover::Leftover)), or the release takes
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
            kind: lockkit_core::LockKind::Mutex,
        }
    }
}

/// What a lock's parent holds.
#[derive(Debug, Clone)]
pub(crate) enum View {
    Free,
    Held(HoldView),
    /// The first contender asks for another kind (a permit, a read or a
    /// write hold): no mutex hold stands, the name is held or awaited as
    /// that kind (see `kinds`).
    Kind,
    /// The first contender's data is not lockkit's.
    Foreign(String),
}

/// A node's data being read.
type Reading<'a> = Pin<Box<dyn Future<Output = ZkResult<(Vec<u8>, Stat)>> + Send + 'a>>;

/// The reads of a hold's candidate nodes, sent (see [`read_hold`]).
pub(crate) struct HoldReads<'a> {
    parent: String,
    first: Option<(Child, Reading<'a>)>,
    /// The first contender asks for another kind (not read).
    other: bool,
    shares: Vec<(Share, Reading<'a>)>,
}

/// Sends the reads of [`read_hold`] at once (requests go out when made), so
/// that the reads of many holds share a round trip.
pub(crate) fn start_read_hold<'a>(client: &'a Client, parent: &str, children: &[String]) -> HoldReads<'a> {
    let head = queue(children).into_iter().next();
    let other = head.as_ref().is_some_and(|c| c.mark != Mark::Mutex);
    let first = head.filter(|_| !other).map(|c| {
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
        other,
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
        let HoldReads {
            parent,
            first,
            other,
            shares,
        } = self;
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
                        nodes.push(HoldNode::read(share.path(parent), share.name, data, &stat));
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
                nodes.insert(0, HoldNode::read(format!("{parent}/{name}"), name, data, &stat));
            }
            return Ok(Some(View::Held(HoldView { owner, token, nodes })));
        }
        Ok(Some(match first {
            None if other => View::Kind,
            None => View::Free,
            Some((name, None, _)) => View::Foreign(format!("{parent}/{name}")),
            Some((name, Some(data), stat)) => View::Held(HoldView {
                owner: data.owner.clone(),
                token: stat.czxid,
                nodes: vec![HoldNode::read(format!("{parent}/{name}"), name, data, &stat)],
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

/// One hold of a lock: the lock's parent, and the hold's owner and token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HoldOf<'a> {
    pub(crate) parent: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) token: i64,
}

/// The hold `hold` after a change of this session's node `own` (its data
/// now `own_data`; `None`: deleted), from a listing made after the change.
/// Without share nodes in the listing (the common case) no other node can
/// carry the hold: no read is needed.
pub(crate) async fn count_after(
    client: &Client,
    hold: HoldOf<'_>,
    own: &str,
    own_data: Option<&NodeData>,
    listing: Option<Vec<String>>,
) -> ZkResult<After> {
    let HoldOf { parent, owner, token } = hold;
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
