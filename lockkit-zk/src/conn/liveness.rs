//! The session's liveness record: its marker node (`SESSIONS/<id>`), which
//! the heartbeat rewrites every [`REFRESH_EVERY`] while the session has a
//! waiter — one write per session and interval, however many waiters it
//! has. Other backends read its version: a waiter's node whose session's
//! record has not changed for [`STALE_AFTER`] is a dead waiter's, and the
//! waiter behind it takes it out of the line (see [`crate::dead`]). A node
//! that holds is never taken out: its holder claimed it before using it
//! (see [`crate::claim`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use super::mutex::lock;
use super::session::Session;

/// How often a session with waiters rewrites its liveness record.
pub(crate) const REFRESH_EVERY: Duration = Duration::from_millis(100);

/// How long a session's liveness record must stand unchanged, as one
/// observer saw it without a break, before its waiting nodes count as dead.
/// Three refreshes missed: a live process whose refresh is late by less
/// than two hundred milliseconds keeps its place.
pub(crate) const STALE_AFTER: Duration = Duration::from_millis(300);

/// The data of a marker whose session keeps it fresh while it waits: an
/// observer judges only these (a session of an earlier lockkit, whose
/// marker is empty, is never taken for dead).
pub(crate) const LIVE_TAG: &[u8] = b"lockkit/live";

/// Keeps the session's liveness record fresh while it lives.
pub(crate) struct LiveGuard(Weak<Session>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if let Some(s) = self.0.upgrade() {
            s.live_needed.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Session {
    /// Keeps the liveness record fresh until the guard goes.
    pub(crate) fn live(self: &Arc<Self>) -> LiveGuard {
        if self.live_needed.fetch_add(1, Ordering::AcqRel) == 0 {
            self.live_wake.notify_one();
        }
        LiveGuard(Arc::downgrade(self))
    }

    /// Whether a refresh is due: something keeps the record fresh.
    pub(crate) fn live_needed(&self) -> bool {
        self.live_needed.load(Ordering::Acquire) > 0
    }

    /// The send time of the last answered refresh of the record.
    pub(crate) fn last_refresh(&self) -> Option<Instant> {
        *lock(&self.last_refresh)
    }

    /// A refresh sent at `sent` was answered.
    pub(crate) fn refreshed(&self, sent: Instant) {
        *lock(&self.last_refresh) = Some(sent);
    }
}
