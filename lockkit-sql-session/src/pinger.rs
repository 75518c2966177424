//! The watch on connections that carry holds: one task per backend pings
//! each of them every `ping_interval`; a connection that fails (closed,
//! killed, unanswered) loses its holds, and their lost signals fire.

use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::conn::sessions::Session;
use crate::handle::Inner;

/// Starts the task; it ends when the backend is dropped.
pub(crate) fn spawn(inner: &Arc<Inner>) {
    let weak: Weak<Inner> = Arc::downgrade(inner);
    let (interval, stop) = (inner.config.ping_interval, inner.stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(interval) => {}
            }
            let Some(inner) = weak.upgrade() else { return };
            let sessions = inner.carrying_sessions().await;
            // An answer is due well within a few intervals; a server that
            // does not answer that long is treated as gone.
            let bound = (interval * 3).max(Duration::from_secs(5));
            futures_util::future::join_all(sessions.iter().map(|s| inner.ping(s, bound))).await;
        }
    });
}

impl Inner {
    /// The connections that carry holds now.
    async fn carrying_sessions(&self) -> Vec<Arc<Session>> {
        let mut sessions: Vec<Arc<Session>> = self.carriers.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(primary) = self.primary.lock().await.clone()
            && primary.hold_count() > 0
        {
            sessions.push(primary);
        }
        sessions
    }

    /// Pings one connection; a failure ends it and its holds.
    async fn ping(&self, session: &Arc<Session>, bound: Duration) {
        let pinged = tokio::time::timeout(bound, async {
            let mut guard = session.conn.lock().await;
            let Some(conn) = guard.as_mut() else { return Ok(()) };
            match conn.ping().await {
                Ok(()) => Ok(()),
                Err(e) => {
                    *guard = None;
                    Err(e.to_string())
                }
            }
        })
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {bound:?}")));
        if let Err(error) = pinged {
            tracing::warn!(backend = self.kind, connection = session.id, %error,
                "a connection carrying holds is lost; their lost signals fire");
            if let Ok(mut guard) = session.conn.try_lock() {
                *guard = None;
            }
            self.forget_session(session);
        }
    }
}
