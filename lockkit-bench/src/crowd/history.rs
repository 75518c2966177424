//! The merged history of a crowd: every worker's grants on one clock,
//! swept in time order for the most holders at once and for holds the
//! kind forbids together, with the waits, the per-waiter shares and what
//! went wrong.

use hdrhistogram::Histogram;

use super::wire::{CrowdKind, Waiter};
use crate::report::histogram;

/// What a crowd's history shows.
#[derive(Debug)]
pub struct Merged {
    pub grants: u64,
    /// Every grant's wait, µs.
    pub waits: Histogram<u64>,
    /// Waiters with at least one grant.
    pub served: usize,
    /// Writers of a read-write crowd, and how many of them were served.
    pub writers: usize,
    pub writers_served: usize,
    /// Fewest and most grants of one waiter.
    pub share_min: u64,
    pub share_max: u64,
    /// From the start to each served waiter's first grant, µs: p50, max.
    pub first_grant_p50_us: Option<u64>,
    pub first_grant_max_us: Option<u64>,
    /// Mutex: grants to a waiter other than the one before.
    pub switches: u64,
    /// The most holders at once, and of them readers.
    pub most_holders: usize,
    pub most_readers: usize,
    /// Holds the kind forbids together, and exclusive grants whose token
    /// did not grow; the first of them described.
    pub violations: u64,
    pub first_violation: Option<String>,
    pub timeouts: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub unlock_errors: u64,
    /// Calls still waiting at the end, and the longest of their waits, µs.
    pub unfinished: u64,
    pub unfinished_max_us: Option<u64>,
    /// From the start to the last call's end, s.
    pub took_s: f64,
}

/// One grant in the sweep.
struct Span {
    waiter: usize,
    write: bool,
    granted: u64,
    released: u64,
    token: u64,
}

/// Merges the waiters' tallies of a crowd of `kind` that started at `start` (ns).
pub fn merge(kind: CrowdKind, waiters: &[Waiter], start: u64) -> Merged {
    let mut m = Merged {
        grants: 0,
        waits: histogram(),
        served: 0,
        writers: 0,
        writers_served: 0,
        share_min: waiters.iter().map(|w| w.grants.len() as u64).min().unwrap_or(0),
        share_max: waiters.iter().map(|w| w.grants.len() as u64).max().unwrap_or(0),
        first_grant_p50_us: None,
        first_grant_max_us: None,
        switches: 0,
        most_holders: 0,
        most_readers: 0,
        violations: 0,
        first_violation: None,
        timeouts: 0,
        errors: 0,
        first_error: None,
        unlock_errors: 0,
        unfinished: 0,
        unfinished_max_us: None,
        took_s: 0.0,
    };
    let mut firsts = Vec::new();
    let mut spans = Vec::new();
    let mut last_end = start;
    for w in waiters {
        m.grants += w.grants.len() as u64;
        m.timeouts += w.timeouts;
        m.errors += w.errors;
        m.unlock_errors += w.unlock_errors;
        if m.first_error.is_none() {
            m.first_error.clone_from(&w.first_error);
        }
        if let Some(u) = w.unfinished_us {
            m.unfinished += 1;
            m.unfinished_max_us = Some(m.unfinished_max_us.unwrap_or(0).max(u));
        }
        last_end = last_end.max(w.ended);
        if w.write {
            m.writers += 1;
        }
        if let Some(first) = w.grants.first() {
            m.served += 1;
            if w.write {
                m.writers_served += 1;
            }
            firsts.push(first.granted.saturating_sub(start) / 1_000);
        }
        for g in &w.grants {
            // A wait beyond the histogram's ten minutes is recorded as ten minutes.
            let _ = m.waits.record(g.wait_us.min(m.waits.high()));
            spans.push(Span {
                waiter: w.id,
                write: w.write,
                granted: g.granted,
                released: g.released,
                token: g.token,
            });
        }
    }
    m.took_s = last_end.saturating_sub(start) as f64 / 1e9;
    firsts.sort_unstable();
    m.first_grant_p50_us = firsts.get(firsts.len() / 2).copied();
    m.first_grant_max_us = firsts.last().copied();
    spans.sort_by_key(|s| s.granted);
    if kind == CrowdKind::Mutex {
        m.switches = spans.windows(2).filter(|p| p[0].waiter != p[1].waiter).count() as u64;
    }
    sweep(kind, &spans, start, &mut m);
    tokens(kind, &spans, start, &mut m);
    m
}

fn violation(m: &mut Merged, what: String) {
    m.violations += 1;
    m.first_violation.get_or_insert(what);
}

