//! Acquiring: `try_acquire` (one try per session), `acquire` (the wait in
//! sessions, see [`crate::wait`]), and re-entry through the held-node
//! cache. The lease handed out is in [`crate::lease`].

use std::sync::Arc;

use lockkit_core::raw::{AcquireRequest, Hold, Lease, TryAcquire, detach_acquisition, is_attempt_id};
use lockkit_core::{LockError, LockKind};
use tokio::time::Instant;
use zookeeper_client::Error as ZkError;

use crate::backend::Inner;
use crate::change::{Change, Edit, change};
use crate::cleanup::Cleanup;
use crate::conn::session::{SESSION_RESTARTS, Session};
use crate::enqueue::{Contender, enqueue, enqueue_failed};
use crate::error::{BACKEND, is_session_end, session_kept_ending, zk};
use crate::hold::{HoldOf, count_after};
use crate::join::Joined;
use crate::layout::{Mark, node_name, owner_tag, parent_path};
use crate::lease::LeaseOf;
use crate::leftover::Leftover;
use crate::orphan::Orphan;
use crate::queue::{Plan, Queued, plan, refresh};
use crate::step::{Exit, Steps, Waited, until};
use crate::want::Want;

/// An acquisition carried on from a session that ended, until it queues
/// in a new one: if it ends first (its wait runs out or fails while a new
/// session is made, or the caller drops it), whatever it left in the ended
/// session — which the server may keep a while — goes to the backend's next
/// session to take back (see `Leftover::orphaned`).
pub(crate) struct CarriedOn(Option<(Arc<Session>, Orphan)>);

impl CarriedOn {
    /// The call ends (an error, or its wait ran out) before it queued again:
    /// whatever it left in the ended session is taken back in the next one
    /// before it returns (see `Leftover::in_next_session`).
    pub(crate) async fn hand_over(&mut self) {
        if let Some((ended, orphan)) = self.0.take() {
            Leftover::orphaned(&ended, orphan).in_next_session().await;
        }
    }
}

impl Drop for CarriedOn {
    fn drop(&mut self) {
        if let Some((session, orphan)) = self.0.take() {
            session.orphan(orphan);
        }
    }
}

/// Refuses an attempt id that lockkit-core did not make: it is part of node
/// names and data.
pub(crate) fn check_attempt(attempt: &str) -> Result<(), LockError> {
    if is_attempt_id(attempt) {
        Ok(())
    } else {
        Err(LockError::config(
            "attempt",
            format!("{attempt:?} is not an attempt id (16 lowercase hex digits, lockkit_core::raw::new_attempt_id)"),
        ))
    }
}

impl Inner {
    /// Re-entry of a hold this backend already has a node of for `owner`:
    /// one versioned write (with a listing pipelined behind it).
    pub(crate) async fn reenter_cached(
        &self,
        name: &str,
        owner: &str,
        attempt: &str,
    ) -> Result<Option<Lease>, LockError> {
        let Some(h) = self.held().nodes.get(name).filter(|h| h.owner == owner).cloned() else {
            return Ok(None);
        };
        let Some(session) = self.sessions.peek().filter(|s| s.id == h.session) else {
            self.forget(name, &h.path);
            return Ok(None);
        };
        let epoch = session.epoch();
        let parent = parent_path(name);
        let client = &session.client;
        let reentered = async {
            // Alone, the node's own count is the hold's unless somebody
            // wrote it meanwhile: no listing needed.
            let edit = Edit {
                path: &h.path,
                owner,
                token: Some(h.token),
                known: Some(h.known.clone()),
                change: Change::Add(attempt),
                list_after: (!h.alone).then_some(parent.as_str()),
            };
            let (changed, listing) = change(client, edit).await?;
            let Some(changed) = changed else {
                return Ok(None);
            };
            let raced = changed.raced;
            let Some(node) = changed.known() else {
                return Ok(None);
            };
            let count = if h.alone && !raced {
                node.data.count()
            } else {
                let hold = HoldOf {
                    parent: &parent,
                    owner,
                    token: h.token,
                };
                count_after(client, hold, node_name(&h.path), Some(&node.data), listing)
                    .await?
                    .count
            };
            Ok(Some((node, count)))
        };
        match reentered.await {
            Ok(Some((node, count))) => {
                let of = LeaseOf {
                    name,
                    owner,
                    path: &h.path,
                    node,
                    count,
                };
                Ok(Some(self.lease(&session, of, &epoch)))
            }
            Ok(None) => {
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) if is_session_end(&e) => {
                session.end(&e);
                self.forget(name, &h.path);
                Ok(None)
            }
            Err(e) => {
                // The share may have been added all the same.
                Leftover::unknown_share(&session, &parent, owner, attempt)
                    .take_back_now()
                    .await;
                Err(zk("acquire", Some(name), e))
            }
        }
    }

