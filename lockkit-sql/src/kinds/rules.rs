//! The rules that grant a semaphore's or a read-write lock's request, on
//! the rows one transaction read: the same as the memory backend's
//! (`lockkit_core::memory`), so every backend serves the kinds alike.

use std::time::Duration;

use lockkit_core::LockKind;
use lockkit_core::raw::AcquireRequest;

use crate::value::{Val, from_us, text};

/// One live hold of `<table>_holds`.
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub seq: i64,
    pub owner: Vec<u8>,
    pub token: i64,
    pub writer: bool,
    /// The hold's shares (attempt ids, space-separated).
    pub attempts: String,
    pub remaining: Duration,
}

impl Row {
    /// A row as [`KindStatements::rows`](crate::sql::KindStatements) reads it.
    pub fn from_vals(vals: Vec<Val>) -> Row {
        let mut v = vals.into_iter();
        let mut next = || v.next().unwrap_or(Val::Int(0));
        Row {
            seq: next().int(),
            owner: next().into_bytes(),
            token: next().int(),
            writer: next().int() != 0,
            attempts: text(next()),
            remaining: from_us(next().int()),
        }
    }

    pub fn has(&self, attempt: &str) -> bool {
        super::hold::shares(&self.attempts).any(|a| a == attempt)
    }
}

/// What a claim needs to know of the name's line (its live waiters), as
/// [`KindStatements::rows`](crate::sql::KindStatements) reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Line {
    /// The attempt id first in line; empty when nobody waits.
    pub head: String,
    /// A writer waits ahead of the request (anywhere in line, for a
    /// request not in it).
    pub writer_ahead: bool,
    /// Anybody but the request waits.
    pub others: bool,
}

impl Line {
    /// The line's row `(-1, '', writer ahead, others, head, 0)`.
    pub fn from_vals(vals: Vec<Val>) -> Line {
        let mut v = vals.into_iter().skip(2);
        let mut next = || v.next().unwrap_or(Val::Int(0));
        let (writer_ahead, others) = (next().int() != 0, next().int() != 0);
        Line {
            head: text(next()),
            writer_ahead,
            others,
        }
    }
}

/// How a request is granted, decided before anything changes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Grant {
    /// Not now: the shortest remaining lease of a hold in the way, if any,
    /// and whether it is the request's turn (the line lets it go once the
    /// holds do): the waiter to try again when they end.
    Busy { retry_in: Option<Duration>, turn: bool },
    /// Joins (re-enters or repeats) the hold at this index of the holds.
    Join(usize),
    /// A new hold; `room`: another request may be granted beside it
    /// (permits left, or a read hold).
    New { write: bool, room: bool },
    /// Refused: another permit count, or an upgrade.
    Conflict(String),
}

/// The permit count a request brings (0: not a semaphore).
pub(super) fn permits_of(kind: LockKind) -> i64 {
    match kind {
        LockKind::Permit { permits } => i64::from(permits),
        _ => 0,
    }
}

