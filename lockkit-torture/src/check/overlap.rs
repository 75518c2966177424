//! Rule 1: no two holds of different owners overlap while both are valid,
//! and no two of one owner with different tokens — for locks and writers;
//! readers share with readers; a semaphore's permits, at most N at once
//! (see [`super::kinds`]).

use std::collections::BTreeSet;

use super::checker::{Checker, Hold, TOLERANCE_NS};
use super::report::Report;
use crate::kind::HoldKind;

impl Checker<'_> {
    /// Rule 1 on the holds `ids` of `name` (a lock's or a read-write
    /// lock's: two read holds may overlap).
    pub(super) fn check_overlaps(&self, name: &str, ids: &[usize], report: &mut Report) {
        let Checker { holds, .. } = self;
        let describe = |h: &Hold| self.describe(h);
        let mut iv: Vec<(u64, u64, usize)> = ids
            .iter()
            .flat_map(|&h| holds[h].intervals.iter().map(move |&(s, e)| (s, e, h)))
            .collect();
        iv.sort();
        let mut seen = BTreeSet::new();
        for i in 0..iv.len() {
            let (_, e1, h1) = iv[i];
            for &(s2, e2, h2) in &iv[i + 1..] {
                if s2 + TOLERANCE_NS >= e1 {
                    break;
                }
                if h1 == h2 || !seen.insert((h1.min(h2), h1.max(h2))) {
                    continue;
                }
                let (a, b) = (&holds[h1], &holds[h2]);
                if a.kind == HoldKind::Read && b.kind == HoldKind::Read {
                    continue;
                }
                let overlap = e1.min(e2) - s2;
                if a.owner != b.owner {
                    report.violations.push(format!(
                        "overlap on {name}: {:.3} ms while both valid: {} AND {}",
                        overlap as f64 / 1e6,
                        describe(a),
                        describe(b)
                    ));
                } else if a.token != b.token {
                    // One owner's holds are one hold on the server: a second
                    // token while the first is valid is a second hold. (An
                    // owner's read under its own write carries its token.)
                    report.violations.push(format!(
                        "two holds of one owner on {name}: {:.3} ms while both valid, tokens differ: {} AND {}",
                        overlap as f64 / 1e6,
                        describe(a),
                        describe(b)
                    ));
                }
            }
        }
    }
}