    /// [`Inner::try_acquire`], run to its end even if the caller stops
    /// waiting for it: a lock it takes then is released.
    pub(crate) async fn try_acquire_detached(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
    ) -> Result<TryAcquire, LockError> {
        let (inner, name, owner, attempt, kind) = (
            self.clone(),
            req.name.to_owned(),
            req.owner.to_owned(),
            req.attempt.to_owned(),
            req.kind,
        );
        let releaser = (self.clone(), attempt.clone());
        let release = move |hold: Hold| async move {
            let (inner, attempt) = releaser;
            inner.release(&hold, &attempt).await
        };
        detach_acquisition(
            BACKEND,
            req,
            async move {
                let want = Want {
                    name: &name,
                    owner: &owner,
                    attempt: &attempt,
                    kind,
                };
                inner.try_acquire(want).await
            },
            |r: &Result<TryAcquire, LockError>| r.as_ref().ok().and_then(TryAcquire::token),
            release,
        )
        .await?
    }

    pub(crate) async fn try_acquire(self: &Arc<Self>, want: Want<'_>) -> Result<TryAcquire, LockError> {
        let (name, owner, attempt) = (want.name, want.owner, want.attempt);
        let mutex = want.kind == LockKind::Mutex;
        check_attempt(attempt)?;
        // While suspended, requests wait for the reconnection: a try that
        // must not wait says so instead.
        if self.sessions.peek().is_some_and(|s| s.epoch().is_cancelled()) {
            return Err(zk("acquire", Some(name), ZkError::ConnectionLoss));
        }
        if mutex && let Some(lease) = self.reenter_cached(name, owner, attempt).await? {
            return Ok(TryAcquire::Acquired(lease));
        }
        let mut carried = CarriedOn(None);
        for _ in 0..SESSION_RESTARTS {
            let session = match self.sessions.get().await {
                Ok(session) => session,
                Err(e) => {
                    carried.hand_over().await;
                    return Err(e);
                }
            };
            carried.0 = None;
            let outcome = match mutex {
                true => self.try_in_session(&session, want).await?,
                false => match self.kind_in_session(&session, want, None, true).await? {
                    Waited::Acquired(lease) => Some(TryAcquire::Acquired(lease)),
                    Waited::TimedOut => Some(TryAcquire::Busy { retry_in: None }),
                    Waited::Restart => None,
                },
            };
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
            carried.0 = Some((session, Orphan::new(&parent_path(name), owner, attempt)));
        }
        carried.hand_over().await;
        Err(session_kept_ending("acquire", name))
    }

