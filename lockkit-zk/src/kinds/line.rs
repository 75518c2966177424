//! The line of a semaphore or a read-write lock ([`Line`]): its contender
//! nodes in listing order, the data of the few a step needs, which of them
//! hold, and the next step of a contender ([`plan`]).
//!
//! Every step costs O(1) requests whatever the length of the line: one
//! listing, and beside it reads of this owner's nodes only (for re-entry
//! and repeated attempts) and of a read-write lock's parent (the last
//! write token) — the kind, the permit count, the owner's tag and a
//! reader's grant beside a writer are all in names. Each waiter watches one
//! node (a reader behind its owner's queued writer: two), so a release wakes
//! only the waiters it admits.
//!
//! **Semaphore** of N permits: a contender holds when fewer than N nodes
//! come before it (each node one permit, with its creation zxid as token).
//! The first waiter (N nodes before it) watches the parent's children: any
//! of the N that goes lets it in. Every waiter behind it watches its
//! predecessor's data: that one's claim (see below) or its going moves it
//! up. The count is in every node's name: a contender with another count
//! than a node before it is refused (`Conflict`). A node of the same
//! attempt that holds is the same permit.
//!
//! **Read-write lock** (Curator's `InterProcessReadWriteLock` recipe): a
//! writer holds when it is first and no reader granted beside another
//! owner's write hold stands (below); it watches its predecessor. A reader
//! holds when no writer comes before it; it watches the last writer before
//! it. A reader of the owner of the first, holding, writer is granted
//! beside it (and so downgrades): its node records that writer's token in
//! its data (`NodeData::token`), written only while that writer's node
//! stands (a `multi` with a check) and with a beside marker (see
//! `layout::beside_name`), and a later writer that comes first waits for
//! such readers of other owners too. Re-entry (and a repeated attempt) adds
//! the attempt to the owner's holding node of this session. A reader's
//! token is the last write token, kept in the parent's data (see
//! [`crate::kinds`]). Readers and writers watch for their nodes' going
//! only (a children watch of the node, which has none), not for claims.
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
use crate::layout::{Child, Mark, NodeData, besides, parse_last_write, queue_of};
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
    fn is(&self, mark: Mark) -> bool {
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
    fn of(&self, owner: &str, session: i64) -> bool {
        self.owner() == Some(owner) && self.session() == Some(session)
    }

    fn same_holder(&self, other: &Entry) -> bool {
        self.node.is_some() && self.owner() == other.owner() && self.session() == other.session()
    }
}

