//! The next step of a contender of a semaphore or a read-write lock
//! ([`plan`]), on its line as read (see [`Line`]; the rules are in
//! [`line`](super::line)): hold, join the owner's hold, go beside the
//! owner's write hold, or wait — and for which nodes ([`Watch`]).

use super::line::{Entry, Line};
use crate::layout::{Child, Mark};

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
    if line.entries[p].node.is_none() {
        return Step::Gone;
    }
    let planning = Planning {
        line,
        p,
        owner,
        session,
        attempt,
    };
    match me.mark {
        Mark::Permit(n) => planning.permit(n),
        Mark::Read => planning.reader(),
        Mark::Write => planning.writer(),
        Mark::Mutex => Step::Gone,
    }
}

/// One contender's step being planned: the line, the contender's place
/// `p` in it, and who asks.
struct Planning<'a> {
    line: &'a Line,
    p: usize,
    owner: &'a str,
    session: i64,
    attempt: &'a str,
}

impl Planning<'_> {
    /// Whether the node at `i` is another granted `mark` node of this
    /// owner in this session: its hold.
    fn ours(&self, i: usize, mark: Mark) -> bool {
        let e = &self.line.entries[i];
        i != self.p && e.is(mark) && e.of(self.owner, self.session) && self.line.granted(i)
    }

    /// The first node of the line that is the owner's `mark` hold (see
    /// [`Planning::ours`]) and passes `also`.
    fn our_hold(&self, mark: Mark, also: impl Fn(usize) -> bool) -> Option<usize> {
        (0..self.line.entries.len()).find(|&i| self.ours(i, mark) && also(i))
    }

    /// A permit of a semaphore of `n`: the same count as every permit
    /// before it, the same attempt's permit if the owner holds one, held
    /// among the first `n` when only permits come before it; else a waiter
    /// right behind another lock's node watches its going, the first
    /// waiter of the semaphore's run the children, every other one its
    /// predecessor's claim.
    fn permit(&self, n: u32) -> Step {
        let (entries, p) = (&self.line.entries, self.p);
        let other = entries[..p].iter().find_map(|e| match e.child.mark {
            Mark::Permit(m) if m != n => Some(m),
            _ => None,
        });
        if let Some(m) = other {
            return Step::Conflict(format!("the semaphore has {m} permits, the request says {n}"));
        }
        let repeated = |i: usize| entries[i].node.as_ref().is_some_and(|x| x.known.data.has(self.attempt));
        if let Some(i) = self.our_hold(Mark::Permit(n), repeated) {
            return Step::Join(i);
        }
        if self.line.granted(p) {
            return Step::Holder(p);
        }
        let is_permit = |e: &Entry| matches!(e.child.mark, Mark::Permit(_));
        match entries[..p].iter().rposition(|e| !is_permit(e)) {
            // Another lock's node right ahead: its going moves this one up.
            Some(b) if b + 1 == p => Step::Wait(vec![Watch::Gone(entries[b].child.name.clone())]),
            // Permits ahead wait for it too: the one right ahead claims
            // its permit (or goes) first.
            Some(_) => Step::Wait(vec![Watch::Claim(entries[p - 1].child.name.clone())]),
            None if p < n as usize => self.behind_shares(),
            None if p == n as usize => Step::Wait(vec![Watch::Children]),
            None => Step::Wait(vec![Watch::Claim(entries[p - 1].child.name.clone())]),
        }
    }

    /// Kept out by the share nodes of a mutex's hold alone (see
    /// [`Line::shares`]): waits for the first to go.
    fn behind_shares(&self) -> Step {
        match self.line.shares.first() {
            Some(share) => Step::Wait(vec![Watch::Gone(share.clone())]),
            // Not granted, nothing ahead: cannot be; look again.
            None => Step::Wait(vec![Watch::Children]),
        }
    }

    /// A reader: re-enters the owner's read hold, holds when no writer
    /// comes before it, goes beside the owner's write hold; else waits for
    /// the last writer before it (and for what the owner's own writer
    /// before it waits for).
    fn reader(&self) -> Step {
        let (entries, p) = (&self.line.entries, self.p);
        let (owner, session) = (self.owner, self.session);
        if let Some(i) = self.our_hold(Mark::Read, |_| true) {
            return Step::Join(i);
        }
        if self.line.granted(p) {
            return Step::Holder(p);
        }
        if self.ours(0, Mark::Write) {
            return Step::Beside(0);
        }
        // The last writer before it going lets it in; so may the owner's
        // own writer before it coming to hold (beside it): watch what
        // that one waits for too.
        let mut on: Vec<Watch> = entries[..p]
            .iter()
            .rev()
            .find(|e| !e.is(Mark::Read))
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
        if on.is_empty() {
            return self.behind_shares();
        }
        Step::Wait(on)
    }

    /// A writer: re-enters the owner's write hold (a read hold cannot be
    /// upgraded), holds when first and alone; else waits for its
    /// predecessor (first: for a reader beside another owner's hold).
    fn writer(&self) -> Step {
        let (entries, p) = (&self.line.entries, self.p);
        if let Some(i) = self.our_hold(Mark::Write, |_| true) {
            return Step::Join(i);
        }
        if self.our_hold(Mark::Read, |_| true).is_some() {
            return Step::Conflict(
                "the owner holds it for reading: a read hold cannot be upgraded; release it first".to_owned(),
            );
        }
        if self.line.granted(p) {
            return Step::Holder(p);
        }
        let ahead = match p {
            0 => entries.iter().find(|e| e.beside && !e.same_holder(&entries[p])),
            _ => entries.get(p - 1),
        };
        match ahead {
            Some(e) => Step::Wait(vec![Watch::Gone(e.child.name.clone())]),
            None => self.behind_shares(),
        }
    }
}

