//! The contender queue of one lock name on ZooKeeper primitives: reading
//! it (listing, `sync`, a node's data) and planning a contender's next
//! step from it ([`plan`]). Joining it is in [`crate::enqueue`], changing
//! the shares a node carries in [`crate::change`], the hold the queue
//! carries in [`crate::hold`], what a failed acquisition left in
//! [`crate::leftover`].

use std::future::Future;

use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, Error as ZkError, OneshotWatcher, Stat};

use crate::change::Known;
use crate::conn::counters::Counters;
use crate::conn::reconnect::Reconnect;
use crate::conn::session::Session;
use crate::error::is_connection_loss;
use crate::layout::{Child, Mark, NodeData, Share, besides, parse_last_write, queue, shares, write_record_path};
use crate::result::ZkResult;

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
    /// The readers the beside markers of the last listing name (a
    /// read-write lock's, see `layout::beside_name`).
    pub(crate) beside: Vec<String>,
    /// A reader's: the read-write lock's last write token, read right
    /// behind the last listing.
    pub(crate) last_write: Option<i64>,
    /// The connection epoch the listing was made in.
    pub(crate) epoch: CancellationToken,
    /// The listing is the one made right behind the node's create, and
    /// nothing changed among the parent's children in between (its `pzxid`
    /// is the node's creation zxid): the line as it was when the node was
    /// created. A contender granted on it held from its create on and takes
    /// its hold without a claim (see [`crate::claim`]).
    pub(crate) at_creation: bool,
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
    // Only a mutex hold is joined: the owner's hold of another kind of
    // this name is waited for like anybody's.
    let ours_queued = |c: &Child| c.mark == Mark::Mutex && ours(&c.name, c.owner_tag);
    if q.shares.iter().any(|s| ours(&s.name, s.owner_tag)) {
        return Plan::Join;
    }
    if let Some(share) = q.shares.first() {
        // Another owner's hold stands on its share nodes. The first
        // contender (or this owner's node, if it is first) waits for them.
        return match q.queue[..me].iter().position(ours_queued) {
            None if me == 0 => Plan::Wait(share.name.clone()),
            Some(0) => Plan::Wait(share.name.clone()),
            Some(i) => Plan::Wait(q.queue[i - 1].name.clone()),
            None => Plan::Wait(q.queue[me - 1].name.clone()),
        };
    }
    if me == 0 {
        return Plan::Holder;
    }
    if ours_queued(&q.queue[0]) {
        return Plan::Join;
    }
    // A node of this owner further ahead becomes the holder when its own
    // predecessor goes: watch that one, so re-entry is not missed.
    // Otherwise (always, unless one owner queues twice) the direct predecessor.
    let watch = q.queue[1..me].iter().position(ours_queued).unwrap_or(me - 1);
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
    Ok(get(client, path)
        .await?
        .map(|(data, stat)| (NodeData::decode(&data), stat)))
}

/// A node's raw data and stat; `None` if the node does not exist. Retried
/// over connection losses.
pub(crate) async fn get(client: &Client, path: &str) -> ZkResult<Option<(Vec<u8>, Stat)>> {
    let mut lost = Reconnect::new(client);
    loop {
        match client.get_data(path).await {
            Ok(found) => return Ok(Some(found)),
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) if is_connection_loss(&e) => lost.wait(e).await?,
            Err(e) => return Err(e),
        }
    }
}

/// Lists the parent again, noting the connection epoch first.
pub(crate) async fn refresh(session: &Session, q: &mut Queued) -> ZkResult<()> {
    q.epoch = session.epoch();
    Counters::bump(&session.counters().listings);
    let client = &session.client;
    let listing = client.list_children(&q.parent);
    let reading = q.last_write_read(client);
    let children = match listing.await {
        Ok(children) => children,
        Err(ZkError::NoNode) => Vec::new(),
        Err(e) if is_connection_loss(&e) => list(client, &q.parent).await?,
        Err(e) => return Err(e),
    };
    q.listed(&children);
    q.last_write_from(client, reading).await
}

/// Lists the parent again as [`refresh`] does, arming a watch of its
/// children with the same request: `None` when the answer was lost (then
/// listed without one). For a waiter that expects to wait for the
/// children's next change: it arms that watch without a second listing.
pub(crate) async fn refresh_watching(session: &Session, q: &mut Queued) -> ZkResult<Option<OneshotWatcher>> {
    q.epoch = session.epoch();
    Counters::bump(&session.counters().listings);
    let listing = session.client.list_and_watch_children(&q.parent);
    let reading = q.last_write_read(&session.client);
    match listing.await {
        Ok((children, watcher)) => {
            q.listed(&children);
            q.last_write_from(&session.client, reading).await?;
            Ok(Some(watcher))
        }
        Err(ZkError::NoNode) => {
            q.listed(&[]);
            Ok(None)
        }
        Err(e) if is_connection_loss(&e) => refresh(session, q).await.map(|()| None),
        Err(e) => Err(e),
    }
}

/// The parent's data being read.
pub(crate) type ParentRead = std::pin::Pin<Box<dyn Future<Output = ZkResult<(Vec<u8>, Stat)>> + Send>>;

impl Queued {
    /// A reader's read of the read-write lock's last write token, sent
    /// now: right behind the listing, so it has seen the token every
    /// writer the listing shows gone recorded.
    fn last_write_read(&self, client: &Client) -> Option<ParentRead> {
        let record = write_record_path(&self.parent);
        (self.me.mark == Mark::Read).then(|| Box::pin(client.get_data(&record)) as ParentRead)
    }

    /// Takes the last write token `reading` read.
    pub(crate) async fn last_write_from(&mut self, client: &Client, reading: Option<ParentRead>) -> ZkResult<()> {
        let Some(reading) = reading else { return Ok(()) };
        self.last_write = Some(match reading.await {
            Ok((data, _)) => parse_last_write(&data),
            Err(ZkError::NoNode) => 0,
            Err(e) if is_connection_loss(&e) => get(client, &write_record_path(&self.parent))
                .await?
                .map_or(0, |(data, _)| parse_last_write(&data)),
            Err(e) => return Err(e),
        });
        Ok(())
    }

    /// Takes a new listing of the parent's children.
    fn listed(&mut self, children: &[String]) {
        self.at_creation = false;
        self.queue = queue(children);
        self.shares = shares(children);
        self.beside = besides(children).into_iter().map(str::to_owned).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::child_stem;

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
            beside: Vec::new(),
            last_write: None,
            epoch: CancellationToken::new(),
            at_creation: false,
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
