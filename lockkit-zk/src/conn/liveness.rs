//! The session's liveness record: its marker node (`SESSIONS/<id>`), which
//! the heartbeat rewrites every [`REFRESH_EVERY`] while the session has a
//! waiter (or a hold granted after a wait that it has not claimed yet, see
//! [`crate::claim`]) — one write per session and interval, however many
//! waiters it has. Other backends read its version: a waiter's node whose
//! session's record has not changed for [`STALE_AFTER`] is a dead waiter's,
//! and the waiter behind it takes it out of the line (see [`crate::dead`]).
//!
//! A hold granted after a wait rests on this record too until it is
//! claimed: its lease's deadline is capped ([`Session::cap`]) at the send
//! time of the last answered refresh (or of the node's create, if later)
//! plus [`STALE_AFTER`] less the drift allowance, so a holder whose process
//! stalled that long knows itself lost before another backend could take
//! its node away.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use lockkit_core::lease::{SessionDeadline, valid_until};

use super::{Session, lock};

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

/// A cap on a lease's deadline (see [`Session::cap`]); dropping it stops
/// moving it.
pub(crate) struct Cap {
    session: Weak<Session>,
    id: u64,
    /// The capped deadline the lease carries.
    pub(crate) deadline: SessionDeadline,
}

impl Drop for Cap {
    fn drop(&mut self) {
        if let Some(s) = self.session.upgrade() {
            lock(&s.caps).remove(&self.id);
        }
    }
}

impl Session {
    /// Whether other backends can judge this session's liveness: it has a
    /// marker (a session without one cannot queue anyway).
    pub(crate) fn has_liveness(&self) -> bool {
        self.marker.is_some()
    }

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

    /// A refresh sent at `sent` was answered: every capped deadline moves
    /// to `sent` + the staleness bound.
    pub(crate) fn refreshed(&self, sent: Instant) {
        *lock(&self.last_refresh) = Some(sent);
        let until = live_until(sent);
        for cap in lock(&self.caps).values() {
            cap.extend_to(until);
        }
    }

    /// `self.deadline` capped by the liveness record: until the earlier of
    /// the session's deadline and the staleness bound after the last
    /// answered refresh or `floor` (the send time of the node's create),
    /// whichever is later, moving with each refresh until the cap is
    /// lifted.
    pub(crate) fn cap(self: &Arc<Self>, floor: Instant) -> Cap {
        let last = lock(&self.last_refresh).map_or(floor, |t| t.max(floor));
        let cap = SessionDeadline::new(live_until(last));
        let id = self.next_watch.fetch_add(1, Ordering::Relaxed);
        lock(&self.caps).insert(id, cap.clone());
        Cap {
            session: Arc::downgrade(self),
            id,
            deadline: self.deadline.capped(cap),
        }
    }
}

/// Until when a node of a session whose record was last refreshed (or the
/// node created) by a request sent at `sent` cannot be taken for dead.
fn live_until(sent: Instant) -> Instant {
    valid_until(sent, STALE_AFTER)
}
