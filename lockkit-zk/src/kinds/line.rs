//! The line of a name as a semaphore's or a read-write lock's contender
//! sees it ([`Line`]): every contender node of the name, whatever its kind,
//! in listing order, the data of the few a step needs, and which of them
//! hold. A name is one lock whatever the kind: a node of another lock
//! (a mutex, another kind than a read-write lock's read and write) keeps
//! everyone behind it out until it goes, and share nodes of a mutex's hold
//! keep the whole line out (see `layout::admits`). The next step of a
//! contender on it is planned in [`plan`](super::plan).
//!
//! Every step costs O(1) requests whatever the length of the line: one
//! listing, and beside it reads of this owner's nodes only (for re-entry
//! and repeated attempts) and of a read-write lock's write record (the
//! last write token) — the kind, the permit count, the owner's tag and a
//! reader's grant beside a writer are all in names. Each waiter watches one
//! node (a reader behind its owner's queued writer: two), so a release wakes
//! only the waiters it admits.
//!
//! **Semaphore** of N permits: a contender holds when only permits come
//! before it, fewer than N (each node one permit, with its creation zxid as
//! token). The first waiter (N permits before it) watches the parent's
//! children: any of the N that goes lets it in. A waiter right behind
//! another lock's node watches that node's going; every other waiter
//! watches its predecessor's data: that one's claim (see below) or its
//! going moves it up. The count is in every node's name: a contender with
//! another count than a node before it is refused (`Conflict`). A node of
//! the same attempt that holds is the same permit.
//!
//! **Read-write lock** (Curator's `InterProcessReadWriteLock` recipe): a
//! writer holds when it is first and no reader granted beside another
//! owner's write hold stands (below); it watches its predecessor. A reader
//! holds when only readers come before it; it watches the last node before
//! it that does not read. A reader of the owner of the first, holding,
//! writer is granted beside it (and so downgrades): its node records that
//! writer's token in its data (`NodeData::token`), written only while that
//! writer's node stands (a `multi` with a check) and with a beside marker
//! (see `layout::beside_name`), and a later writer that comes first waits
//! for such readers of other owners too. Re-entry (and a repeated attempt)
//! adds the attempt to the owner's holding node of this session. A reader's
//! token is the last write token, kept in the write record (see
//! `layout::write_record_path`). Readers and writers watch for their nodes'
//! going only (a children watch of the node, which has none), not for
//! claims.
//!
//! **Claims**: a contender that comes to hold after it queued writes its
//! node (version 0 to 1) before it takes the hold (see [`crate::claim`]);
//! only a node that held from its create
//! on holds unwritten. A semaphore's waiter behind the first one wakes on
//! that claim.

use lockkit_core::raw::Hold;
use lockkit_core::{LockInfo, LockKind};
use zookeeper_client::{Client, Error as ZkError, Stat};

use crate::change::Known;
use crate::error::is_connection_loss;
use crate::layout::{
    Child, Mark, NodeData, Share, admits, besides, parse_last_write, queue, shares, write_record_path,
};
use crate::queue::{get, list, read, sync};
use crate::result::ZkResult;

/// A contender node's data and session, as read.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub(crate) known: Known,
    /// The session the (ephemeral) node belongs to.
    pub(crate) session: i64,
}

/// One contender of the line.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) child: Child,
    pub(crate) path: String,
    /// Its data, if read (see [`Scope`]) and still there.
    pub(crate) node: Option<Node>,
    /// A reader granted beside a write hold (it has a beside marker).
    pub(crate) beside: bool,
}

impl Entry {
    /// Whether it is a contender of the kind of `mark`.
    pub(crate) fn is(&self, mark: Mark) -> bool {
        self.child.mark == mark
    }

    /// The token of the write hold a reader was granted beside.
    fn beside_token(&self) -> Option<i64> {
        self.node
            .as_ref()
            .and_then(|n| n.known.data.token)
            .filter(|_| self.is(Mark::Read))
    }

    fn owner(&self) -> Option<&str> {
        self.node.as_ref().map(|n| n.known.data.owner.as_str())
    }

    fn session(&self) -> Option<i64> {
        self.node.as_ref().map(|n| n.session)
    }

    /// Whether this node is `owner`'s in `session` (known only once read).
    pub(crate) fn of(&self, owner: &str, session: i64) -> bool {
        self.owner() == Some(owner) && self.session() == Some(session)
    }

    /// Whether it is read and of the same owner and session as `other`.
    pub(crate) fn same_holder(&self, other: &Entry) -> bool {
        self.node.is_some() && self.owner() == other.owner() && self.session() == other.session()
    }
}

