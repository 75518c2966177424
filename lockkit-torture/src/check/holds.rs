//! The checker's second step: each worker's records become holds (one per
//! grant, and one per `lock` call that may have left a share), and each
//! hold's validity intervals.

use std::collections::HashMap;

use super::checker::{Checker, Hold, record_owner};
use super::report::Report;
use crate::kind::HoldKind;
use crate::log::Record;

impl Checker<'_> {
    /// Reads the holds from every process's records.
    pub(super) fn read_holds(&mut self, report: &mut Report) {
        let Checker {
            procs,
            info,
            holds,
            session,
            ..
        } = self;
        for (pi, p) in procs.iter().enumerate() {
            let mut current: HashMap<&str, usize> = HashMap::new();
            let mut released: HashMap<&str, usize> = HashMap::new();
            let mut wants: HashMap<&str, u64> = HashMap::new();
            // Released holds whose owner has written nothing since (but the unlock outcome).
            let mut awaiting: HashMap<&str, usize> = HashMap::new();
            // `lock` calls under way: owner -> (start, name, kind).
            let mut open_calls: HashMap<&str, (u64, &String, HoldKind)> = HashMap::new();
            for r in &p.records {
                if !matches!(r, Record::Unlocked { .. } | Record::UnlockFailed { .. })
                    && let Some(owner) = record_owner(r)
                    && let Some(h) = awaiting.remove(owner.as_str())
                {
                    holds[h].next_t = Some(r.t());
                }
                match r {
                    Record::Start { pid, .. } => info[pi].pid = info[pi].pid.or(Some(*pid)),
                    Record::Want { t, owner, name, kind } => {
                        wants.insert(owner, *t);
                        open_calls.insert(owner, (*t, name, *kind));
                    }
                    Record::Grant {
                        t,
                        name,
                        owner,
                        token,
                        valid,
                        count,
                        kind,
                    } => {
                        report.grants += 1;
                        current.insert(owner, holds.len());
                        holds.push(Hold {
                            proc: pi,
                            name: name.clone(),
                            owner: owner.clone(),
                            token: *token,
                            want_t: wants.get(owner.as_str()).copied().unwrap_or(*t),
                            grant_t: *t,
                            count: *count,
                            kind: *kind,
                            points: vec![(*t, *valid)],
                            release: None,
                            unlock_failed: false,
                            unlocked: None,
                            next_t: None,
                            intervals: Vec::new(),
                            share_end: 0,
                            pending: false,
                        });
                    }
                    Record::Valid {
                        t, owner, token, valid, ..
                    } => {
                        if let Some(&h) = current.get(owner.as_str())
                            && holds[h].token == *token
                        {
                            holds[h].points.push((*t, *valid));
                        }
                    }
                    Record::Release {
                        t, owner, token, lost, ..
                    } => {
                        if let Some(h) = current.remove(owner.as_str())
                            && holds[h].token == *token
                        {
                            holds[h].release = Some((*t, *lost));
                            released.insert(owner, h);
                            awaiting.insert(owner, h);
                            if *lost {
                                report.lost += 1;
                            }
                        }
                    }
                    Record::UnlockFailed { owner, token, .. } => {
                        if let Some(&h) = released.get(owner.as_str())
                            && holds[h].token == *token
                        {
                            holds[h].unlock_failed = true;
                        }
                    }
                    Record::Unlocked {
                        t,
                        owner,
                        token,
                        remaining,
                        ..
                    } => {
                        if let Some(&h) = released.get(owner.as_str())
                            && holds[h].token == *token
                        {
                            holds[h].unlocked = Some((*t, *remaining));
                        }
                    }
                    Record::Fail {
                        t,
                        owner,
                        error,
                        timed_out,
                        ..
                    } => {
                        if *timed_out {
                            report.timeouts += 1;
                        } else if error != "run ended" {
                            report.failed_calls += 1;
                        }
                        if let Some((want_t, name, kind)) = open_calls.remove(owner.as_str()) {
                            if error == "run ended" {
                                // Cancelled by the run's end: the backend's
                                // cleanup may not have run before the process
                                // exited.
                                holds.push(Hold::pending(pi, name, owner, kind, want_t, Some(*t)));
                            } else if session.is_none() {
                                // A lease backend takes a failed call's share
                                // back before the error returns, that look
                                // bounded by a third of the lease, and again
                                // in the background while a late command
                                // could land: on a slow link the share stands
                                // after the error, at most for its lease.
                                holds.push(Hold::pending(pi, name, owner, kind, want_t, Some(*t)));
                            } else {
                                // An error: the call's share may have stood
                                // while it ran (a co-owner may join it), and
                                // nothing of it after the call returned.
                                let mut h = Hold::pending(pi, name, owner, kind, want_t, None);
                                h.unlocked = Some((*t, 0));
                                holds.push(h);
                            }
                        }
                    }
                }
                if let Record::Grant { owner, .. } = r {
                    open_calls.remove(owner.as_str());
                }
            }
            // Calls the process never saw return.
            let mut left: Vec<(&str, (u64, &String, HoldKind))> = open_calls.into_iter().collect();
            left.sort_by_key(|(owner, (t, ..))| (*owner, *t));
            for (owner, (want_t, name, kind)) in left {
                holds.push(Hold::pending(pi, name, owner, kind, want_t, None));
            }
        }
    }

    /// The intervals each hold was valid on (see the module docs of
    /// [`crate::check`]), and the count of holds and never-held grants.
    pub(super) fn valid_intervals(&mut self, report: &mut Report) {
        let Checker {
            info, holds, session, ..
        } = self;
        for h in holds.iter_mut() {
            if h.pending {
                continue;
            }
            let pinfo = &info[h.proc];
            let mut end = h.release.map_or(pinfo.end, |(t, _)| t);
            if h.points.iter().all(|(_, d)| d.is_none()) {
                // A session lease: certain from the grant until the pause (+ session/2).
                for &(ps, _) in &pinfo.pauses {
                    if ps >= h.want_t && ps < end {
                        end = end.min(ps + session.unwrap_or(0) / 2);
                    }
                }
                if h.grant_t < end {
                    h.intervals.push((h.grant_t, end));
                }
            } else {
                let mut iv: Vec<(u64, u64)> = h
                    .points
                    .iter()
                    .filter_map(|&(t, d)| {
                        let e = d?.min(end);
                        (t < e).then_some((t, e))
                    })
                    .collect();
                iv.sort();
                for (s, e) in iv {
                    match h.intervals.last_mut() {
                        Some(last) if s <= last.1 => last.1 = last.1.max(e),
                        _ => h.intervals.push((s, e)),
                    }
                }
            }
            if h.intervals.is_empty() {
                report.never_held += 1;
            } else {
                report.holds += 1;
            }
        }
    }
}