#[cfg(test)]
mod tests {
    use lockkit_core::LockKind;

    use super::super::line::Node;
    use super::*;
    use crate::change::Known;
    use crate::layout::{NodeData, child_stem};

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
            shares: Vec::new(),
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
        assert_eq!(l.waiting(LockKind::Permit { permits: 2 }), 1);
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
        assert_eq!(l.waiting(LockKind::Write), 2);
        let l = line(&[(w, "c", ME, None), (r, "a", 2, None)]);
        assert_eq!(step(&l, 0, "c"), Step::Holder(0));
        assert_eq!(l.token(0), Some(101));
    }

    #[test]
    fn kinds_of_one_name_share_one_line() {
        let (m, p, r, w) = (Mark::Mutex, Mark::Permit(2), Mark::Read, Mark::Write);
        let gone = |l: &Line, i: usize| Watch::Gone(l.entries[i].child.name.clone());
        // A mutex first: nobody behind it holds; each waits for the node
        // right ahead that keeps it out.
        let l = line(&[
            (m, "a", 2, None),
            (p, "b", 3, None),
            (p, "c", ME, None),
            (r, "d", ME, None),
        ]);
        assert!(l.granted(0) && !l.granted(1) && !l.granted(2) && !l.granted(3));
        assert_eq!(step(&l, 1, "b"), Step::Wait(vec![gone(&l, 0)]));
        let claim = Watch::Claim(l.entries[1].child.name.clone());
        assert_eq!(step(&l, 2, "c"), Step::Wait(vec![claim]));
        assert_eq!(step(&l, 3, "d"), Step::Wait(vec![gone(&l, 2)]));
        assert_eq!(l.waiting(LockKind::Permit { permits: 2 }), 2);
        assert_eq!(l.waiting(LockKind::Read), 1);
        assert_eq!(l.first_hold("x").map(|h| h.kind), Some(LockKind::Mutex));
        // Permits hold together; a writer behind them waits, and so does
        // a reader behind the writer.
        let l = line(&[
            (p, "a", 2, None),
            (p, "b", 3, None),
            (w, "c", ME, None),
            (r, "d", ME, None),
        ]);
        assert!(l.granted(0) && l.granted(1));
        assert_eq!(step(&l, 2, "c"), Step::Wait(vec![gone(&l, 1)]));
        assert_eq!(step(&l, 3, "d"), Step::Wait(vec![gone(&l, 2)]));
        let first = l.first_hold("x").unwrap();
        assert_eq!(
            (first.kind, first.owner.as_str()),
            (LockKind::Permit { permits: 2 }, "a")
        );
        // The owner of a read hold waits for it as a mutex's or permit's
        // owner: no join across kinds.
        let l = line(&[(r, "a", ME, None), (p, "a", ME, None)]);
        assert_eq!(step(&l, 1, "a"), Step::Wait(vec![gone(&l, 0)]));
        // Share nodes of a mutex's hold keep the whole line out.
        let mut l = line(&[(p, "a", ME, None)]);
        l.shares = vec!["share-x".into()];
        assert!(!l.granted(0));
        assert_eq!(step(&l, 0, "a"), Step::Wait(vec![Watch::Gone("share-x".into())]));
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
