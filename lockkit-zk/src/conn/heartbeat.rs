//! The session heartbeat: a cheap read every quarter of the session
//! timeout, whose answer proves the session alive and moves its deadline
//! (see [`SessionDeadline`](lockkit_core::lease::SessionDeadline)).
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

use super::Session;
use crate::error::is_session_end;

/// Beats until the session ends or its backend is dropped. Holds no strong
/// reference while it waits.
pub(crate) async fn beat(session: Weak<Session>) {
    loop {
        let Some(s) = session.upgrade() else { return };
        let (dead, every) = (s.dead_signal(), s.client.session_timeout() / 4);
        drop(s);
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = dead.cancelled() => return,
        }
        let Some(s) = session.upgrade() else { return };
        let sent = Instant::now();
        let answer = tokio::select! {
            r = s.client.check_stat("/") => r,
            _ = dead.cancelled() => return,
        };
        match answer {
            Ok(_) => s.proven(sent),
            Err(e) if is_session_end(&e) => return,
            // Suspended: the next beat tries again (the library reports the
            // suspension itself).
            Err(_) => {}
        }
    }
}
