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
//! Overlaps shorter than [`checker::TOLERANCE_NS`] are ignored (clock reads of two
//! processes and the deadline conversion, not lock behaviour).

mod checker;
mod frees;
mod holds;
mod kinds;
mod overlap;
mod procs;
mod report;
mod shares;
#[cfg(test)]
mod tests;

use std::collections::HashMap;

pub use self::checker::ProcLog;
use self::checker::{Checker, Hold};
pub use self::report::Report;
use crate::kind::HoldKind;
use crate::log::Event;

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