/// The contenders of one name, every kind, in line order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Line {
    pub(crate) entries: Vec<Entry>,
    /// A read-write lock's last write token (0: never written).
    pub(crate) last_write: i64,
    /// The share nodes of a mutex's hold that outlived its contender node:
    /// while one stands nobody of the line holds (see [`crate::hold`]).
    pub(crate) shares: Vec<String>,
    /// How many nodes were read for it.
    pub(crate) reads: usize,
}

/// Whose nodes' data a reading of the line takes (a reader granted beside a
/// writer, and the first node when there is such a reader, always).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Every node's: the inspections.
    All,
    /// The nodes of the owner with this tag (which include the reader's
    /// own): a contender's step, a release.
    Owner(u64),
    /// None but what the grants need: counting the waiters.
    Grants,
}

/// A node's data being read.
type Reading<'a> = std::pin::Pin<Box<dyn Future<Output = ZkResult<(Vec<u8>, Stat)>> + Send + 'a>>;

/// A listing of a line's parent, as a contender knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listed<'a> {
    /// The contenders of every kind, in line order.
    pub(crate) queue: &'a [Child],
    /// The share nodes of a mutex's hold.
    pub(crate) shares: &'a [Share],
    /// The readers granted beside a writer (see `layout::beside_name`).
    pub(crate) beside: &'a [String],
    pub(crate) mark: Mark,
    /// The contender's own node as it knows it (not read again: a write
    /// it does not know of only makes its next versioned write fail).
    pub(crate) own: Option<(&'a Child, &'a Node)>,
    /// A read-write lock's last write token, read with the listing.
    pub(crate) last_write: Option<i64>,
}

