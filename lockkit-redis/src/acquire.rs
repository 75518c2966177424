//! Acquiring on one Redis: one attempt (detached, so a cancelled caller's
//! hold is released), and the wait for a busy name.

use std::time::{Duration, Instant};

use lockkit_core::LockError;
use lockkit_core::raw::{AcquireRequest, Hold, Lease, LockBackend, TryAcquire, detach_acquisition, ttl_millis};

use crate::backend::RedisBackend;
use crate::error::Fault;
use crate::replicas::short_of;
use crate::scripts::{self, AcquireReply, Claim, Queueing, millis};
use crate::turn::{Turn, TurnOf};
use crate::wait::{Attempt, UNKNOWN_LEASE_RECHECK, wait_loop};

impl RedisBackend {
    /// [`LockBackend::acquire`]: one attempt when the name looks free, then
    /// the wait loop.
    pub(crate) async fn acquire_waiting(
        &self,
        req: &AcquireRequest<'_>,
        wait: Option<Duration>,
    ) -> Result<Option<Lease>, LockError> {
        let deadline = wait.map(|w| tokio::time::Instant::now() + w);
        let channel = self.inner.keys.holds(req.name, req.kind);
        // Uncontended: one round trip, no subscription. A retryable failure
        // (a reply lost to a timeout or a reset) is tried again in the wait
        // loop with the same attempt id, which the server recognises if the
        // lost try went through. A name this client still listens on (it
        // waited for it a moment ago) is likely contended: the wait loop's
        // first attempt, which queues when busy, is the only one.
        if wait.is_some_and(|w| w.is_zero()) || !self.inner.waiters.is_listening(&channel) {
            let first = self.attempt(req, self.queueing(None, req.fair)).await.map(|(t, _)| t);
            let expired = deadline.is_some_and(|d| tokio::time::Instant::now() >= d);
            match first {
                Ok(TryAcquire::Acquired(lease)) => return Ok(Some(lease)),
                Ok(TryAcquire::Busy { .. }) if expired => return Ok(None),
                Err(e) if expired || !e.is_retryable() => return Err(e),
                Ok(TryAcquire::Busy { .. }) | Err(_) => {}
            }
        }
        wait_loop(&self.inner.waiters, &channel, req.kind, deadline, |turn| async move {
            Ok(match self.attempt(req, self.queueing(Some(turn), req.fair)).await? {
                (TryAcquire::Acquired(lease), _) => Attempt::Done(lease),
                (TryAcquire::Busy { retry_in }, turn_of) => Attempt::Busy {
                    retry_in: retry_in.unwrap_or(UNKNOWN_LEASE_RECHECK),
                    turn_of,
                },
            })
        })
        .await
    }

    /// One acquisition on the server, with what the restart guard and
    /// `wait_replicas` make of its answer: a refusal of the guard, a grant
    /// made just after the server's clock stepped forward, or a grant too
    /// few replicas acknowledged is an error (the grant taken back, by this
    /// attempt's id).
    async fn claim(&self, claim: &Claim<'_>) -> Result<AcquireReply, Fault> {
        let inner = &self.inner;
        let answer = scripts::acquire(&mut inner.conn.clone(), &inner.keys, claim, inner.replicas).await?;
        let stepped = inner.clock_stepped(answer.clock, claim.ttl_ms).await;
        let fault = match answer.reply {
            AcquireReply::Guarded { left_ms } => {
                return Err(match stepped {
                    Some(f) => f,
                    None => inner.quarantined(left_ms, claim.ttl_ms).await,
                });
            }
            AcquireReply::Acquired { .. } => match stepped.or_else(|| short_of(answer.acked, inner.replicas)) {
                Some(f) => f,
                None => return Ok(answer.reply),
            },
            _ => return Ok(answer.reply),
        };
        let AcquireReply::Acquired { token, .. } = answer.reply else {
            return Err(fault);
        };
        let hold = Hold {
            name: claim.name.to_owned(),
            owner: claim.owner.to_owned(),
            token,
            kind: claim.kind,
        };
        match self.release(&hold, claim.attempt).await {
            Ok(_) => tracing::debug!(lock = %claim.name, error = %fault, "took back a grant"),
            Err(e) => {
                tracing::warn!(lock = %claim.name, error = %e, "taking back a grant failed; it expires with its ttl")
            }
        }
        Err(fault)
    }

    pub(crate) fn queueing(&self, turn: Option<Turn>, fair: bool) -> Queueing {
        let waiter = self.inner.waiters.waiter_id();
        Queueing::new(waiter, turn, fair, self.inner.publish, false)
    }

    /// One acquisition attempt, detached: if the caller is gone when the
    /// answer comes, a hold it got is released at once. With the outcome,
    /// the waiting client whose turn it is when the name is free but queued
    /// for another client (fair only).
    pub(crate) async fn attempt(
        &self,
        req: &AcquireRequest<'_>,
        queueing: Queueing,
    ) -> Result<(TryAcquire, Option<TurnOf>), LockError> {
        let ttl_ms = ttl_millis(req.ttl);
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let kind = req.kind;
        let backend = self.clone();
        let releaser = (self.clone(), attempt.clone());
        let work = async move {
            let sent_at = Instant::now();
            let claim = Claim {
                name: &name,
                owner: &owner,
                ttl_ms,
                attempt: &attempt,
                proposal: None,
                queueing: &queueing,
                kind,
                slot: scripts::Slot::Any,
                nonce: &scripts::nonce(),
                guarded: backend.inner.config.guard_floor().is_some(),
            };
            (sent_at, backend.claim(&claim).await)
        };
        let token_of = |(_, reply): &(Instant, Result<AcquireReply, _>)| match reply {
            Ok(AcquireReply::Acquired { token, .. }) => Some(*token),
            _ => None,
        };
        let release = move |hold: Hold| async move {
            let (backend, attempt) = releaser;
            backend.release(&hold, &attempt).await
        };
        let (sent_at, reply) = detach_acquisition(self.inner.kind, req, work, token_of, release).await?;
        Ok(match reply.map_err(|f| self.error("acquire", req.name, f))? {
            AcquireReply::Acquired {
                token,
                count,
                pttl,
                told,
                ..
            } => {
                if let Some(message) = told {
                    let channel = self.inner.keys.holds(req.name, req.kind);
                    self.inner.waiters.deliver_locally(&channel, &message);
                }
                (
                    TryAcquire::Acquired(Lease::ttl(token, count, sent_at, millis(pttl))),
                    None,
                )
            }
            AcquireReply::Conflict { reason } => {
                return Err(LockError::Conflict {
                    backend: self.inner.kind,
                    name: req.name.to_owned(),
                    reason,
                });
            }
            // Only asked for a slot (Redlock), which this claim is not; a
            // refusal by the restart guard is an error by now.
            AcquireReply::OtherSlot { .. } | AcquireReply::Guarded { .. } => {
                (TryAcquire::Busy { retry_in: None }, None)
            }
            AcquireReply::Busy { pttl, turn_of, .. } => (
                TryAcquire::Busy {
                    retry_in: (pttl >= 0).then(|| millis(pttl)),
                },
                turn_of,
            ),
        })
    }
}
