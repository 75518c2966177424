//! What a run takes: the lock (`mutex`), permits of semaphores
//! (`semaphore:N`), read and write holds of read-write locks (`rw`,
//! `rw:W` with W writes per mille, default 100), or leaderships of
//! elections (`election`: each task a candidate that campaigns, leads for
//! a while and resigns; a leadership is a hold of the lock, so the
//! mutex's rules judge it: never two valid leaderships of different
//! owners at once, epochs growing).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The lock kind of a run (`--kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RunKind {
    #[default]
    Mutex,
    Semaphore(u32),
    Rw {
        writes_per_mille: u32,
    },
    Election,
}

impl FromStr for RunKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let (kind, n) = match s.split_once(':') {
            Some((k, n)) => (k, Some(n.parse::<u32>().map_err(|e| format!("{s:?}: {e}"))?)),
            None => (s, None),
        };
        match (kind, n) {
            ("mutex", None) => Ok(RunKind::Mutex),
            ("election", None) => Ok(RunKind::Election),
            ("semaphore", Some(n)) if n >= 1 => Ok(RunKind::Semaphore(n)),
            ("rw", None) => Ok(RunKind::Rw { writes_per_mille: 100 }),
            ("rw", Some(w)) if w <= 1000 => Ok(RunKind::Rw { writes_per_mille: w }),
            _ => Err(format!(
                "{s:?}: expected mutex, semaphore:N (N ≥ 1), rw[:W] (W writes per mille) or election"
            )),
        }
    }
}

impl fmt::Display for RunKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunKind::Mutex => write!(f, "mutex"),
            RunKind::Semaphore(n) => write!(f, "semaphore:{n}"),
            RunKind::Rw { writes_per_mille } => write!(f, "rw:{writes_per_mille}"),
            RunKind::Election => write!(f, "election"),
        }
    }
}

/// The kind of one hold, as a worker logs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldKind {
    #[default]
    Mutex,
    /// A permit of a semaphore of this many.
    Permit(u32),
    Read,
    Write,
}

impl HoldKind {
    pub fn is_mutex(&self) -> bool {
        *self == HoldKind::Mutex
    }

    /// A hold that excludes every other owner's (the mutex, a writer).
    pub fn exclusive(&self) -> bool {
        matches!(self, HoldKind::Mutex | HoldKind::Write)
    }

    pub fn lock_kind(self) -> lockkit::LockKind {
        match self {
            HoldKind::Mutex => lockkit::LockKind::Mutex,
            HoldKind::Permit(permits) => lockkit::LockKind::Permit { permits },
            HoldKind::Read => lockkit::LockKind::Read,
            HoldKind::Write => lockkit::LockKind::Write,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_print() {
        for s in ["mutex", "semaphore:3", "rw:100", "rw:0", "election"] {
            assert_eq!(s.parse::<RunKind>().unwrap().to_string(), s);
        }
        assert_eq!("rw".parse::<RunKind>(), Ok(RunKind::Rw { writes_per_mille: 100 }));
        for bad in ["semaphore", "semaphore:0", "rw:1001", "lock", "mutex:2", "election:1"] {
            assert!(bad.parse::<RunKind>().is_err(), "{bad}");
        }
    }
}
