//! Rule 3: a killed holder's name comes free within its bound, where a
//! live, unpaused worker waited for it and no restart or fault excuses it.

use super::checker::{Checker, ProcInfo, ProcLog, record_owner, short};
use super::report::Report;
use super::shares;
use crate::log::Record;

impl Checker<'_> {
    /// Rule 3 over every killed process's holds.
    pub(super) fn check_frees(&self, report: &mut Report) {
        let Checker {
            procs,
            info,
            holds,
            restarts,
            bound,
            slack,
            ..
        } = self;
        let (bound, slack) = (*bound, *slack);
        let secs = |t: u64| self.secs(t);
        for (pi, pinfo) in info.iter().enumerate() {
            let Some(k) = pinfo.killed_at else { continue };
            for h in holds
                .iter()
                .filter(|h| h.proc == pi && h.release.is_none() && !h.intervals.is_empty())
                // A killed permit or reader frees a place, not the name:
                // other holders may keep it taken (see `kinds`).
                .filter(|h| h.kind.exclusive())
            {
                // A shared owner's other processes keep the owner's hold (and
                // with it the killed share) alive: the bound runs from their end.
                let k = shares::co_owner_end(holds, h, k, bound);
                let deadline = k + bound + slack;
                let next = holds
                    .iter()
                    .filter(|o| !o.pending && o.name == h.name && o.grant_t > k)
                    .map(|o| o.grant_t)
                    .min();
                if next.is_some_and(|n| n <= deadline) {
                    report.frees_in_time += 1;
                    continue;
                }
                if restarts
                    .iter()
                    .any(|&(b, e)| b <= deadline && e.saturating_add(slack) >= k)
                {
                    report.frees_excused += 1;
                    continue;
                }
                match waiter(procs, info, pi, &h.name, k, k + bound, deadline) {
                Some(w) => report.violations.push(format!(
                    "late free of {}: holder w{}-{} (token {}) killed at {:.3}s, bound {:.3}s + slack {:.3}s, next grant {}; {w} was waiting",
                    h.name,
                    procs[pi].worker,
                    procs[pi].incarnation,
                    h.token,
                    secs(k),
                    bound as f64 / 1e9,
                    slack as f64 / 1e9,
                    next.map_or("never".to_owned(), |n| format!("at {:.3}s ({:.3}s after the kill)", secs(n), (n - k) as f64 / 1e9)),
                )),
                None => report.frees_unchecked += 1,
            }
            }
        }
    }
}

/// A worker other than `killed` that waited for `name` from no later than
/// `by` until past `until` while alive and never paused in between.
fn waiter(
    procs: &[ProcLog],
    info: &[ProcInfo],
    killed: usize,
    name: &str,
    k: u64,
    by: u64,
    until: u64,
) -> Option<String> {
    for (qi, q) in procs.iter().enumerate() {
        if qi == killed || info[qi].end <= until {
            continue;
        }
        for (i, r) in q.records.iter().enumerate() {
            let Record::Want { t, name: n, owner, .. } = r else {
                continue;
            };
            if n != name || *t > by {
                continue;
            }
            let next = q.records[i + 1..]
                .iter()
                .find(|r| record_owner(r) == Some(owner))
                .map(Record::t);
            if next.is_some_and(|n| n <= until) {
                continue;
            }
            let from = (*t).max(k);
            if info[qi].pauses.iter().any(|&(ps, pe)| ps <= until && pe >= from) {
                continue;
            }
            return Some(format!("w{}-{} owner {}", q.worker, q.incarnation, short(owner)));
        }
    }
    None
}
