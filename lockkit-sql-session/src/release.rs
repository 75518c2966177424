//! Releasing: a share of a hold goes back here; the last one releases the
//! server lock (one statement on the hold's connection). A connection
//! left without holds goes back to the spares.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lockkit_core::LockError;
use lockkit_core::raw::{Hold, ReleaseOutcome, detach};

use crate::conn::sessions::Session;
use crate::handle::{Inner, SessionBackend};
use crate::layout::Key;
use lockkit_sql::raw::backend_error;

/// What the local table says about a release.
enum Step {
    Done(ReleaseOutcome),
    /// The last share: release the server lock on this connection.
    Server(Arc<Session>),
}

impl SessionBackend {
    pub(crate) async fn release_hold(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let session = match self.inner.take_share(hold, attempt, None) {
            Step::Done(outcome) => return Ok(outcome),
            Step::Server(session) => session,
        };
        let inner = self.inner.clone();
        let (hold, attempt) = (hold.clone(), attempt.to_owned());
        // Detached: once the share is taken, the server lock is released
        // even if the caller stops waiting.
        detach(
            self.inner.kind,
            async move { inner.release_on(&session, &hold, &attempt).await },
            |_| async {},
        )
        .await?
    }
}

impl Inner {
    /// Takes `attempt`'s share of `hold` back if it is not the last one;
    /// with `on`, only while the hold is still on that connection, and
    /// then also the last one.
    fn take_share(&self, hold: &Hold, attempt: &str, on: Option<&Arc<Session>>) -> Step {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let Some(entry) = holds.get_mut(&hold.name) else {
            return Step::Done(ReleaseOutcome::NotHeld);
        };
        let same_session = on.is_none_or(|s| Arc::ptr_eq(s, &entry.session));
        if entry.owner != hold.owner || entry.token != hold.token || entry.session.is_lost() || !same_session {
            return Step::Done(ReleaseOutcome::NotHeld);
        }
        let remaining = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
        let Some(at) = entry.attempts.iter().position(|a| a == attempt) else {
            // Already taken back (a repeated release): nothing changes.
            return Step::Done(ReleaseOutcome::Released {
                remaining: remaining(entry.attempts.len()),
            });
        };
        if entry.attempts.len() > 1 {
            entry.attempts.remove(at);
            return Step::Done(ReleaseOutcome::Released {
                remaining: remaining(entry.attempts.len()),
            });
        }
        match on {
            None => Step::Server(entry.session.clone()),
            Some(session) => {
                holds.remove(&hold.name);
                session.holds.fetch_sub(1, Ordering::AcqRel);
                Step::Server(session.clone())
            }
        }
    }

    /// Releases the server lock of `hold` on `session`, under the
    /// connection's lock (looking at the table again under it: a re-entry
    /// may have come in between).
    async fn release_on(
        &self,
        session: &Arc<Session>,
        hold: &Hold,
        attempt: &str,
    ) -> Result<ReleaseOutcome, LockError> {
        let mut guard = session.conn.lock().await;
        if let Step::Done(outcome) = self.take_share(hold, attempt, Some(session)) {
            return Ok(outcome);
        }
        let _returning = (!session.primary && session.hold_count() == 0).then(|| self.returning());
        let Some(conn) = guard.as_mut() else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        let key = Key::of(self.config.dialect, &hold.name);
        let released = match conn.unlock(&self.sql, &key).await {
            Ok(released) => released,
            Err(e) => {
                // The connection is dropped, and the server frees its locks
                // with it: the hold is gone either way.
                tracing::debug!(backend = self.kind, lock = %hold.name, error = %e, "release failed; dropping the connection");
                self.statement_failed(session, &mut guard, &e);
                if lockkit_sql::raw::classify(&e) == lockkit_sql::raw::Class::Permanent {
                    return Err(backend_error(self.kind, "release", Some(&hold.name), e));
                }
                true
            }
        };
        self.retire_if_idle(session, &mut guard);
        Ok(if released {
            ReleaseOutcome::Released { remaining: 0 }
        } else {
            ReleaseOutcome::NotHeld
        })
    }
}
