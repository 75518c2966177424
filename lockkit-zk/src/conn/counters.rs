//! [`Counters`]: one backend's counts of sessions, watches, wake-ups,
//! listings and the like, for its stats.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of one backend, for monitoring (and the herd-effect test).
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub sessions: AtomicU64,
    pub watches: AtomicU64,
    pub wakeups: AtomicU64,
    pub suspensions: AtomicU64,
    /// Listings of a line's children by acquisitions.
    pub listings: AtomicU64,
    /// Reads of other contenders' nodes by acquisitions.
    pub reads: AtomicU64,
    /// Dead waiters' nodes taken out of a line.
    pub dead_waiters: AtomicU64,
    /// Rewrites of the liveness record.
    pub refreshes: AtomicU64,
    /// Own nodes' stats read after the create's answer.
    pub late_stat_reads: AtomicU64,
}

impl Counters {
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
