//! The record formats: what a worker writes about its holds, what the
//! coordinator writes about its chaos, one JSON object per line, and the
//! clock they share.
//!
//! Times (`t`, `valid`) are raw `CLOCK_MONOTONIC` readings in nanoseconds:
//! one clock for every process on the machine, so the logs of different
//! processes compare.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::kind::HoldKind;

/// `CLOCK_MONOTONIC` now, in nanoseconds.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` of this process on the shared monotonic clock. The clock is
/// read before `Instant::now()`, so the result is never later than the
/// truth (a deadline is never stretched by the conversion).
pub fn instant_ns(at: Instant) -> u64 {
    let mono = mono_ns();
    let now = Instant::now();
    if at >= now {
        mono + nanos(at - now)
    } else {
        mono.saturating_sub(nanos(now - at))
    }
}

/// A duration in nanoseconds (saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// One line of a worker's log. `owner` is the task's owner id (one per
/// task, so tasks of one process contend like separate clients).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Record {
    /// The process started.
    Start {
        t: u64,
        pid: u32,
        worker: usize,
        incarnation: u32,
    },
    /// A task starts waiting for `name` (as `kind`: a lock's left out).
    Want {
        t: u64,
        name: String,
        owner: String,
        #[serde(default, skip_serializing_if = "HoldKind::is_mutex")]
        kind: HoldKind,
    },
    /// `lock` returned a guard. `valid`: its validity deadline (`None` for
    /// session leases); `count`: the hold count the guard reports (the
    /// owner's holds of the name on the server, this one included);
    /// `kind`: a lock's (left out), a permit's, a read or write hold's.
    Grant {
        t: u64,
        name: String,
        owner: String,
        token: u64,
        valid: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        count: Option<u32>,
        #[serde(default, skip_serializing_if = "HoldKind::is_mutex")]
        kind: HoldKind,
    },
    /// The holder saw its validity deadline move (a watchdog renewal), or
    /// (session leases) saw itself still holding.
    Valid {
        t: u64,
        name: String,
        owner: String,
        token: u64,
        valid: Option<u64>,
    },
    /// The hold ends: written before `unlock` is called, or when the lost
    /// signal was seen (`lost`).
    Release {
        t: u64,
        name: String,
        owner: String,
        token: u64,
        lost: bool,
    },
    /// `unlock` after a `Release` failed with an error other than `NotHeld`
    /// (e.g. the server was restarting): the server may still hold the name
    /// for this owner until the lease ends, so the owner's next `lock` of it
    /// can be a re-entry that keeps the token.
    UnlockFailed {
        t: u64,
        name: String,
        owner: String,
        token: u64,
        error: String,
    },
    /// `unlock` after a `Release` succeeded; `remaining`: the holds the
    /// owner still has on the name (0: the name is free now).
    Unlocked {
        t: u64,
        name: String,
        owner: String,
        token: u64,
        remaining: u32,
    },
    /// A wait ended without a grant (timed out, failed, or the run ended).
    Fail {
        t: u64,
        name: String,
        owner: String,
        error: String,
        /// The call ran out of its wait bound (`WaitTimeout`); absent in
        /// older logs.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        timed_out: bool,
    },
}

impl Record {
    /// The time of the record.
    pub fn t(&self) -> u64 {
        match self {
            Record::Start { t, .. }
            | Record::Want { t, .. }
            | Record::Grant { t, .. }
            | Record::Valid { t, .. }
            | Record::Release { t, .. }
            | Record::UnlockFailed { t, .. }
            | Record::Unlocked { t, .. }
            | Record::Fail { t, .. } => *t,
        }
    }
}

