//! The checker's first step: the coordinator's events give each worker
//! process its pid, kill, end and pauses, and the server restarts and
//! faults (which excuse a late free).

use std::collections::HashMap;

use super::checker::{Checker, ProcInfo};
use super::report::Report;
use crate::log::{Event, Record};

impl Checker<'_> {
    /// Reads the coordinator's events: the processes' kills, ends and
    /// pauses, the server restarts and faults, and their counts.
    pub(super) fn read_events(&mut self, events: &[Event], report: &mut Report) {
        let procs = self.procs;
        let index: HashMap<(usize, u32), usize> = procs
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.worker, p.incarnation), i))
            .collect();
        self.info = procs
            .iter()
            .map(|p| ProcInfo {
                end: p.records.iter().map(Record::t).max().unwrap_or(0),
                ..ProcInfo::default()
            })
            .collect();
        let Checker { info, restarts, .. } = self;
        let mut open_restart = None;
        let mut open_fault: Option<&str> = None;
        for e in events {
            match e {
                Event::Kill {
                    t,
                    worker,
                    incarnation,
                    pid,
                } => {
                    report.kills += 1;
                    if let Some(&i) = index.get(&(*worker, *incarnation)) {
                        info[i].killed_at = Some(*t);
                        info[i].end = *t;
                        info[i].pid = Some(*pid);
                    }
                }
                Event::Exit {
                    t, worker, incarnation, ..
                } => {
                    if let Some(&i) = index.get(&(*worker, *incarnation))
                        && info[i].killed_at.is_none()
                    {
                        info[i].end = info[i].end.max(*t);
                    }
                }
                Event::Pause {
                    t, worker, incarnation, ..
                } => {
                    report.pauses += 1;
                    if let Some(&i) = index.get(&(*worker, *incarnation)) {
                        info[i].pauses.push((*t, u64::MAX));
                    }
                }
                Event::Resume {
                    t, worker, incarnation, ..
                } => {
                    if let Some(&i) = index.get(&(*worker, *incarnation))
                        && let Some(p) = info[i].pauses.last_mut()
                    {
                        p.1 = *t;
                    }
                }
                Event::Spawn { incarnation, .. } if *incarnation > 0 => report.worker_restarts += 1,
                Event::RestartBegin { t } => open_restart = Some(*t),
                Event::RestartEnd { t, ok } => {
                    if *ok {
                        report.server_restarts += 1;
                    }
                    restarts.push((open_restart.take().unwrap_or(*t), *t));
                }
                // A fault slows or cuts the path: like a restart, it excuses a late free.
                Event::Fault { t, kind, .. } => {
                    open_fault = Some(kind.as_str());
                    open_restart = Some(*t);
                }
                Event::FaultEnd { t, ok } => {
                    // Counted once over, and only where it could be done.
                    if let Some(kind) = open_fault.take()
                        && *ok
                    {
                        *report.faults.entry(kind.to_owned()).or_default() += 1;
                    }
                    restarts.push((open_restart.take().unwrap_or(*t), *t));
                }
                _ => {}
            }
        }
        if let Some(b) = open_restart {
            restarts.push((b, u64::MAX));
        }
    }
}
