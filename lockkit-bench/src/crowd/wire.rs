//! What the crowd's coordinator and its worker processes say to each
//! other: the kind a crowd takes, one waiter's tally, and the clock they
//! share.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One waiter in every `WRITER_EVERY` of a read-write crowd writes (the
/// kit's crowd case has the same mix).
pub const WRITER_EVERY: usize = 10;

/// What a crowd takes: `mutex`, `semaphore:N` or `rw` (mostly readers,
/// one writer in [`WRITER_EVERY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrowdKind {
    Mutex,
    Semaphore(u32),
    Rw,
}

impl CrowdKind {
    /// The lock kind waiter `i` asks for.
    pub fn want(self, i: usize) -> lockkit::LockKind {
        match self {
            CrowdKind::Mutex => lockkit::LockKind::Mutex,
            CrowdKind::Semaphore(permits) => lockkit::LockKind::Permit { permits },
            CrowdKind::Rw if is_writer(i) => lockkit::LockKind::Write,
            CrowdKind::Rw => lockkit::LockKind::Read,
        }
    }

    /// The kind a backend must support for this crowd.
    pub fn needs(self) -> lockkit::LockKind {
        match self {
            CrowdKind::Rw => lockkit::LockKind::Write,
            k => k.want(0),
        }
    }
}

/// Whether waiter `i` of a read-write crowd writes.
pub fn is_writer(i: usize) -> bool {
    i % WRITER_EVERY == WRITER_EVERY - 1
}

impl FromStr for CrowdKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "mutex" => Ok(CrowdKind::Mutex),
            None if s == "rw" => Ok(CrowdKind::Rw),
            Some(("semaphore", n)) => match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(CrowdKind::Semaphore(n)),
                _ => Err(format!("{s:?}: the permits of semaphore:N are a number ≥ 1")),
            },
            _ => Err(format!("{s:?}: expected mutex, semaphore:N or rw")),
        }
    }
}

impl fmt::Display for CrowdKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CrowdKind::Mutex => write!(f, "mutex"),
            CrowdKind::Semaphore(n) => write!(f, "semaphore:{n}"),
            CrowdKind::Rw => write!(f, "rw"),
        }
    }
}

/// One grant a waiter got: `CLOCK_MONOTONIC` ns when its `lock` returned
/// and when its section ended (just before `unlock` was called), so the
/// span lies inside the hold the server granted; a span overlapping
/// another that the kind forbids is a real overlap, not a clock artefact.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct Grant {
    pub granted: u64,
    pub released: u64,
    /// How long its `lock` call waited, µs.
    pub wait_us: u64,
    pub token: u64,
}

/// One waiter's tally, as its worker process reports it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Waiter {
    /// The waiter's index in the whole crowd.
    pub id: usize,
    /// A writer of a read-write crowd.
    pub write: bool,
    pub grants: Vec<Grant>,
    /// `lock` calls that ended with `WaitTimeout`.
    pub timeouts: u64,
    /// `lock` calls that failed otherwise.
    pub errors: u64,
    /// The first of those errors, with its sources.
    pub first_error: Option<String>,
    /// `unlock` calls that failed.
    pub unlock_errors: u64,
    /// A `lock` call still waiting when the measurement ended (it was
    /// dropped then): how long it had waited, µs.
    pub unfinished_us: Option<u64>,
    /// When its last call ended (ns), for the time a served-once crowd took.
    pub ended: u64,
}

/// A worker's first line: it connected (or why not).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Ready {
    pub error: Option<String>,
}

/// The coordinator's go: start at `start` (ns), stop asking at `end`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Go {
    pub start: u64,
    pub end: u64,
}

/// `CLOCK_MONOTONIC` now, ns: one clock for every process of the machine,
/// so the workers' spans can be merged.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes the timespec it is given; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An error and its sources, one line.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !s.contains(&more) {
            s.push_str(": ");
            s.push_str(&more);
        }
        source = cause.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_print() {
        for s in ["mutex", "semaphore:3", "rw"] {
            assert_eq!(s.parse::<CrowdKind>().unwrap().to_string(), s);
        }
        for bad in ["semaphore", "semaphore:0", "rw:2", "lock", ""] {
            assert!(bad.parse::<CrowdKind>().is_err(), "{bad}");
        }
        assert_eq!(CrowdKind::Rw.want(9), lockkit::LockKind::Write);
        assert_eq!(CrowdKind::Rw.want(0), lockkit::LockKind::Read);
    }
}
