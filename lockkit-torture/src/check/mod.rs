//! The checker: merges the workers' logs and the chaos log and proves, per
//! name,
//!
//! 1. **no two holds of different owners overlap while both are valid**
//!    (two of one owner with different tokens neither). A hold is valid on the
//!    union of `[t, min(deadline, end)]` over its grant and each renewal it
//!    logged (`t` when the deadline was seen), where `end` is its release (or
//!    lost) line, else the kill of its process, else the process's end. A
//!    grant logged after its own deadline was never held. ZooKeeper's
//!    session leases log their session's deadline (a session timeout after
//!    the last request the server answered) and are judged the same way: a
//!    holder whose process did not run — paused by the chaos, or starved —
//!    trusted its hold only until the deadline it last saw. Leases without
//!    any deadline (logs of older runs) are valid from grant to end, but a
//!    pause of the process cuts them at pause + session/2.
//! 2. **fencing tokens strictly increase** in grant order over the holds
//!    that were valid at all.
//! 3. **a killed holder's name comes free within its bound**: the next grant
//!    after the kill is no later than kill + bound + slack — checked when a
//!    live, unpaused worker was waiting for the name through that window
//!    and no server restart overlapped it (otherwise counted as excused or
//!    unchecked).
//!
//! 4. **hold counts balance** and **tokens are kept by re-entry**: one
//!    owner's holds are shares of one hold (`--shared-owners` gives two
//!    processes the same owner), see [`shares`];
//! 5. **names are free after the run**: inspected through the backend once
//!    the workers stopped, and again one lease bound later where a holder
//!    was killed or lost or its unlock failed.
//!
//! Overlaps shorter than [`TOLERANCE_NS`] are ignored (clock reads of two
//! processes and the deadline conversion, not lock behaviour).

mod frees;
mod holds;
mod kinds;
mod overlap;
mod procs;
mod shares;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
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

/// What the checker counted and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    pub grants: usize,
    /// Grants that were valid for some time.
    pub holds: usize,
    /// Grants logged after their own deadline (never held).
    pub never_held: usize,
    /// Holds ended by the lost signal.
    pub lost: usize,
    pub kills: usize,
    pub pauses: usize,
    pub server_restarts: usize,
    pub worker_restarts: usize,
    /// Killed holds whose name came free in time.
    pub frees_in_time: usize,
    /// Killed holds not judged: a server restart overlapped the window.
    pub frees_excused: usize,
    /// Killed holds not judged: nobody eligible waited for the name.
    pub frees_unchecked: usize,
    /// Network and node faults, by kind (see [`crate::log::FAULT_KINDS`]).
    pub faults: std::collections::BTreeMap<String, usize>,
    /// Grants that re-entered a hold of the same owner held by another
    /// process (`--shared-owners`).
    pub shared_reentries: usize,
    /// Unlocks that returned (their remaining hold counts were checked).
    pub unlocks: usize,
    /// Names inspected after the run (each once per round).
    pub inspected: usize,
    /// Names found still held at the first inspection, excused because a
    /// holder was killed or lost or its unlock failed (they must be free at
    /// the second).
    pub leftovers_excused: usize,
    /// `lock` calls that ran out of their wait bound (not a violation: a
    /// crowd on a slow kind shows here).
    pub timeouts: usize,
    /// `lock` calls that failed otherwise (faults, a backend's errors).
    pub failed_calls: usize,
    pub violations: Vec<String>,
}

impl Report {
    /// The one-line summary.
    pub fn summary(&self) -> String {
        let faults: String = crate::log::FAULT_KINDS
            .iter()
            .map(|k| format!("{k}={} ", self.faults.get(*k).copied().unwrap_or(0)))
            .collect();
        format!(
            "grants={} holds={} never_held={} lost={} kills={} pauses={} server_restarts={} worker_restarts={} \
             frees_in_time={} frees_excused={} frees_unchecked={} {faults}shared_reentries={} unlocks={} \
             inspected={} leftovers_excused={} timeouts={} failed_calls={} violations={}",
            self.grants,
            self.holds,
            self.never_held,
            self.lost,
            self.kills,
            self.pauses,
            self.server_restarts,
            self.worker_restarts,
            self.frees_in_time,
            self.frees_excused,
            self.frees_unchecked,
            self.shared_reentries,
            self.unlocks,
            self.inspected,
            self.leftovers_excused,
            self.timeouts,
            self.failed_calls,
            self.violations.len()
        )
    }
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
    /// [`shares::share_ends`]).
    pub(crate) share_end: u64,
    /// Not a grant: a `lock` call that never returned (its process was
    /// killed or ended) or was cancelled when the run ended. The server may
    /// have granted it a share (token unknown) that stands until its lease
    /// bound; it counts where shares may stand, nowhere else.
    pub(crate) pending: bool,
}

