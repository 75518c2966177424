//! The session heartbeat: a cheap read every quarter of the session
//! timeout, whose answer proves the session alive and moves its deadline
//! (see [`SessionDeadline`](lockkit_core::raw::SessionDeadline)).
//!
//! The client library pings an idle connection too, and declares it lost
//! after two fifths of the session timeout without an answer — but it does
//! not say when the server last heard from the session, and it can only
//! notice anything while the process runs. A holder whose process did not
//! run for longer than the session timeout (stopped, swapped out, starved)
//! must not find its lock still held at its first look after resuming,
//! before the library's task has run: the deadline this heartbeat keeps is
//! what that look compares with the clock. The read stands in for the
//! library's own ping (which it sends only when the connection is idle), so
//! it costs next to nothing on the wire.

use std::sync::Weak;
use std::time::Instant;

use super::counters::Counters;
use super::liveness::{LIVE_TAG, REFRESH_EVERY};
use super::session::Session;
use crate::error::is_session_end;

/// Beats until the session ends or its backend is dropped. Holds no strong
/// reference while it waits. While the session needs its liveness record
/// fresh (see [`super::liveness`]), each beat rewrites it instead, every
/// [`REFRESH_EVERY`]: the write proves the session alive as well.
pub(crate) async fn beat(session: Weak<Session>) {
    loop {
        let Some(s) = session.upgrade() else { return };
        let live = s.live_needed() && s.marker.is_some();
        let every = match live {
            true => REFRESH_EVERY,
            false => s.client.session_timeout() / 4,
        };
        let (dead, wake) = (s.dead_signal(), s.live_wake.clone());
        drop(s);
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            // The first waiter came: refresh at once.
            _ = wake.notified(), if !live => {}
            _ = dead.cancelled() => return,
        }
        let Some(s) = session.upgrade() else { return };
        let sent = Instant::now();
        let refresh = s.marker.as_ref().filter(|_| s.live_needed());
        let answer = tokio::select! {
            r = async {
                match refresh {
                    Some(marker) => s.client.set_data(marker, LIVE_TAG, None).await.map(|_| true),
                    None => s.client.check_stat("/").await.map(|_| false),
                }
            } => r,
            _ = dead.cancelled() => return,
        };
        match answer {
            Ok(refreshed) => {
                s.proven(sent);
                if refreshed {
                    Counters::bump(&s.counters().refreshes);
                    s.refreshed(sent);
                }
            }
            Err(e) if is_session_end(&e) => return,
            // Suspended: the next beat tries again (the library reports the
            // suspension itself). A marker gone (fenced by this backend's
            // next session) needs no refresh.
            Err(_) => {}
        }
    }
}
