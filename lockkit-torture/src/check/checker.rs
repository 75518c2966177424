//! What the steps of the check share: the logs, the run's bounds, the holds
//! read from the logs and each process's kills, end and pauses.

use std::fmt::Write as _;

use crate::kind::HoldKind;
use crate::log::{Event, Record};

/// Overlaps up to this long are clock-read noise: 1 ms.
pub const TOLERANCE_NS: u64 = 1_000_000;

/// One worker process's log.
#[derive(Debug, Clone)]
pub struct ProcLog {
    pub worker: usize,
    pub incarnation: u32,
    pub records: Vec<Record>,
}

#[derive(Debug)]
pub(crate) struct Hold {
    pub(crate) proc: usize,
    pub(crate) name: String,
    pub(crate) owner: String,
    pub(crate) token: u64,
    pub(crate) want_t: u64,
    pub(crate) grant_t: u64,
    /// The hold count the guard reported at the grant.
    pub(crate) count: Option<u32>,
    /// A lock's, a permit's, a read or a write hold.
    pub(crate) kind: HoldKind,
    /// (time seen, deadline) for the grant and each renewal; `None`: session.
    pub(crate) points: Vec<(u64, Option<u64>)>,
    pub(crate) release: Option<(u64, bool)>,
    /// `unlock` failed after the release line: the server may have kept the
    /// hold, so this owner's next grant of the name may re-enter it.
    pub(crate) unlock_failed: bool,
    /// `unlock` returned: (time, the owner's holds left on the name).
    pub(crate) unlocked: Option<(u64, u32)>,
    /// The owner's next record in the process after the release line (its
    /// task writes nothing before `unlock` returned).
    pub(crate) next_t: Option<u64>,
    pub(crate) intervals: Vec<(u64, u64)>,
    /// Until when this hold's share may still be on the server (see
    /// [`shares::share_ends`](super::shares::share_ends)).
    pub(crate) share_end: u64,
    /// Not a grant: a `lock` call that never returned (its process was
    /// killed or ended) or was cancelled when the run ended. The server may
    /// have granted it a share (token unknown) that stands until its lease
    /// bound; it counts where shares may stand, nowhere else.
    pub(crate) pending: bool,
}

impl Hold {
    /// A call that may have left a share: see [`Hold::pending`].
    pub(super) fn pending(
        proc: usize,
        name: &str,
        owner: &str,
        kind: HoldKind,
        want_t: u64,
        cancelled: Option<u64>,
    ) -> Hold {
        Hold {
            proc,
            name: name.to_owned(),
            owner: owner.to_owned(),
            token: 0,
            want_t,
            grant_t: want_t,
            count: None,
            kind,
            points: Vec::new(),
            release: cancelled.map(|t| (t, true)),
            unlock_failed: false,
            unlocked: None,
            next_t: None,
            intervals: Vec::new(),
            share_end: 0,
            pending: true,
        }
    }
}

#[derive(Debug, Default)]
pub(crate) struct ProcInfo {
    pub(super) pid: Option<u32>,
    pub(super) killed_at: Option<u64>,
    pub(crate) end: u64,
    pub(super) pauses: Vec<(u64, u64)>,
}

/// What the steps of [`check`](super::check) share: the logs, the bounds of the run's
/// `Run` line, and what the steps read from the logs.
pub(super) struct Checker<'a> {
    pub(super) procs: &'a [ProcLog],
    t0: u64,
    pub(super) bound: u64,
    pub(super) slack: u64,
    pub(super) session: Option<u64>,
    /// Per process of `procs`: pid, kill, end, pauses.
    pub(super) info: Vec<ProcInfo>,
    /// Server restarts and faults: (begin, end).
    pub(super) restarts: Vec<(u64, u64)>,
    pub(super) holds: Vec<Hold>,
}

impl<'a> Checker<'a> {
    /// The run's bounds from its `Run` line; nothing read yet.
    pub(super) fn new(procs: &'a [ProcLog], events: &[Event]) -> Self {
        let (t0, bound, slack, session) = events
            .iter()
            .find_map(|e| match e {
                Event::Run {
                    t,
                    bound_ns,
                    slack_ns,
                    session_ns,
                    ..
                } => Some((*t, *bound_ns, *slack_ns, *session_ns)),
                _ => None,
            })
            .unwrap_or((0, 0, 0, None));
        Checker {
            procs,
            t0,
            bound,
            slack,
            session,
            info: Vec::new(),
            restarts: Vec::new(),
            holds: Vec::new(),
        }
    }

    /// Seconds since the run's start, for messages.
    pub(super) fn secs(&self, t: u64) -> f64 {
        (t as f64 - self.t0 as f64) / 1e9
    }

    /// A hold for messages: its process, owner, token, validity and end.
    pub(super) fn describe(&self, h: &Hold) -> String {
        let Checker { procs, info, .. } = self;
        let secs = |t: u64| self.secs(t);
        let p = &procs[h.proc];
        let mut s = format!(
            "w{}-{} owner {} token {} granted {:.3}s",
            p.worker,
            p.incarnation,
            short(&h.owner),
            h.token,
            secs(h.grant_t)
        );
        let _ = write!(s, " valid");
        for (a, b) in &h.intervals {
            let _ = write!(s, " [{:.3}, {:.3}]", secs(*a), secs(*b));
        }
        match h.release {
            Some((t, lost)) => {
                let _ = write!(s, " {} {:.3}s", if lost { "lost" } else { "released" }, secs(t));
            }
            None if info[h.proc].killed_at.is_some() => {
                let _ = write!(s, " killed {:.3}s", secs(info[h.proc].end));
            }
            None => {
                let _ = write!(s, " open until {:.3}s", secs(info[h.proc].end));
            }
        }
        s
    }
}

pub(super) fn record_owner(r: &Record) -> Option<&String> {
    match r {
        Record::Start { .. } => None,
        Record::Want { owner, .. }
        | Record::Grant { owner, .. }
        | Record::Valid { owner, .. }
        | Record::Release { owner, .. }
        | Record::UnlockFailed { owner, .. }
        | Record::Unlocked { owner, .. }
        | Record::Fail { owner, .. } => Some(owner),
    }
}

/// An owner id for messages: a random one's first 8 characters, the
/// `…-pairK-tN` end of a shared one.
pub(super) fn short(owner: &str) -> &str {
    match owner.rfind("-pair") {
        Some(i) => &owner[i + 1..],
        None => &owner[..owner.len().min(8)],
    }
}