impl Hold {
    /// A call that may have left a share: see [`Hold::pending`].
    fn pending(proc: usize, name: &str, owner: &str, kind: HoldKind, want_t: u64, cancelled: Option<u64>) -> Hold {
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
    pid: Option<u32>,
    killed_at: Option<u64>,
    pub(crate) end: u64,
    pauses: Vec<(u64, u64)>,
}

/// Checks a run: the workers' logs and the coordinator's events (whose
/// `Run` line gives the bounds).
pub fn check(procs: &[ProcLog], events: &[Event]) -> Report {
    let mut report = Report::default();
    let mut run = Checker::new(procs, events);
    // Processes: kill time, end, pauses.
    run.read_events(events, &mut report);
    // Holds.
    run.read_holds(&mut report);
    shares::share_ends(&mut run.holds, &run.info, run.bound + run.slack);
    run.valid_intervals(&mut report);

    let describe = |h: &Hold| run.describe(h);
    let secs = |t: u64| run.secs(t);

    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, h) in run.holds.iter().enumerate() {
        by_name.entry(h.name.as_str()).or_default().push(i);
    }
    let mut names: Vec<&str> = by_name.keys().copied().collect();
    names.sort();

    for name in &names {
        let ids = &by_name[name];
        let on = |ids| shares::NameHolds {
            name,
            ids,
            holds: &run.holds,
            describe: &describe,
        };
        // A run takes one kind: its first grant's says which.
        let kind = ids.iter().map(|&h| run.holds[h].kind).find(|k| !k.is_mutex());
        match kind {
            None => {
                // (1) overlaps of valid intervals; (2) tokens in grant
                // order; (4) hold counts balance.
                run.check_overlaps(name, ids, &mut report);
                shares::check_tokens(&on(ids), &mut report);
                shares::check_counts(&on(ids), &mut report);
            }
            Some(HoldKind::Permit(permits)) => {
                run.check_permits(name, ids, permits, &mut report);
                kinds::check_permit_tokens(&on(ids), &mut report);
                kinds::check_permit_counts(&on(ids), &mut report);
            }
            Some(_) => {
                // Writers as locks, readers beside readers only.
                run.check_overlaps(name, ids, &mut report);
                let of =
                    |k: HoldKind| -> Vec<usize> { ids.iter().copied().filter(|&h| run.holds[h].kind == k).collect() };
                let (writes, reads) = (of(HoldKind::Write), of(HoldKind::Read));
                shares::check_tokens(&on(&writes), &mut report);
                kinds::check_read_tokens(&on(ids), &mut report);
                shares::check_counts(&on(&writes), &mut report);
                shares::check_counts(&on(&reads), &mut report);
            }
        }
    }
    // (5) the names every holder released are free after the run.
    shares::check_inspections(events, &by_name, &run.holds, run.bound + run.slack, &secs, &mut report);

    // (3) a killed holder's names come free in time.
    run.check_frees(&mut report);
    report
}

/// What the steps of [`check`] share: the logs, the bounds of the run's
/// `Run` line, and what the steps read from the logs.
struct Checker<'a> {
    procs: &'a [ProcLog],
    t0: u64,
    bound: u64,
    slack: u64,
    session: Option<u64>,
    /// Per process of `procs`: pid, kill, end, pauses.
    info: Vec<ProcInfo>,
    /// Server restarts and faults: (begin, end).
    restarts: Vec<(u64, u64)>,
    holds: Vec<Hold>,
}

impl<'a> Checker<'a> {
    /// The run's bounds from its `Run` line; nothing read yet.
    fn new(procs: &'a [ProcLog], events: &[Event]) -> Self {
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
    fn secs(&self, t: u64) -> f64 {
        (t as f64 - self.t0 as f64) / 1e9
    }

    /// A hold for messages: its process, owner, token, validity and end.
    fn describe(&self, h: &Hold) -> String {
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

fn record_owner(r: &Record) -> Option<&String> {
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
fn short(owner: &str) -> &str {
    match owner.rfind("-pair") {
        Some(i) => &owner[i + 1..],
        None => &owner[..owner.len().min(8)],
    }
}