/// The contenders of one name of one kind, in line order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Line {
    pub(crate) entries: Vec<Entry>,
    /// A read-write lock's last write token (0: never written).
    pub(crate) last_write: i64,
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
    /// The contenders of the kind of `mark`, in line order.
    pub(crate) queue: &'a [Child],
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
        beside,
        mark,
        own,
        last_write,
    } = listed;
    let rw = matches!(mark, Mark::Read | Mark::Write);
    let parent_read: Option<Reading<'_>> =
        (rw && last_write.is_none()).then(|| Box::pin(client.get_data(parent)) as Reading<'_>);
    let mut line = Line {
        last_write: last_write.unwrap_or(0),
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
            Err(e) if is_connection_loss(&e) => get(client, parent).await?.map_or(0, |(d, _)| parse_last_write(&d)),
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
    let queue = queue_of(&children, mark);
    let listed = Listed {
        queue: &queue,
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
        let e = &self.entries[i];
        match e.child.mark {
            Mark::Permit(n) => i < n as usize,
            Mark::Write => i == 0 && self.entries.iter().all(|x| !x.beside || x.same_holder(e)),
            Mark::Read => e.beside || !self.entries[..i].iter().any(|x| x.is(Mark::Write)),
            Mark::Mutex => i == 0,
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
            .filter_map(|i| {
                let node = self.entries[i].node.as_ref()?;
                Some(LockInfo {
                    name: name.to_owned(),
                    owner: node.known.data.owner.clone(),
                    hold_count: node.known.data.count(),
                    token: self.token(i)? as u64,
                    remaining: None,
                })
            })
            .collect()
    }

    /// How many contenders wait (readers and writers share one line).
    pub(crate) fn waiting(&self) -> usize {
        (0..self.entries.len()).filter(|&i| !self.granted(i)).count()
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

    fn position(&self, me: &Child) -> Option<usize> {
        self.entries.iter().position(|e| e.child.name == me.name)
    }
}

/// A node a waiter watches, and for what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Watch {
    /// This node's going (a children watch of the node itself: it has no
    /// children, so only its deletion fires it).
    Gone(String),
    /// This node's claim or its going (a data watch): a semaphore's waiter
    /// moves up when its predecessor takes a permit.
    Claim(String),
    /// Any change of the parent's children: the semaphore's first waiter,
    /// whom any permit that goes lets in.
    Children,
}

/// What a contender of a semaphore or read-write lock does next.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// Its node is gone.
    Gone,
    /// Its own node holds, at this index of the line.
    Holder(usize),
    /// The owner's holding node at this index is the hold (a repeated
    /// attempt, or a re-entry): add the attempt there, drop its own node.
    Join(usize),
    /// A reader of the owner of the holding writer at this index: granted
    /// beside it.
    Beside(usize),
    /// Wait for any of these (never empty).
    Wait(Vec<Watch>),
    /// The request does not fit the name's state.
    Conflict(String),
}

/// The next step of the contender `me` of `owner` (in `session`) asking
/// with `attempt`, on a line that read the owner's nodes.
pub(crate) fn plan(line: &Line, me: &Child, owner: &str, session: i64, attempt: &str) -> Step {
    let Some(p) = line.position(me) else {
        return Step::Gone;
    };
    let entries = &line.entries;
    if entries[p].node.is_none() {
        return Step::Gone;
    }
    let ours = |i: usize, mark: Mark| {
        let e = &entries[i];
        i != p && e.is(mark) && e.of(owner, session) && line.granted(i)
    };
    let others = 0..entries.len();
    match me.mark {
        Mark::Permit(n) => {
            let other = entries[..p].iter().find_map(|e| match e.child.mark {
                Mark::Permit(m) if m != n => Some(m),
                _ => None,
            });
            if let Some(m) = other {
                return Step::Conflict(format!("the semaphore has {m} permits, the request says {n}"));
            }
            let repeated = |i: usize| entries[i].node.as_ref().is_some_and(|x| x.known.data.has(attempt));
            if let Some(i) = others.clone().find(|&i| ours(i, me.mark) && repeated(i)) {
                return Step::Join(i);
            }
            if line.granted(p) {
                return Step::Holder(p);
            }
            match p == n as usize {
                true => Step::Wait(vec![Watch::Children]),
                false => Step::Wait(vec![Watch::Claim(entries[p - 1].child.name.clone())]),
            }
        }
        Mark::Read => {
            if let Some(i) = others.clone().find(|&i| ours(i, Mark::Read)) {
                return Step::Join(i);
            }
            if line.granted(p) {
                return Step::Holder(p);
            }
            if ours(0, Mark::Write) {
                return Step::Beside(0);
            }
            // The last writer before it going lets it in; so may the owner's
            // own writer before it coming to hold (beside it): watch what
            // that one waits for too.
            let mut on: Vec<Watch> = entries[..p]
                .iter()
                .rev()
                .find(|e| e.is(Mark::Write))
                .map(|e| Watch::Gone(e.child.name.clone()))
                .into_iter()
                .collect();
            let own = entries[..p]
                .iter()
                .position(|e| e.is(Mark::Write) && e.of(owner, session));
            if let Some(j) = own {
                let ahead = match j {
                    0 => entries.iter().find(|e| e.beside && !e.of(owner, session)),
                    _ => entries.get(j - 1),
                };
                let ahead = ahead.map(|e| Watch::Gone(e.child.name.clone()));
                on.extend(ahead.filter(|w| !on.contains(w)));
            }
            Step::Wait(on)
        }
        Mark::Write => {
            if let Some(i) = others.clone().find(|&i| ours(i, Mark::Write)) {
                return Step::Join(i);
            }
            if others.clone().any(|i| ours(i, Mark::Read)) {
                return Step::Conflict(
                    "the owner holds it for reading: a read hold cannot be upgraded; release it first".to_owned(),
                );
            }
            if line.granted(p) {
                return Step::Holder(p);
            }
            let ahead = match p {
                0 => entries.iter().find(|e| e.beside && !e.same_holder(&entries[p])),
                _ => entries.get(p - 1),
            };
            match ahead {
                Some(e) => Step::Wait(vec![Watch::Gone(e.child.name.clone())]),
                // Not granted, nobody ahead: cannot be; look again.
                None => Step::Wait(vec![Watch::Children]),
            }
        }
        Mark::Mutex => Step::Gone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::child_stem;

    const ME: i64 = 1;

    /// A line of (mark, owner, session, beside-token) with sequences 1, 2, ….
    fn line(nodes: &[(Mark, &str, i64, Option<i64>)]) -> Line {
        let entries = nodes
            .iter()
            .enumerate()
            .map(|(i, (mark, owner, session, token))| {
                let seq = i as i64 + 1;
                let infix = match mark {
                    Mark::Permit(n) => format!("p{n}-"),
                    Mark::Read => "r-".into(),
                    Mark::Write => "w-".into(),
                    Mark::Mutex => String::new(),
                };
                let name = format!("{}{infix}{seq:010}", child_stem(7, &format!("{seq:016x}")));
                let child = Child::parse(&name).unwrap();
                assert_eq!(child.mark, *mark);
                let mut data = NodeData::contender(owner, &format!("{seq:016x}"));
                data.token = *token;
                Entry {
                    path: child.path("/rw"),
                    beside: *mark == Mark::Read && token.is_some(),
                    child,
                    node: Some(Node {
                        known: Known {
                            data,
                            version: 0,
                            czxid: 100 + seq,
                        },
                        session: *session,
                    }),
                }
            })
            .collect();
        Line {
            entries,
            last_write: 50,
            reads: 0,
        }
    }

    fn step(l: &Line, i: usize, owner: &str) -> Step {
        let attempt = format!("{:016x}", i + 1);
        plan(l, &l.entries[i].child, owner, ME, &attempt)
    }

    #[test]
    fn permits_hold_up_to_the_count_and_agree_on_it() {
        let p = Mark::Permit(2);
        let l = line(&[(p, "a", ME, None), (p, "b", 2, None), (p, "c", 3, None)]);
        assert_eq!(step(&l, 1, "b"), Step::Holder(1));
        assert_eq!(step(&l, 2, "c"), Step::Wait(vec![Watch::Children]));
        assert_eq!(l.waiting(), 1);
        // Behind the first waiter: its predecessor's claim moves it up.
        let l = line(&[
            (p, "a", 2, None),
            (p, "b", 3, None),
            (p, "c", 4, None),
            (p, "d", ME, None),
        ]);
        let claim = Watch::Claim(l.entries[2].child.name.clone());
        assert_eq!(step(&l, 3, "d"), Step::Wait(vec![claim]));
        let l = line(&[(p, "a", ME, None), (Mark::Permit(5), "b", ME, None)]);
        assert!(matches!(step(&l, 1, "b"), Step::Conflict(_)));
        assert_eq!(l.holders("x", LockKind::Permit { permits: 2 }).len(), 2);
    }

    #[test]
    fn readers_share_writers_are_alone() {
        let (r, w) = (Mark::Read, Mark::Write);
        let l = line(&[
            (r, "a", 2, None),
            (r, "b", 3, None),
            (w, "c", 4, None),
            (r, "d", ME, None),
        ]);
        assert_eq!(step(&l, 1, "b"), Step::Holder(1));
        assert_eq!(l.token(1), Some(50), "a reader carries the last write token");
        let gone = |i: usize| Watch::Gone(l.entries[i].child.name.clone());
        assert_eq!(step(&l, 2, "c"), Step::Wait(vec![gone(1)]));
        assert_eq!(step(&l, 3, "d"), Step::Wait(vec![gone(2)]));
        assert_eq!(l.waiting(), 2);
        let l = line(&[(w, "c", ME, None), (r, "a", 2, None)]);
        assert_eq!(step(&l, 0, "c"), Step::Holder(0));
        assert_eq!(l.token(0), Some(101));
    }

    #[test]
    fn reentry_beside_and_no_upgrade() {
        let (r, w) = (Mark::Read, Mark::Write);
        // A reader re-enters its hold while a writer waits.
        let l = line(&[(r, "a", ME, None), (w, "c", 2, None), (r, "a", ME, None)]);
        assert_eq!(step(&l, 2, "a"), Step::Join(0));
        // No upgrade.
        let l = line(&[(r, "a", ME, None), (w, "a", ME, None)]);
        assert!(matches!(step(&l, 1, "a"), Step::Conflict(_)));
        // Read beside one's own write hold, then the writer after it waits
        // for that reader.
        let l = line(&[(w, "a", ME, None), (w, "c", 2, None), (r, "a", ME, None)]);
        assert_eq!(step(&l, 2, "a"), Step::Beside(0));
        // Behind its owner's queued writer, a reader also watches what
        // that writer waits for: it may go beside it once it holds.
        let l = line(&[(w, "c", 2, None), (w, "a", ME, None), (r, "a", ME, None)]);
        let gone = |i: usize| Watch::Gone(l.entries[i].child.name.clone());
        assert_eq!(step(&l, 2, "a"), Step::Wait(vec![gone(1), gone(0)]));
        let l = line(&[(w, "c", 2, None), (r, "a", ME, Some(101))]);
        assert!(!l.granted(0) && l.granted(1));
        assert_eq!(l.token(1), Some(101));
        assert_eq!(
            plan(&l, &l.entries[0].child, "c", 2, "0000000000000001"),
            Step::Wait(vec![Watch::Gone(l.entries[1].child.name.clone())])
        );
    }
}