/// The line of `parent` as `listed`: the data of the nodes `scope` names,
/// and a read-write lock's last write token unless known, read pipelined.
/// The listing decides the order; a node read gone meanwhile stays in line
/// unread.
pub(crate) async fn read_line(client: &Client, parent: &str, listed: Listed<'_>, scope: Scope) -> ZkResult<Line> {
    let Listed {
        queue,
        shares,
        beside,
        mark,
        own,
        last_write,
    } = listed;
    let rw = matches!(mark, Mark::Read | Mark::Write);
    let record = write_record_path(parent);
    let parent_read: Option<Reading<'_>> =
        (rw && last_write.is_none()).then(|| Box::pin(client.get_data(&record)) as Reading<'_>);
    let mut line = Line {
        last_write: last_write.unwrap_or(0),
        shares: shares.iter().map(|s| s.name.clone()).collect(),
        ..Line::default()
    };
    let mut reads = Vec::new();
    for (i, child) in queue.iter().cloned().enumerate() {
        let is_beside = rw && beside.contains(&child.name);
        if let Some((me, node)) = own.filter(|(me, _)| me.name == child.name) {
            line.entries.push(Entry {
                child: me.clone(),
                path: me.path(parent),
                node: Some(node.clone()),
                beside: is_beside,
            });
            continue;
        }
        let wanted = match scope {
            Scope::All => true,
            Scope::Owner(tag) => child.owner_tag == tag,
            Scope::Grants => false,
        } || is_beside
            || (i == 0 && rw && !beside.is_empty());
        let path = child.path(parent);
        if wanted {
            let read: Reading<'_> = Box::pin(client.get_data(&path));
            reads.push((i, path.clone(), read));
        }
        line.entries.push(Entry {
            child,
            path,
            node: None,
            beside: is_beside,
        });
    }
    if let Some(reading) = parent_read {
        line.last_write = match reading.await {
            Ok((data, _)) => parse_last_write(&data),
            Err(ZkError::NoNode) => 0,
            Err(e) if is_connection_loss(&e) => get(client, &record).await?.map_or(0, |(d, _)| parse_last_write(&d)),
            Err(e) => return Err(e),
        };
    }
    line.reads = reads.len();
    for (i, path, reading) in reads {
        let node = match reading.await {
            Ok((data, stat)) => Some((NodeData::decode(&data), stat)),
            Err(ZkError::NoNode) => None,
            Err(e) if is_connection_loss(&e) => read(client, &path).await?,
            Err(e) => return Err(e),
        };
        if let Some((Some(data), stat)) = node {
            line.entries[i].node = Some(Node {
                session: stat.ephemeral_owner,
                known: Known::read(data, &stat),
            });
        }
    }
    Ok(line)
}

/// The line of `name` of `kind`, listed and read now (the data `scope`
/// names).
pub(crate) async fn line_of(client: &Client, parent: &str, kind: LockKind, scope: Scope) -> ZkResult<Line> {
    let children = list(client, parent).await?;
    let mark = Mark::of(kind);
    let beside: Vec<String> = besides(&children).into_iter().map(str::to_owned).collect();
    let queue = queue(&children);
    let shares = shares(&children);
    let listed = Listed {
        queue: &queue,
        shares: &shares,
        beside: &beside,
        mark,
        own: None,
        last_write: None,
    };
    read_line(client, parent, listed, scope).await
}

/// The line of `name` of `kind` as every other client's answered writes
/// left it: read after a `sync` (the server read from, a follower of an
/// ensemble, has applied what the leader committed before), for the
/// inspections (`holders`, `waiting_for`).
pub(crate) async fn line_synced(client: &Client, parent: &str, kind: LockKind, scope: Scope) -> ZkResult<Line> {
    match sync(client, parent).await {
        Ok(()) | Err(ZkError::NoNode) => {}
        Err(e) => return Err(e),
    }
    line_of(client, parent, kind, scope).await
}

impl Line {
    /// Whether the contender at `i` holds (or, unclaimed, may take its
    /// hold: see [`crate::claim`]).
    pub(crate) fn granted(&self, i: usize) -> bool {
        if !self.shares.is_empty() {
            return false;
        }
        let e = &self.entries[i];
        match e.child.mark {
            Mark::Write => i == 0 && self.entries.iter().all(|x| !x.beside || x.same_holder(e)),
            Mark::Read if e.beside => true,
            mark => admits(mark, i, self.entries[..i].iter().map(|x| x.child.mark)),
        }
    }

    /// The fencing token of the hold at `i` (read): a reader's is the last
    /// write token (or that of the write hold it was granted beside),
    /// anyone else's its node's creation zxid.
    pub(crate) fn token(&self, i: usize) -> Option<i64> {
        let e = &self.entries[i];
        match e.child.mark {
            Mark::Read => Some(e.beside_token().unwrap_or(self.last_write)),
            _ => e.node.as_ref().map(|n| n.known.czxid),
        }
    }

    /// The holds of `kind` (as read), in line (= grant) order.
    pub(crate) fn holders(&self, name: &str, kind: LockKind) -> Vec<LockInfo> {
        let mark = Mark::of(kind);
        (0..self.entries.len())
            .filter(|&i| self.granted(i) && mark.same_space(self.entries[i].child.mark))
            .filter(|&i| !matches!(mark, Mark::Read | Mark::Write) || self.entries[i].is(mark))
            .filter_map(|i| self.info(i, name, kind))
            .collect()
    }

    /// The first hold of the line (as read), whatever its kind.
    pub(crate) fn first_hold(&self, name: &str) -> Option<LockInfo> {
        (0..self.entries.len())
            .filter(|&i| self.granted(i))
            .find_map(|i| self.info(i, name, self.entries[i].child.mark.kind()))
    }

    /// The hold at `i` as a hold of `kind`, if its node was read.
    fn info(&self, i: usize, name: &str, kind: LockKind) -> Option<LockInfo> {
        let node = self.entries[i].node.as_ref()?;
        Some(LockInfo {
            name: name.to_owned(),
            owner: node.known.data.owner.clone(),
            hold_count: node.known.data.count(),
            token: self.token(i)? as u64,
            remaining: None,
            kind,
        })
    }

    /// How many contenders of the lock of `kind` wait (a read-write
    /// lock's readers and writers together).
    pub(crate) fn waiting(&self, kind: LockKind) -> usize {
        let mark = Mark::of(kind);
        (0..self.entries.len())
            .filter(|&i| mark.same_space(self.entries[i].child.mark) && !self.granted(i))
            .count()
    }

    /// Where the hold `hold` is in the line: its node (a reader's of
    /// `session`: an owner's readers of other sessions are holds of their
    /// own). The line must have read the owner's nodes.
    pub(crate) fn find(&self, hold: &Hold, session: i64) -> Option<usize> {
        let mark = Mark::of(hold.kind);
        (0..self.entries.len()).find(|&i| {
            let e = &self.entries[i];
            let token = i64::try_from(hold.token).ok() == self.token(i);
            let same = match mark {
                Mark::Read => e.is(Mark::Read) && e.session() == Some(session) && self.granted(i),
                Mark::Write => e.is(Mark::Write),
                _ => mark.same_space(e.child.mark),
            };
            same && token && e.owner() == Some(hold.owner.as_str())
        })
    }

    /// Where the contender `me` is in the line.
    pub(crate) fn position(&self, me: &Child) -> Option<usize> {
        self.entries.iter().position(|e| e.child.name == me.name)
    }
}
