//! Waiting for a permit or a read-write lock: a place in the name's line
//! and attempts on a backoff, woken by releases (see the module docs of
//! `kinds`).

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::backend::{AcquireRequest, Lease, LockKind, TryAcquire};
use lockkit_core::backoff::{Backoff, bounded_delay};
use lockkit_core::{LockError, detach};

use super::line_key;
use crate::backend::{Inner, SqlBackend};
use crate::wait::{leave_later, leave_now};

/// A waiter's place in a name's line. Dropped without
/// [`served`](Self::served) or [`leave`](Self::leave) — the `lock` future
/// was cancelled — it leaves in the background.
struct Place {
    inner: Arc<Inner>,
    kind: LockKind,
    name: String,
    attempt: String,
    /// Served or left: nothing to take out.
    done: bool,
}

impl Place {
    /// The claim that granted the request took the place out.
    fn served(mut self) {
        self.done = true;
    }

    /// Gave up (wait bound, error): the place goes now.
    async fn leave(mut self) {
        self.done = true;
        let leaving = self.inner.kind_leave(self.kind, &self.name, &self.attempt);
        leave_now(self.inner.kind, leaving).await;
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Cancelled: leave in the background, if a runtime still runs.
        let (inner, kind) = (self.inner.clone(), self.kind);
        let (name, attempt) = (std::mem::take(&mut self.name), std::mem::take(&mut self.attempt));
        leave_later(inner.kind, async move { inner.kind_leave(kind, &name, &attempt).await });
    }
}

impl SqlBackend {
    /// `lock` of a semaphore or read-write lock: one attempt; if busy, a
    /// place in the name's line, then attempts (each renewing the place)
    /// until one is granted or the wait runs out. Woken by this process's
    /// releases of the name (Postgres: every process's), else on a backoff
    /// of at most `max_backoff` and a third of the place's lease.
    pub(crate) async fn acquire_kind(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let inner = &self.inner;
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let subscription = inner.waiters.subscribe(&line_key(req.name, req.kind));
        if let Some(lease) = self.attempt_before_line(req).await? {
            return Ok(Some(lease));
        }
        let mut place = self.join_kind_line(req).await?;
        let most = inner.config.max_backoff.min(inner.config.queue_lease / 3);
        let mut backoff = Backoff::new(Duration::from_millis(2), most);
        loop {
            // Listen before trying, so a wake-up during the attempt is kept.
            let notified = subscription.notify().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (retry_in, last_error) = match self.detached_attempt(req, true).await {
                Ok((TryAcquire::Acquired(lease), _)) => {
                    place.served();
                    return Ok(Some(lease));
                }
                Ok((TryAcquire::Busy { retry_in }, placed)) => {
                    if !placed {
                        // The place's lease ran out (this task stalled):
                        // join again, at the back.
                        match self.join_kind_line(req).await {
                            Ok(again) => std::mem::replace(&mut place, again).served(),
                            Err(e) => tracing::debug!(error = %e, "lockkit could not rejoin the line; retrying"),
                        }
                    }
                    (retry_in, None)
                }
                Err(e) if e.is_retryable() => {
                    tracing::debug!(error = %e, "lock attempt failed; retrying");
                    (None, Some(e))
                }
                Err(e) => {
                    place.leave().await;
                    return Err(e);
                }
            };
            let now = tokio::time::Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                place.leave().await;
                return last_error.map_or(Ok(None), Err);
            }
            let delay = bounded_delay(&mut backoff, retry_in, deadline, now).min(most);
            tokio::select! {
                _ = notified => {}
                _ = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Joins the name's line, detached: a caller cancelled mid-way leaves
    /// no place behind.
    async fn join_kind_line(&self, req: &AcquireRequest<'_>) -> Result<Place, LockError> {
        let inner = self.inner.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let (ttl, fair, kind) = (req.ttl, req.fair, req.kind);
        let work = {
            let (inner, name, attempt) = (inner.clone(), name.clone(), attempt.clone());
            async move {
                let req = AcquireRequest {
                    name: &name,
                    owner: &owner,
                    ttl,
                    attempt: &attempt,
                    fair,
                    kind,
                };
                inner.kind_join(&req).await
            }
        };
        let orphan = {
            let (inner, name, attempt) = (inner.clone(), name.clone(), attempt.clone());
            move |_| async move {
                let _ = inner.kind_leave(kind, &name, &attempt).await;
            }
        };
        detach(inner.kind, work, orphan).await??;
        Ok(Place {
            inner,
            kind,
            name,
            attempt,
            done: false,
        })
    }
}