/// Decides `req` on the name's live `holds` (in `seq` order), its
/// recorded permit count `permits` (0: none) and its `line`.
pub(super) fn decide(req: &AcquireRequest<'_>, permits: i64, holds: &[Row], line: &Line) -> Grant {
    let held = || holds.iter().enumerate();
    if let LockKind::Permit { permits: asked } = req.kind {
        let in_use = !holds.is_empty() || line.others;
        if permits != 0 && permits != i64::from(asked) && in_use {
            return Grant::Conflict(format!("the semaphore has {permits} permits, the request says {asked}"));
        }
    }
    // Whether the line lets the request go: a reader when no writer waits
    // ahead of it; any other first in line (a try: when nobody waits), or
    // at once when unfair.
    let turn = match req.kind {
        LockKind::Read => !line.writer_ahead,
        _ => !req.fair || line.head.is_empty() || line.head == req.attempt,
    };
    // The soonest end of a hold in the way.
    let soonest = holds.iter().map(|r| r.remaining).min();
    let busy = |retry_in| Grant::Busy { retry_in, turn };
    match req.kind {
        LockKind::Permit { permits: asked } => {
            if let Some((i, _)) = held().find(|(_, r)| r.has(req.attempt)) {
                Grant::Join(i)
            } else if turn && holds.len() < asked as usize {
                Grant::New {
                    write: false,
                    room: holds.len() + 1 < asked as usize,
                }
            } else {
                busy(soonest)
            }
        }
        LockKind::Read => {
            let own = held().find(|(_, r)| r.owner == req.owner.as_bytes() && !r.writer);
            let writer = holds.iter().find(|r| r.writer);
            let new = Grant::New {
                write: false,
                room: true,
            };
            match (own, writer) {
                (Some((i, _)), _) => Grant::Join(i),
                (None, Some(w)) if w.owner == req.owner.as_bytes() => new,
                (None, Some(w)) => busy(Some(w.remaining)),
                (None, None) if turn => new,
                (None, None) => busy(None),
            }
        }
        _ => {
            let own = held().find(|(_, r)| r.owner == req.owner.as_bytes() && r.writer);
            let reading = holds.iter().any(|r| r.owner == req.owner.as_bytes() && !r.writer);
            match own {
                Some((i, _)) => Grant::Join(i),
                None if reading => Grant::Conflict(
                    "the owner holds it for reading: a read hold cannot be upgraded; release it first".to_owned(),
                ),
                None if holds.is_empty() && turn => Grant::New {
                    write: true,
                    room: false,
                },
                None => busy(soonest),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, owner: &str, writer: bool, attempts: &str) -> Row {
        Row {
            seq,
            owner: owner.as_bytes().to_vec(),
            token: seq,
            writer,
            attempts: attempts.to_owned(),
            remaining: Duration::from_secs(seq as u64),
        }
    }

    fn line(head: &str, writer_ahead: bool, others: bool) -> Line {
        Line {
            head: head.to_owned(),
            writer_ahead,
            others,
        }
    }

    fn req<'a>(kind: LockKind, owner: &'a str, attempt: &'a str) -> AcquireRequest<'a> {
        AcquireRequest {
            name: "n",
            owner,
            ttl: Duration::from_secs(10),
            attempt,
            fair: true,
            kind,
        }
    }

    #[test]
    fn permits_count_and_order() {
        let two = LockKind::Permit { permits: 2 };
        let nobody = Line::default();
        let held = [row(1, "a", false, "a1")];
        assert_eq!(
            decide(&req(two, "a", "a2"), 2, &held, &nobody),
            Grant::New {
                write: false,
                room: false
            },
            "the last permit leaves no room"
        );
        assert_eq!(
            decide(&req(two, "a", "a2"), 2, &[], &nobody),
            Grant::New {
                write: false,
                room: true
            },
            "one permit of two leaves room"
        );
        assert_eq!(
            decide(&req(two, "a", "a1"), 2, &held, &nobody),
            Grant::Join(0),
            "a repeat"
        );
        let full = [row(1, "a", false, "a1"), row(2, "b", false, "b1")];
        assert_eq!(
            decide(&req(two, "c", "c1"), 2, &full, &nobody),
            Grant::Busy {
                retry_in: Some(Duration::from_secs(1)),
                turn: true
            }
        );
        let waiting = line("w1", false, true);
        assert_eq!(
            decide(&req(two, "c", "c1"), 2, &held, &waiting),
            Grant::Busy {
                retry_in: Some(Duration::from_secs(1)),
                turn: false
            },
            "a try waits its turn"
        );
        assert_eq!(
            decide(&req(two, "w", "w1"), 2, &held, &line("w1", false, false)),
            Grant::New {
                write: false,
                room: false
            }
        );
        let three = LockKind::Permit { permits: 3 };
        assert!(matches!(
            decide(&req(three, "c", "c1"), 2, &held, &nobody),
            Grant::Conflict(_)
        ));
        assert!(matches!(
            decide(&req(three, "c", "c1"), 2, &[], &waiting),
            Grant::Conflict(_)
        ));
        assert_eq!(
            decide(&req(three, "c", "c1"), 2, &[], &nobody),
            Grant::New {
                write: false,
                room: true
            },
            "unused: recounted"
        );
    }

    #[test]
    fn readers_and_writers() {
        let (r, w) = (LockKind::Read, LockKind::Write);
        let reading = [row(1, "a", false, "a1")];
        let writer_waits = line("w1", true, true);
        assert_eq!(
            decide(&req(r, "a", "a2"), 0, &reading, &writer_waits),
            Grant::Join(0),
            "re-entry while a writer waits"
        );
        assert_eq!(
            decide(&req(r, "b", "b1"), 0, &reading, &writer_waits),
            Grant::Busy {
                retry_in: None,
                turn: false
            },
            "no passing a writer"
        );
        assert_eq!(
            decide(&req(r, "b", "b1"), 0, &reading, &line("x1", false, true)),
            Grant::New {
                write: false,
                room: true
            },
            "readers go together"
        );
        assert!(
            matches!(
                decide(&req(w, "a", "a3"), 0, &reading, &writer_waits),
                Grant::Conflict(_)
            ),
            "no upgrade"
        );
        assert_eq!(
            decide(&req(w, "w", "w1"), 0, &reading, &line("w1", false, false)),
            Grant::Busy {
                retry_in: Some(Duration::from_secs(1)),
                turn: true
            },
            "readers first"
        );
        let writing = [row(1, "a", true, "a1")];
        assert_eq!(
            decide(&req(r, "a", "a2"), 0, &writing, &Line::default()),
            Grant::New {
                write: false,
                room: true
            },
            "read under own write"
        );
        assert_eq!(
            decide(&req(w, "a", "a2"), 0, &writing, &Line::default()),
            Grant::Join(0)
        );
        assert_eq!(
            decide(&req(w, "b", "b1"), 0, &[], &Line::default()),
            Grant::New {
                write: true,
                room: false
            }
        );
    }
}
