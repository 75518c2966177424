//! The line of a semaphore or a read-write lock ([`Line`]): its contender
//! nodes with their data, read pipelined, which of them hold, and the next
//! step of a contender ([`plan`]).
//!
//! **Semaphore** of N permits: a contender holds when fewer than N nodes
//! come before it (each node one permit, with its creation zxid as token);
//! a waiter watches the parent's children (any permit that goes may let it
//! in, so no single node can be watched). The count is in every node's
//! name: a contender with another count than a node before it is refused
//! (`Conflict`). A node of the same attempt that holds is the same permit.
//!
//! **Read-write lock**: a writer holds when it is first and no reader
//! granted beside its owner's write hold stands (below); it watches its
//! predecessor. A reader holds when no writer comes before it; it watches
//! the last writer before it. A reader of the owner of the first, holding,
//! writer is granted beside it (and so downgrades): its node records that
//! writer's token in its data (`NodeData::token`), written only while that
//! writer's node stands (a `multi` with a check), and a later writer that
//! comes first waits for such readers of other owners too. Re-entry (and a
//! repeated attempt) adds the attempt to the owner's holding node of this
//! session. A reader's token is the last write token, kept in the parent's
//! data (see [`crate::kinds`]).

use lockkit_core::LockInfo;
use lockkit_core::backend::{Hold, LockKind};
use zookeeper_client::{Client, Error as ZkError, Stat};

use crate::change::Known;
use crate::error::is_connection_loss;
use crate::layout::{Child, Mark, NodeData, queue_of};
use crate::queue::{ZkResult, get, list, read, sync};

/// One contender of the line, as read.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) child: Child,
    pub(crate) path: String,
    pub(crate) known: Known,
    /// The session the (ephemeral) node belongs to.
    pub(crate) session: i64,
}

impl Entry {
    fn is(&self, mark: Mark) -> bool {
        self.child.mark == mark
    }

    /// The token of the write hold a reader was granted beside.
    fn beside(&self) -> Option<i64> {
        self.known.data.token.filter(|_| self.is(Mark::Read))
    }

    fn owner(&self) -> &str {
        &self.known.data.owner
    }
}

/// The contenders of one name of one kind, in line order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Line {
    pub(crate) entries: Vec<Entry>,
    /// A read-write lock's last write token (0: never written).
    pub(crate) last_write: i64,
}