/// One line of the coordinator's chaos log. `worker` and `incarnation` name
/// a worker process (its log is `w{worker}-{incarnation}.jsonl`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// The run's parameters the checker needs (first line).
    Run {
        t: u64,
        seed: u64,
        backend: String,
        /// How long a killed holder's name may stay taken (ttl, ttl + sweep
        /// interval, session timeout + server tick).
        bound_ns: u64,
        /// Scheduling and wake-up slack on top of `bound_ns`.
        slack_ns: u64,
        /// Session leases: the session timeout (a paused holder's hold is
        /// certain only until half of it past the pause).
        session_ns: Option<u64>,
        /// Pairs of worker processes share their owner ids (`--shared-owners`).
        #[serde(default)]
        shared_owners: bool,
    },
    /// A worker process started.
    Spawn {
        t: u64,
        worker: usize,
        incarnation: u32,
        pid: u32,
    },
    /// A worker was sent SIGKILL.
    Kill {
        t: u64,
        worker: usize,
        incarnation: u32,
        pid: u32,
    },
    /// A worker was sent SIGSTOP.
    Pause {
        t: u64,
        worker: usize,
        incarnation: u32,
        pid: u32,
    },
    /// A paused worker was sent SIGCONT.
    Resume {
        t: u64,
        worker: usize,
        incarnation: u32,
        pid: u32,
    },
    /// A worker exited (after the run, or on its own); `forced`: it had to
    /// be killed at the end.
    Exit {
        t: u64,
        worker: usize,
        incarnation: u32,
        pid: u32,
        forced: bool,
    },
    /// The server restart command started.
    RestartBegin { t: u64 },
    /// The server restart command ended (`ok`: exit status 0).
    RestartEnd { t: u64, ok: bool },
    /// The run ended (no more chaos, workers told to stop).
    End { t: u64 },
    /// A network or node fault began: `kind` is one of [`FAULT_KINDS`],
    /// `node` the server's index in the backend URL.
    Fault {
        t: u64,
        kind: String,
        node: usize,
        detail: String,
    },
    /// The fault that began last is over (healed, or the node is back).
    FaultEnd { t: u64, ok: bool },
    /// After the workers stopped: what the backend says of a name of the
    /// run (`round` 0 at once, 1 after the lease bound); `holder` is
    /// `None` when the name is free.
    Inspect {
        t: u64,
        round: u32,
        name: String,
        holder: Option<Holder>,
        /// The inspection failed (a violation: the run cannot show the name free).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// A leftover hold seen by an inspection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub owner: String,
    pub count: u32,
    pub token: u64,
}

/// The faults of `--proxy` (through a fault proxy in front of a server) and
/// `--node-faults` (on one server of a multi-node URL), as logged.
pub const FAULT_KINDS: [&str; 6] = ["latency", "lose_replies", "reset", "pause", "kill", "wipe"];

/// An append-only JSON-lines file written with one `write` per line, so a
/// killed process's log is complete up to the kill.
#[derive(Debug)]
pub struct LineWriter {
    file: File,
}

impl LineWriter {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(LineWriter {
            file: File::create(path)?,
        })
    }

    /// Writes one record as one line.
    pub fn write<T: Serialize>(&mut self, record: &T) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()
    }
}

/// Reads a JSON-lines file; a torn last line (a kill mid-write) is skipped.
pub fn read_lines<T: for<'de> Deserialize<'de>>(path: &Path) -> std::io::Result<Vec<T>> {
    let mut out = Vec::new();
    for line in BufReader::new(File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(&line) {
            Ok(r) => out.push(r),
            Err(e) => eprintln!("{}: skipping unreadable line ({e}): {line}", path.display()),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_as_tagged_lines() {
        let r = Record::Grant {
            t: 5,
            name: "a".into(),
            owner: "o".into(),
            token: 7,
            valid: Some(9),
            count: Some(1),
            kind: HoldKind::Mutex,
        };
        let line = serde_json::to_string(&r).unwrap();
        assert!(line.contains(r#""ev":"grant""#), "{line}");
        assert_eq!(serde_json::from_str::<Record>(&line).unwrap(), r);
    }

    #[test]
    fn instant_conversion_is_on_the_monotonic_clock() {
        let before = mono_ns();
        let at = instant_ns(Instant::now() + Duration::from_secs(2));
        let after = mono_ns();
        assert!(
            at >= before + 1_999_000_000 && at <= after + 2_000_000_000,
            "{before} {at} {after}"
        );
    }
}
