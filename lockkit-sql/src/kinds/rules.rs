//! The rules that grant a semaphore's or a read-write lock's request, on
//! the rows one transaction read: the same as the memory backend's
//! (`lockkit_core::memory`), so every backend serves the kinds alike.

use std::time::Duration;

use lockkit_core::backend::{AcquireRequest, LockKind};

use crate::conn::{Val, from_us, text};

/// One live row of `<table>_holds`: a hold, or a place in line (`queued`).
#[derive(Debug, Clone)]
pub(super) struct Row {
    pub seq: i64,
    pub owner: Vec<u8>,
    pub token: i64,
    pub writer: bool,
    pub queued: bool,
    /// A hold's shares (attempt ids, space-separated); a place's attempt id.
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
            queued: next().int() != 0,
            attempts: text(next()),
            remaining: from_us(next().int()),
        }
    }

    pub fn has(&self, attempt: &str) -> bool {
        super::shares(&self.attempts).any(|a| a == attempt)
    }
}

/// How a request is granted, decided before anything changes.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Grant {
    /// Not now; the shortest remaining lease of a hold in the way, if any.
    Busy(Option<Duration>),
    /// Joins (re-enters or repeats) the hold at this index of the rows.
    Join(usize),
    /// A new hold.
    New { write: bool },
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

/// Decides `req` on the name's live `rows` (in `seq` order) and its
/// recorded permit count `permits` (0: none). A request not in line finds
/// no place of its own there (its turn then means: as a fair try).
pub(super) fn decide(req: &AcquireRequest<'_>, permits: i64, rows: &[Row]) -> Grant {
    let holds = || rows.iter().enumerate().filter(|(_, r)| !r.queued);
    let line: Vec<&Row> = rows.iter().filter(|r| r.queued).collect();
    let mine = |r: &&Row| r.attempts == req.attempt;
    if let LockKind::Permit { permits: asked } = req.kind {
        let in_use = holds().next().is_some() || line.iter().any(|r| !mine(r));
        if permits != 0 && permits != i64::from(asked) && in_use {
            return Grant::Conflict(format!("the semaphore has {permits} permits, the request says {asked}"));
        }
    }
    // Whether the line lets the request go: a reader when no writer waits
    // ahead of it; any other first in line (a try: when nobody waits), or
    // at once when unfair.
    let turn = match req.kind {
        LockKind::Read => !line.iter().take_while(|r| !mine(r)).any(|r| r.writer),
        _ => !req.fair || line.first().is_none_or(mine),
    };
    // The soonest end of a hold in the way.
    let soonest = || holds().map(|(_, r)| r.remaining).min();
    match req.kind {
        LockKind::Permit { permits: asked } => {
            if let Some((i, _)) = holds().find(|(_, r)| r.has(req.attempt)) {
                Grant::Join(i)
            } else if turn && holds().count() < asked as usize {
                Grant::New { write: false }
            } else {
                Grant::Busy(soonest())
            }
        }
        LockKind::Read => {
            let own = holds().find(|(_, r)| r.owner == req.owner.as_bytes() && !r.writer);
            let writer = holds().find(|(_, r)| r.writer).map(|(_, r)| r);
            match (own, writer) {
                (Some((i, _)), _) => Grant::Join(i),
                (None, Some(w)) if w.owner == req.owner.as_bytes() => Grant::New { write: false },
                (None, Some(w)) => Grant::Busy(Some(w.remaining)),
                (None, None) if turn => Grant::New { write: false },
                (None, None) => Grant::Busy(None),
            }
        }
        _ => {
            let own = holds().find(|(_, r)| r.owner == req.owner.as_bytes() && r.writer);
            let reading = holds().any(|(_, r)| r.owner == req.owner.as_bytes() && !r.writer);
            match own {
                Some((i, _)) => Grant::Join(i),
                None if reading => Grant::Conflict(
                    "the owner holds it for reading: a read hold cannot be upgraded; release it first".to_owned(),
                ),
                None if holds().next().is_none() && turn => Grant::New { write: true },
                None => Grant::Busy(soonest()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, owner: &str, writer: bool, queued: bool, attempts: &str) -> Row {
        Row {
            seq,
            owner: owner.as_bytes().to_vec(),
            token: seq,
            writer,
            queued,
            attempts: attempts.to_owned(),
            remaining: Duration::from_secs(seq as u64),
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
        let held = [row(1, "a", false, false, "a1")];
        assert_eq!(decide(&req(two, "a", "a2"), 2, &held), Grant::New { write: false });
        assert_eq!(decide(&req(two, "a", "a1"), 2, &held), Grant::Join(0), "a repeat");
        let full = [row(1, "a", false, false, "a1"), row(2, "b", false, false, "b1")];
        assert_eq!(
            decide(&req(two, "c", "c1"), 2, &full),
            Grant::Busy(Some(Duration::from_secs(1)))
        );
        let waiting = [row(1, "a", false, false, "a1"), row(3, "w", false, true, "w1")];
        assert!(
            matches!(decide(&req(two, "c", "c1"), 2, &waiting), Grant::Busy(_)),
            "a try waits its turn"
        );
        assert_eq!(decide(&req(two, "w", "w1"), 2, &waiting), Grant::New { write: false });
        let three = LockKind::Permit { permits: 3 };
        assert!(matches!(decide(&req(three, "c", "c1"), 2, &held), Grant::Conflict(_)));
        assert_eq!(
            decide(&req(three, "c", "c1"), 2, &[]),
            Grant::New { write: false },
            "unused: recounted"
        );
    }

    #[test]
    fn readers_and_writers() {
        let (r, w) = (LockKind::Read, LockKind::Write);
        let reading = [row(1, "a", false, false, "a1"), row(2, "w", true, true, "w1")];
        assert_eq!(
            decide(&req(r, "a", "a2"), 0, &reading),
            Grant::Join(0),
            "re-entry while a writer waits"
        );
        assert_eq!(
            decide(&req(r, "b", "b1"), 0, &reading),
            Grant::Busy(None),
            "no passing a writer"
        );
        assert!(
            matches!(decide(&req(w, "a", "a3"), 0, &reading), Grant::Conflict(_)),
            "no upgrade"
        );
        assert!(
            matches!(decide(&req(w, "w", "w1"), 0, &reading), Grant::Busy(_)),
            "readers first"
        );
        let writing = [row(1, "a", true, false, "a1")];
        assert_eq!(
            decide(&req(r, "a", "a2"), 0, &writing),
            Grant::New { write: false },
            "read under own write"
        );
        assert_eq!(decide(&req(w, "a", "a2"), 0, &writing), Grant::Join(0));
        assert_eq!(decide(&req(w, "b", "b1"), 0, &[]), Grant::New { write: true });
    }
}
