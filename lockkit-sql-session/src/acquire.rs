//! Acquiring: a try on the primary connection (one statement: the lock
//! and a token), and a wait in the name's line behind the backend's one
//! server-side wait for it (the `wait` module).

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::{AcquireRequest, Joined, Lease, LockBackend, TryAcquire, detach_acquisition};
use tokio::time::Instant;

use crate::conn::driver::Tried;
use crate::handle::{Inner, SessionBackend};
use crate::layout::Key;
use crate::line::{Turn, Waiter};
use lockkit_sql::raw::{Class, backend_error, classify};

/// How long a name a try found busy goes straight to the line: a `lock`
/// that waits skips the try, whose statement would mostly find the name
/// busy again, and queues in the server at once (its wait is granted at
/// once if the name came free). Once this passed since a try last found it
/// busy, the next `lock` tries first again.
pub(super) const BUSY_FOR: Duration = Duration::from_secs(1);

/// Names remembered as busy, at most; beyond, the oldest half is dropped.
const BUSY_NAMES: usize = 1024;

impl SessionBackend {
    /// One attempt that never waits: answered here (re-entry, another
    /// owner of this backend) or by one statement on the primary
    /// connection. Detached: a grant whose caller left is released.
    pub(crate) async fn attempt(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.check_kind(req.kind)?;
        if let Some(local) = self.inner.local_try(req.name, req.owner, req.attempt) {
            return Ok(local);
        }
        let inner = self.inner.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let backend = self.clone();
        let release_attempt = attempt.clone();
        let work = async move { inner.try_primary(&name, &owner, &attempt).await };
        detach_acquisition(
            self.inner.kind,
            req,
            work,
            |r: &Result<TryAcquire, LockError>| r.as_ref().ok().and_then(TryAcquire::token),
            move |hold| async move { backend.release(&hold, &release_attempt).await },
        )
        .await?
    }

    /// Acquires, waiting up to `wait`: at once if this backend can answer
    /// (re-entry) or the server grants a try; otherwise in the name's line
    /// (see the `wait` module). A fair acquisition does not try ahead of
    /// the tasks already in line.
    pub(crate) async fn acquire_waiting(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        self.check_kind(req.kind)?;
        let deadline = wait.map(|w| Instant::now() + w);
        if let Some(TryAcquire::Acquired(lease)) = self.inner.local_try(req.name, req.owner, req.attempt) {
            return Ok(Some(lease));
        }
        let in_line = req.fair && !self.inner.lines.is_empty(req.name);
        if !in_line && !self.inner.recently_busy(req.name) {
            match self.attempt(req).await? {
                TryAcquire::Acquired(lease) => return Ok(Some(lease)),
                TryAcquire::Busy { .. } => self.inner.found_busy(req.name),
            }
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Ok(None);
        }
        self.inner.wait_in_line(req, deadline).await
    }
}

impl Inner {
    /// Whether a try found `name` busy within [`BUSY_FOR`].
    fn recently_busy(&self, name: &str) -> bool {
        let busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        busy.get(name).is_some_and(|at| at.elapsed() < BUSY_FOR)
    }

    /// A try found `name` busy.
    fn found_busy(&self, name: &str) {
        let mut busy = self.busy.lock().unwrap_or_else(|p| p.into_inner());
        if busy.len() >= BUSY_NAMES {
            busy.retain(|_, at| at.elapsed() < BUSY_FOR);
            if busy.len() >= BUSY_NAMES {
                busy.clear();
            }
        }
        busy.insert(name.to_owned(), Instant::now());
    }

    /// The try on the primary connection. Runs under that connection's
    /// lock and looks at this backend's holds again under it, so a name
    /// this backend holds there is never locked twice on it (the server
    /// would count that as a re-entry of the connection).
    pub(crate) async fn try_primary(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        attempt: &str,
    ) -> Result<TryAcquire, LockError> {
        // A primary connection that died while idle (a server restart, an
        // idle timeout) fails the first statement: it is dropped (with any
        // grant the statement may have made) and the try goes once more
        // on a new one.
        match self.try_primary_once(name, owner, attempt).await {
            Err((_, true)) => self.try_primary_once(name, owner, attempt).await.map_err(|(e, _)| e),
            other => other.map_err(|(e, _)| e),
        }
    }

    /// One try on the primary connection; on failure, whether the
    /// connection was dropped (so a second try goes to a new one).
    async fn try_primary_once(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        attempt: &str,
    ) -> Result<TryAcquire, (LockError, bool)> {
        let session = self.primary().await.map_err(|e| (e, false))?;
        let mut guard = session.conn.lock().await;
        if let Some(local) = self.local_try(name, owner, attempt) {
            return Ok(local);
        }
        let Some(conn) = guard.as_mut() else {
            return Err((self.lost_error("acquire", name, &session), true));
        };
        let key = Key::of(self.config.dialect, name);
        match conn.try_lock(&self.sql, &key, session.id).await {
            Ok(Tried::Granted(token)) => Ok(TryAcquire::Acquired(self.record(name, owner, attempt, token, &session))),
            Ok(Tried::Busy) => Ok(TryAcquire::Busy { retry_in: None }),
            // A pooler moved the connection's statements: nothing on it can
            // be trusted (see `pooler.rs`).
            Ok(Tried::OtherSession) => {
                *guard = None;
                self.forget_session(&session);
                Err((crate::pooler::refused(None), false))
            }
            Err(e) => {
                let dropped = classify(&e) != Class::Permanent;
                self.statement_failed(&session, &mut guard, &e);
                Err((backend_error(self.kind, "acquire", Some(name), e), dropped))
            }
        }
    }

    /// Waits in `req`'s line until the leader hands this task the name, its
    /// owner holds it, the wait fails, or `deadline` passes. Cancel safe:
    /// dropped, the task leaves the line (a grant it did not read goes on).
    async fn wait_in_line(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, LockError> {
        let (name, owner) = (req.name, req.owner);
        let waiter = Waiter {
            owner: owner.to_owned(),
            deadline,
        };
        let Joined { mut place, lead } = self.lines.join(name, waiter);
        if lead {
            tokio::spawn(self.clone().lead(name.to_owned()));
        }
        // The owner may have been granted the name since the look before
        // joining, when the news could not reach this task yet.
        if let Some(TryAcquire::Acquired(lease)) = self.local_try(name, owner, req.attempt) {
            return Ok(Some(lease));
        }
        loop {
            let turn = match deadline {
                Some(d) => match tokio::time::timeout_at(d, place.recv()).await {
                    Ok(turn) => turn,
                    Err(_) => return Ok(None),
                },
                None => place.recv().await,
            };
            match turn {
                // The connection died before the task read the grant: the
                // lock went with it; wait on.
                Some(Turn::Granted(grant)) if grant.session.is_lost() => {}
                Some(Turn::Granted(grant)) => {
                    let lease = self.record(name, owner, req.attempt, grant.token, &grant.session);
                    self.lines.hand_where(name, |w| w.owner == owner, |_| Turn::OwnerHolds);
                    return Ok(Some(lease));
                }
                Some(Turn::OwnerHolds) => {
                    if let Some(TryAcquire::Acquired(lease)) = self.local_try(name, owner, req.attempt) {
                        return Ok(Some(lease));
                    }
                    // Released again before this task came to it.
                }
                Some(Turn::Failed(e)) => return Err(e.to_error(self.kind, name)),
                None => {}
            }
            if place.rejoin() {
                tokio::spawn(self.clone().lead(name.to_owned()));
            }
        }
    }
}
