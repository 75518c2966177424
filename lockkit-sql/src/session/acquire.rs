//! Acquiring: a try on the primary connection (one statement: the lock
//! and a token), and a wait on a spare connection of its own, ended
//! server-side if the caller stops waiting.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::LockError;
use lockkit_core::backend::{AcquireRequest, Lease, LockBackend, TryAcquire};
use lockkit_core::detach_acquisition;
use tokio_util::sync::CancellationToken;

use super::carrier::{Session, Spare};
use super::conn::{LONGEST_WAIT, Waited};
use super::key::Key;
use super::{Inner, SessionBackend};
use crate::error::{Class, backend_error, classify};

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

    /// Acquires, waiting server-side up to `wait`.
    pub(crate) async fn acquire_waiting(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| Instant::now() + w);
        // A spare connection that died while idle fails its wait: it is
        // dropped, and the wait goes once more on another one.
        let mut failed_waits = 0;
        loop {
            if let TryAcquire::Acquired(lease) = self.attempt(req).await? {
                return Ok(Some(lease));
            }
            let left = match deadline {
                Some(d) => d.saturating_duration_since(Instant::now()),
                None => LONGEST_WAIT,
            };
            if left.is_zero() {
                return Ok(None);
            }
            match self.inner.clone().wait_on_spare(req, left).await {
                Ok(Some(lease)) => return Ok(Some(lease)),
                Ok(None) => {}
                Err(e) if e.is_retryable() && failed_waits == 0 => failed_waits += 1,
                Err(e) => return Err(e),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        }
    }
}

impl Inner {
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
        match conn.try_lock(&self.sql, &key).await {
            Ok(Some(token)) => Ok(TryAcquire::Acquired(self.record(name, owner, attempt, token, &session))),
            Ok(None) => Ok(TryAcquire::Busy { retry_in: None }),
            Err(e) => {
                let dropped = classify(&e) != Class::Permanent;
                self.statement_failed(&session, &mut guard, &e);
                Err((backend_error(self.kind, "acquire", Some(name), e), dropped))
            }
        }
    }

    /// Waits for `req`'s name on a spare connection, at most `left`. The
    /// statement runs in a task of its own; if this future is dropped, the
    /// task ends the server-side wait (`KILL` / `pg_terminate_backend`
    /// from another connection) and drops the connection, so the server
    /// neither keeps the waiter in line nor grants it the lock later. A
    /// grant that arrives as the caller leaves is dropped with its
    /// connection, which frees it at once.
    async fn wait_on_spare(
        self: Arc<Self>,
        req: &AcquireRequest<'_>,
        left: Duration,
    ) -> Result<Option<Lease>, LockError> {
        let name = req.name;
        let Spare { mut conn, id } = self
            .take_spare()
            .await
            .map_err(|e| backend_error(self.kind, "acquire", Some(name), e))?;
        let cancel = CancellationToken::new();
        let key = Key::of(self.config.dialect, name);
        let task = tokio::spawn({
            let (inner, cancel) = (self.clone(), cancel.clone());
            async move {
                let out = tokio::select! {
                    biased;
                    out = conn.wait_lock(&inner.sql, &key, left) => out,
                    () = cancel.cancelled() => {
                        inner.kill(id).await;
                        return None;
                    }
                };
                Some((conn, out))
            }
        });
        let on_drop = cancel.drop_guard();
        let joined = task.await;
        drop(on_drop.disarm());
        let (conn, out) = match joined {
            Ok(Some(done)) => done,
            Ok(None) => return Ok(None),
            Err(e) => {
                return Err(LockError::backend(self.kind, "acquire", Some(name), true, e));
            }
        };
        match out {
            Ok(Waited::Granted(token)) => {
                let session = Session::new(conn, id, false);
                let lease = self.record(name, req.owner, req.attempt, token, &session);
                self.carriers.lock().unwrap_or_else(|e| e.into_inner()).push(session);
                Ok(Some(lease))
            }
            Ok(Waited::TimedOut) => {
                self.put_spare(Spare { conn, id });
                Ok(None)
            }
            // The connection may be broken: drop it (the server then drops
            // whatever it waited for).
            Err(e) => Err(backend_error(self.kind, "acquire", Some(name), e)),
        }
    }

    /// Ends the connection `id` (a wait nobody waits for any more), from
    /// a spare connection. Logged on failure: the server then drops the
    /// wait when it finds the connection closed.
    async fn kill(&self, id: i64) {
        let result = async {
            let mut spare = self.take_spare().await?;
            spare.conn.kill(id).await?;
            self.put_spare(spare);
            Ok::<_, sqlx::Error>(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(backend = self.kind, connection = id, %error, "ending an abandoned wait failed");
        }
    }
}