    /// One try in one session; `None`: the session ended, start over.
    pub(crate) async fn try_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        want: Want<'_>,
    ) -> Result<Option<TryAcquire>, LockError> {
        let Want {
            name, owner, attempt, ..
        } = want;
        let parent = parent_path(name);
        let contender = Contender {
            parent: &parent,
            owner,
            attempt,
            mark: Mark::Mutex,
        };
        let q = match enqueue(session, contender).await {
            Ok(q) => q,
            Err(e) => return enqueue_failed(session, name, contender, e).await.tried(),
        };
        // A try never waits: its steps have no deadline.
        let mut steps = Steps {
            session,
            name,
            deadline: None,
            cleanup: Cleanup::new(session, &q, owner, attempt),
        };
        match self.try_steps(&mut steps, want, q).await {
            Ok(lease) => Ok(Some(TryAcquire::Acquired(lease))),
            Err(exit) => exit.tried(),
        }
    }

    /// The steps of a try from its queued node `q` on: the lease, or how
    /// the try stops ([`Exit::GaveUp`]: it would wait, the lock is busy).
    async fn try_steps(self: &Arc<Self>, steps: &mut Steps<'_>, want: Want<'_>, mut q: Queued) -> Result<Lease, Exit> {
        let Want {
            name, owner, attempt, ..
        } = want;
        let session = steps.session;
        let tag = owner_tag(owner);
        let mut foreign = Vec::new();
        loop {
            match plan(&q, tag, &foreign) {
                Plan::Gone => return Err(steps.restart()),
                Plan::Holder if q.epoch.is_cancelled() => steps.bounded(refresh(session, &mut q)).await?,
                Plan::Holder => {
                    let lease = steps.bounded(self.holder_lease(session, name, owner, &q)).await?;
                    steps.cleanup.disarm();
                    // None: deleted as a dead waiter's (the try is over).
                    return lease.ok_or(Exit::Restart);
                }
                Plan::Join => {
                    let joined = self.join(session, name, owner, attempt, &q.parent).await;
                    let joined = joined.inspect_err(|_| steps.cleanup.join_failed());
                    match steps.checked(joined).await? {
                        Joined::Lease(lease, path) => {
                            if path == q.path {
                                steps.cleanup.disarm();
                            } else {
                                steps.cleanup.run().await;
                            }
                            return Ok(lease);
                        }
                        Joined::Foreign(nodes) => {
                            foreign.extend(nodes);
                            steps.bounded(refresh(session, &mut q)).await?;
                        }
                        Joined::Again => steps.bounded(refresh(session, &mut q)).await?,
                    }
                }
                Plan::Wait(_) => return Err(steps.give_up().await),
            }
        }
    }

    pub(crate) async fn acquire(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        deadline: Option<Instant>,
    ) -> Result<Option<Lease>, LockError> {
        let (name, owner, attempt) = (req.name, req.owner, req.attempt);
        let want = Want {
            name,
            owner,
            attempt,
            kind: req.kind,
        };
        check_attempt(attempt)?;
        if req.kind == LockKind::Mutex && self.holds(name, owner) {
            let (inner, n, o, a) = (self.clone(), name.to_owned(), owner.to_owned(), attempt.to_owned());
            let releaser = (self.clone(), attempt.to_owned());
            let release = move |hold: Hold| async move {
                let (inner, attempt) = releaser;
                inner.release(&hold, &attempt).await
            };
            let cached = detach_acquisition(
                BACKEND,
                req,
                async move { inner.reenter_cached(&n, &o, &a).await },
                |r: &Result<Option<Lease>, LockError>| r.as_ref().ok().and_then(|l| l.as_ref()).map(|l| l.token),
                release,
            );
            let Some(cached) = until(deadline, cached).await else {
                return Ok(None);
            };
            if let Some(lease) = cached?? {
                return Ok(Some(lease));
            }
        }
        let mut restarts = 0;
        let mut carried = CarriedOn(None);
        loop {
            let session = match until(deadline, self.sessions.get()).await {
                Some(Ok(session)) => session,
                Some(Err(e)) => {
                    carried.hand_over().await;
                    return Err(e);
                }
                None => {
                    carried.hand_over().await;
                    return Ok(None);
                }
            };
            // Queued again: the new session's clean-up covers the attempt's
            // earlier nodes (see `Leftover::queued`).
            carried.0 = None;
            let waited = match req.kind {
                LockKind::Mutex => self.wait_in_session(&session, want, deadline).await?,
                _ => self.kind_in_session(&session, want, deadline, false).await?,
            };
            match waited {
                Waited::Acquired(lease) => return Ok(Some(lease)),
                Waited::TimedOut => return Ok(None),
                Waited::Restart => {
                    restarts += 1;
                    carried.0 = Some((session, Orphan::new(&parent_path(name), owner, attempt)));
                    tracing::debug!(backend = BACKEND, lock = %name, restarts, "queueing again in a new session");
                }
            }
        }
    }
}