/// The last write token in a read-write lock parent's data.
pub(crate) fn parse_last_write(data: &[u8]) -> i64 {
    std::str::from_utf8(data).ok().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// A node's data being read.
type Reading<'a> = std::pin::Pin<Box<dyn Future<Output = ZkResult<(Vec<u8>, Stat)>> + Send + 'a>>;

/// The line of `parent` whose contenders (of the kind of `mark`) are
/// `queue`: every node's data, and a read-write lock's last write token,
/// read pipelined. A node gone meanwhile is left out.
pub(crate) async fn read_line(client: &Client, parent: &str, queue: &[Child], mark: Mark) -> ZkResult<Line> {
    let rw = matches!(mark, Mark::Read | Mark::Write);
    let parent_read: Option<Reading<'_>> = rw.then(|| Box::pin(client.get_data(parent)) as Reading<'_>);
    let reads: Vec<(String, Reading<'_>)> = queue
        .iter()
        .map(|c| {
            let path = c.path(parent);
            let read: Reading<'_> = Box::pin(client.get_data(&path));
            (path, read)
        })
        .collect();
    let mut line = Line::default();
    if let Some(reading) = parent_read {
        line.last_write = match reading.await {
            Ok((data, _)) => parse_last_write(&data),
            Err(ZkError::NoNode) => 0,
            Err(e) if is_connection_loss(&e) => get(client, parent).await?.map_or(0, |(d, _)| parse_last_write(&d)),
            Err(e) => return Err(e),
        };
    }
    for (child, (path, reading)) in queue.iter().zip(reads) {
        let node = match reading.await {
            Ok((data, stat)) => Some((NodeData::decode(&data), stat)),
            Err(ZkError::NoNode) => None,
            Err(e) if is_connection_loss(&e) => read(client, &path).await?,
            Err(e) => return Err(e),
        };
        if let Some((Some(data), stat)) = node {
            line.entries.push(Entry {
                child: child.clone(),
                session: stat.ephemeral_owner,
                known: Known::read(data, &stat),
                path,
            });
        }
    }
    Ok(line)
}

/// The line of `name` of `kind`, listed and read now.
pub(crate) async fn line_of(client: &Client, parent: &str, kind: LockKind) -> ZkResult<Line> {
    let mark = Mark::of(kind);
    let children = list(client, parent).await?;
    read_line(client, parent, &queue_of(&children, mark), mark).await
}

/// The line of `name` of `kind` as every other client's answered writes
/// left it: read after a `sync` (the server read from, a follower of an
/// ensemble, has applied what the leader committed before), for the
/// inspections (`holders`, `waiting_for`).
pub(crate) async fn line_synced(client: &Client, parent: &str, kind: LockKind) -> ZkResult<Line> {
    match sync(client, parent).await {
        Ok(()) | Err(ZkError::NoNode) => {}
        Err(e) => return Err(e),
    }
    line_of(client, parent, kind).await
}

impl Line {
    /// Whether the contender at `i` holds.
    pub(crate) fn granted(&self, i: usize) -> bool {
        let e = &self.entries[i];
        match e.child.mark {
            Mark::Permit(n) => i < n as usize,
            Mark::Write => {
                i == 0
                    && self
                        .entries
                        .iter()
                        .all(|x| x.beside().is_none() || (x.owner() == e.owner() && x.session == e.session))
            }
            Mark::Read => e.beside().is_some() || !self.entries[..i].iter().any(|x| x.is(Mark::Write)),
            Mark::Mutex => i == 0,
        }
    }

    /// The fencing token of the hold at `i`: a reader's is the last write
    /// token (or that of the write hold it was granted beside), anyone
    /// else's its node's creation zxid.
    pub(crate) fn token(&self, i: usize) -> i64 {
        let e = &self.entries[i];
        match e.child.mark {
            Mark::Read => e.beside().unwrap_or(self.last_write),
            _ => e.known.czxid,
        }
    }

    /// The holds of `kind`, in line (= grant) order.
    pub(crate) fn holders(&self, name: &str, kind: LockKind) -> Vec<LockInfo> {
        let mark = Mark::of(kind);
        (0..self.entries.len())
            .filter(|&i| self.granted(i) && mark.same_space(self.entries[i].child.mark))
            .filter(|&i| !matches!(mark, Mark::Read | Mark::Write) || self.entries[i].is(mark))
            .map(|i| LockInfo {
                name: name.to_owned(),
                owner: self.entries[i].owner().to_owned(),
                hold_count: self.entries[i].known.data.count(),
                token: self.token(i) as u64,
                remaining: None,
            })
            .collect()
    }

    /// How many contenders wait (readers and writers share one line).
    pub(crate) fn waiting(&self) -> usize {
        (0..self.entries.len()).filter(|&i| !self.granted(i)).count()
    }

    /// Where the hold `hold` is in the line: its node (a reader's of
    /// `session`: an owner's readers of other sessions are holds of their
    /// own).
    pub(crate) fn find(&self, hold: &Hold, session: i64) -> Option<usize> {
        let mark = Mark::of(hold.kind);
        (0..self.entries.len()).find(|&i| {
            let e = &self.entries[i];
            let token = i64::try_from(hold.token).ok() == Some(self.token(i));
            let same = match mark {
                Mark::Read => e.is(Mark::Read) && e.session == session && self.granted(i),
                Mark::Write => e.is(Mark::Write),
                _ => mark.same_space(e.child.mark),
            };
            same && token && e.owner() == hold.owner
        })
    }

    fn position(&self, me: &Child) -> Option<usize> {
        self.entries.iter().position(|e| e.child.name == me.name)
    }
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
    /// Wait for any of the nodes of these names to go or change (none: for
    /// any change of the parent's children).
    Wait(Vec<String>),
    /// The request does not fit the name's state.
    Conflict(String),
}

/// The next step of the contender `me` of `owner` (in `session`) asking
/// with `attempt`.
pub(crate) fn plan(line: &Line, me: &Child, owner: &str, session: i64, attempt: &str) -> Step {
    let Some(p) = line.position(me) else {
        return Step::Gone;
    };
    let entries = &line.entries;
    let ours = |i: usize, mark: Mark| {
        let e = &entries[i];
        i != p && e.is(mark) && e.owner() == owner && e.session == session && line.granted(i)
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
            if let Some(i) = others
                .clone()
                .find(|&i| ours(i, me.mark) && entries[i].known.data.has(attempt))
            {
                return Step::Join(i);
            }
            if line.granted(p) {
                return Step::Holder(p);
            }
            Step::Wait(Vec::new())
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
            let mut on: Vec<String> = entries[..p]
                .iter()
                .rev()
                .find(|e| e.is(Mark::Write))
                .into_iter()
                .map(|e| e.child.name.clone())
                .collect();
            let own = entries[..p]
                .iter()
                .position(|e| e.is(Mark::Write) && e.owner() == owner && e.session == session);
            if let Some(j) = own {
                let ahead = match j {
                    0 => entries
                        .iter()
                        .find(|e| e.beside().is_some() && (e.owner() != owner || e.session != session)),
                    _ => entries.get(j - 1),
                };
                on.extend(ahead.map(|e| e.child.name.clone()).filter(|n| !on.contains(n)));
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
                0 => entries.iter().find(|e| e.beside().is_some() && e.owner() != owner),
                _ => entries.get(p - 1),
            };
            Step::Wait(ahead.map(|e| e.child.name.clone()).into_iter().collect())
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
                    child,
                    known: Known {
                        data,
                        version: 0,
                        czxid: 100 + seq,
                    },
                    session: *session,
                }
            })
            .collect();
        Line {
            entries,
            last_write: 50,
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
        assert_eq!(step(&l, 2, "c"), Step::Wait(Vec::new()));
        assert_eq!(l.waiting(), 1);
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
        assert_eq!(l.token(1), 50, "a reader carries the last write token");
        let name = |i: usize| l.entries[i].child.name.clone();
        assert_eq!(step(&l, 2, "c"), Step::Wait(vec![name(1)]));
        assert_eq!(step(&l, 3, "d"), Step::Wait(vec![name(2)]));
        assert_eq!(l.waiting(), 2);
        let l = line(&[(w, "c", ME, None), (r, "a", 2, None)]);
        assert_eq!(step(&l, 0, "c"), Step::Holder(0));
        assert_eq!(l.token(0), 101);
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
        let name = |i: usize| l.entries[i].child.name.clone();
        assert_eq!(step(&l, 2, "a"), Step::Wait(vec![name(1), name(0)]));
        let l = line(&[(w, "c", 2, None), (r, "a", ME, Some(101))]);
        assert!(!l.granted(0) && l.granted(1));
        assert_eq!(l.token(1), 101);
        assert_eq!(
            plan(&l, &l.entries[0].child, "c", 2, "0000000000000001"),
            Step::Wait(vec![l.entries[1].child.name.clone()])
        );
    }
}