/// The holders at each instant: the most at once, and every grant that
/// came in beside holds its kind may not share (a writer or a mutex holder
/// beside anyone, a reader beside a writer, a permit beyond N).
fn sweep(kind: CrowdKind, spans: &[Span], start: u64, m: &mut Merged) {
    // (time, +1 grant / -1 release, span); a release sorts before a grant
    // at one instant (spans that touch do not overlap).
    let mut edges: Vec<(u64, i8, usize)> = Vec::with_capacity(spans.len() * 2);
    for (i, s) in spans.iter().enumerate() {
        edges.push((s.granted, 1, i));
        edges.push((s.released, -1, i));
    }
    edges.sort_unstable_by_key(|&(t, d, _)| (t, d));
    let (mut holders, mut readers, mut writers) = (0usize, 0usize, 0usize);
    let exclusive = |s: &Span| kind == CrowdKind::Mutex || s.write;
    for (t, d, i) in edges {
        let s = &spans[i];
        let reader = kind == CrowdKind::Rw && !s.write;
        if d < 0 {
            holders -= 1;
            readers -= usize::from(reader);
            writers -= usize::from(exclusive(s));
            continue;
        }
        let alone = holders == 0;
        let beside_writer = writers > 0;
        holders += 1;
        readers += usize::from(reader);
        writers += usize::from(exclusive(s));
        m.most_holders = m.most_holders.max(holders);
        m.most_readers = m.most_readers.max(readers);
        let at = (t.saturating_sub(start)) as f64 / 1e9;
        let bad = match kind {
            CrowdKind::Semaphore(n) => holders > n as usize,
            _ if exclusive(s) => !alone,
            _ => beside_writer,
        };
        if bad {
            violation(
                m,
                format!(
                    "waiter {} ({}, token {}) granted at {at:.3}s beside {} holder(s)",
                    s.waiter,
                    if reader { "read" } else { "exclusive" },
                    s.token,
                    holders - 1
                ),
            );
        }
    }
}

/// A mutex's and the writers' tokens grow in grant order.
fn tokens(kind: CrowdKind, spans: &[Span], start: u64, m: &mut Merged) {
    if !matches!(kind, CrowdKind::Mutex | CrowdKind::Rw) {
        return;
    }
    let mut last: Option<&Span> = None;
    for s in spans.iter().filter(|s| kind == CrowdKind::Mutex || s.write) {
        if let Some(l) = last
            && s.token <= l.token
        {
            let at = s.granted.saturating_sub(start) as f64 / 1e9;
            violation(
                m,
                format!(
                    "waiter {} granted token {} at {at:.3}s after waiter {} had token {}",
                    s.waiter, s.token, l.waiter, l.token
                ),
            );
        }
        last = Some(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crowd::wire::Grant;

    fn waiter(id: usize, write: bool, spans: &[(u64, u64, u64)]) -> Waiter {
        Waiter {
            id,
            write,
            grants: spans
                .iter()
                .map(|&(granted, released, token)| Grant {
                    granted,
                    released,
                    wait_us: 5,
                    token,
                })
                .collect(),
            ended: spans.last().map_or(0, |s| s.1),
            ..Waiter::default()
        }
    }

    #[test]
    fn a_mutex_in_turns_is_clean_and_counts_switches() {
        let ws = [
            waiter(0, false, &[(10, 20, 1), (40, 50, 3)]),
            waiter(1, false, &[(20, 30, 2)]),
            Waiter {
                id: 2,
                timeouts: 1,
                ..Waiter::default()
            },
        ];
        let m = merge(CrowdKind::Mutex, &ws, 0);
        assert_eq!((m.grants, m.served), (3, 2));
        assert_eq!((m.share_min, m.share_max), (0, 2));
        assert_eq!(m.switches, 2);
        assert_eq!(m.most_holders, 1);
        assert_eq!(m.violations, 0, "{:?}", m.first_violation);
        assert_eq!(m.timeouts, 1);
    }

    #[test]
    fn an_overlap_or_a_token_out_of_order_is_a_violation() {
        let ws = [waiter(0, false, &[(10, 30, 2)]), waiter(1, false, &[(20, 40, 1)])];
        let m = merge(CrowdKind::Mutex, &ws, 0);
        assert_eq!(m.violations, 2, "the overlap and token 1 after 2");
        assert!(m.first_violation.unwrap().contains("waiter 1"));
    }

    #[test]
    fn a_semaphore_reaches_its_permits_and_never_more() {
        let ws = [
            waiter(0, false, &[(10, 50, 1)]),
            waiter(1, false, &[(20, 50, 2)]),
            waiter(2, false, &[(30, 60, 3)]),
            waiter(3, false, &[(50, 70, 4)]),
        ];
        let m = merge(CrowdKind::Semaphore(3), &ws, 0);
        assert_eq!(m.most_holders, 3);
        assert_eq!(m.violations, 0);
        let m = merge(CrowdKind::Semaphore(2), &ws, 0);
        assert_eq!(m.violations, 1);
    }

    #[test]
    fn readers_share_and_a_writer_is_alone() {
        let ws = [
            waiter(0, false, &[(10, 50, 1)]),
            waiter(1, false, &[(20, 50, 1)]),
            waiter(9, true, &[(60, 70, 2)]),
        ];
        let m = merge(CrowdKind::Rw, &ws, 0);
        assert_eq!((m.most_readers, m.most_holders, m.violations), (2, 2, 0));
        assert_eq!((m.writers, m.writers_served), (1, 1));
        let ws = [waiter(0, false, &[(10, 50, 1)]), waiter(9, true, &[(40, 70, 2)])];
        let m = merge(CrowdKind::Rw, &ws, 0);
        assert_eq!(m.violations, 1, "a writer beside a reader");
    }
}
