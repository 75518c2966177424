//! The rules of the other kinds, for runs with `--kind semaphore:N` or
//! `--kind rw`:
//!
//! - **permits**: at no instant are more than N permits of a semaphore
//!   valid; no two grants carry one token, and a permit granted after
//!   another was granted (it began waiting after that grant) has a greater
//!   token;
//! - **readers' tokens**: a read hold's token is no lower than that of any
//!   write hold granted before the reader began waiting (it carries the
//!   last writer's). Writers keep the lock's rules (rule 1 with readers,
//!   rule 2 among the writers).

use std::collections::HashMap;

use super::checker::{Checker, TOLERANCE_NS};
use super::report::Report;
use super::shares::NameHolds;
use crate::kind::HoldKind;

/// At most this many violations of one rule are listed per name.
const LISTED: usize = 3;

impl Checker<'_> {
    /// Rule 1 for a semaphore of `permits`: at most that many of the
    /// permits `ids` of `name` valid at once (overlaps within
    /// [`TOLERANCE_NS`] ignored).
    pub(super) fn check_permits(&self, name: &str, ids: &[usize], permits: u32, report: &mut Report) {
        let holds = &self.holds;
        // +1 at a start (moved later by the tolerance), -1 at an end; ends
        // before starts at one instant.
        let mut edges: Vec<(u64, i32, usize)> = Vec::new();
        for &h in ids.iter().filter(|&&h| !holds[h].pending) {
            for &(s, e) in &holds[h].intervals {
                if s + TOLERANCE_NS < e {
                    edges.push((s + TOLERANCE_NS, 1, h));
                    edges.push((e, -1, h));
                }
            }
        }
        edges.sort_by_key(|&(t, d, _)| (t, d));
        let mut valid: Vec<usize> = Vec::new();
        let mut listed = 0;
        for (t, d, h) in edges {
            if d < 0 {
                if let Some(i) = valid.iter().position(|&v| v == h) {
                    valid.swap_remove(i);
                }
                continue;
            }
            valid.push(h);
            if valid.len() > permits as usize && listed < LISTED {
                listed += 1;
                let who: Vec<String> = valid.iter().map(|&v| self.describe(&holds[v])).collect();
                report.violations.push(format!(
                    "{} permits of {permits} valid at once on {name} at {:.3}s: {}",
                    valid.len(),
                    self.secs(t),
                    who.join(" AND ")
                ));
            }
        }
    }
}

/// `(time, token)` points in time order, each with the greatest token up
/// to it.
fn running_max(mut points: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    points.sort();
    let mut most = 0;
    for p in &mut points {
        most = most.max(p.1);
        p.1 = most;
    }
    points
}

/// The greatest token of the points (see [`running_max`]) before `t`.
fn highest_before(points: &[(u64, u64)], t: u64) -> Option<u64> {
    let n = points.partition_point(|&(at, _)| at < t);
    n.checked_sub(1).map(|i| points[i].1)
}

/// Rule 2 for permits: tokens are unique, and grow with causality.
pub(crate) fn check_permit_tokens(on: &NameHolds<'_>, report: &mut Report) {
    let (name, holds) = (on.name, on.holds);
    let granted: Vec<usize> = on.ids.iter().copied().filter(|&h| !holds[h].pending).collect();
    let mut by_token: HashMap<u64, usize> = HashMap::new();
    let mut listed = 0;
    for &h in &granted {
        if let Some(&other) = by_token.get(&holds[h].token)
            && listed < LISTED
        {
            listed += 1;
            report.violations.push(format!(
                "two permits of {name} with one token: {} AND {}",
                (on.describe)(&holds[other]),
                (on.describe)(&holds[h])
            ));
        }
        by_token.insert(holds[h].token, h);
    }
    let grants = running_max(granted.iter().map(|&h| (holds[h].grant_t, holds[h].token)).collect());
    for &b in &granted {
        let hb = &holds[b];
        // The greatest token logged before `b` began waiting.
        if let Some(highest) = highest_before(&grants, hb.want_t)
            && hb.token <= highest
            && listed < LISTED
        {
            listed += 1;
            report.violations.push(format!(
                "permit token order on {name}: token {highest} was granted before {} began waiting",
                (on.describe)(hb)
            ));
        }
    }
}

/// Rule 2 for readers: no read token below a write token granted before
/// the reader began waiting.
pub(crate) fn check_read_tokens(on: &NameHolds<'_>, report: &mut Report) {
    let holds = on.holds;
    let of = |kind| {
        on.ids
            .iter()
            .copied()
            .filter(move |&h| holds[h].kind == kind && !holds[h].pending)
    };
    let writes = running_max(
        of(HoldKind::Write)
            .map(|h| (holds[h].grant_t, holds[h].token))
            .collect(),
    );
    for r in of(HoldKind::Read) {
        let hr = &holds[r];
        if let Some(last) = highest_before(&writes, hr.want_t)
            && hr.token < last
        {
            report.violations.push(format!(
                "a reader of {} carries a token below the last writer's ({last}): {}",
                on.name,
                (on.describe)(hr)
            ));
            return;
        }
    }
}

/// Rule 4 for permits: each is a hold of its own, counted once, and its
/// unlock leaves nothing of it.
pub(crate) fn check_permit_counts(on: &NameHolds<'_>, report: &mut Report) {
    for &h in on.ids.iter().filter(|&&h| !on.holds[h].pending) {
        let hh = &on.holds[h];
        report.unlocks += usize::from(hh.unlocked.is_some());
        let counted = hh.count.is_some_and(|c| c != 1);
        let left = hh.unlocked.is_some_and(|(_, remaining)| remaining != 0);
        if counted || left {
            report.violations.push(format!(
                "a permit of {} is not one hold: count {:?}, left {:?} after its unlock: {}",
                on.name,
                hh.count,
                hh.unlocked.map(|u| u.1),
                (on.describe)(hh)
            ));
        }
    }
}
