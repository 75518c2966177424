//! Waiting for a lock: the acquisition's wait in one session
//! (`wait_in_session`: queue, plan, watch the predecessor), bounded by the
//! call's deadline, and leaving the queue when the wait runs out.

use std::future::Future;
use std::sync::Arc;

use lockkit_core::backend::Lease;
use lockkit_core::{LockError, detach};
use tokio::time::Instant;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::acquire::step;
use crate::backend::Inner;
use crate::conn::{Counters, Session};
use crate::error::{BACKEND, is_connection_loss, is_session_end, zk};
use crate::join::Joined;
use crate::layout::{Mark, owner_tag, parent_path};
use crate::leftover::{Cleanup, Leftover};
use crate::queue::{Plan, Queued, ZkResult, enqueue, plan, refresh};

/// How a wait in one session ended.
pub(crate) enum Waited {
    Acquired(Lease),
    TimedOut,
    /// The session ended (or the node vanished): start over in a new one.
    Restart,
}

/// A network step of a wait in one session, bounded by the call's
/// deadline: a session that ended means start over (`Waited::Restart`), a
/// deadline that passed gives up (the acquisition's clean-up runs), an
/// error takes the clean-up's node back and is returned.
macro_rules! bounded_step {
    ($deadline:expr, $session:expr, $name:expr, $cleanup:ident, $e:expr) => {
        match $crate::wait::until($deadline, $e).await {
            Some(r) => $crate::acquire::step!($session, $name, $crate::wait::Waited::Restart, r, $cleanup),
            None => return Ok($crate::wait::give_up($cleanup).await),
        }
    };
}
pub(crate) use bounded_step;

/// How a wait on a watch ended (see [`Inner::woken`]).
pub(crate) enum Woken {
    /// The watch fired: look again.
    Changed,
    /// The deadline passed first.
    TimedOut,
    /// The session ended: start over in a new one.
    Ended,
}

impl Inner {
    /// Waits for `event` (a watch's), the deadline or the session's end,
    /// whichever comes first.
    pub(crate) async fn woken(
        &self,
        session: &Session,
        name: &str,
        event: impl Future<Output = WatchedEvent>,
        deadline: Option<Instant>,
    ) -> Woken {
        tokio::select! {
            event = event => {
                Counters::bump(&self.counters.wakeups);
                tracing::trace!(backend = BACKEND, lock = %name, ?event, "woken by the node waited for");
                if event.event_type == EventType::Session && event.session_state.is_terminated() {
                    session.end(event.session_state);
                    return Woken::Ended;
                }
                Woken::Changed
            }
            _ = sleep_until(deadline) => Woken::TimedOut,
            _ = session.ended() => Woken::Ended,
        }
    }

    /// Queues in `session` and waits there for the lock, up to `deadline`.
    /// Every network step is bounded by the deadline too, so a suspended
    /// connection (whose requests wait for the reconnection) cannot stretch
    /// the wait.
    pub(crate) async fn wait_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        attempt: &str,
        deadline: Option<Instant>,
    ) -> Result<Waited, LockError> {
        let tag = owner_tag(owner);
        let parent = parent_path(name);
        let queued = enqueue_detached(session, &parent, owner, tag, attempt, Mark::Mutex);
        let mut queued = std::pin::pin!(queued);
        let Some(queued) = until(deadline, queued.as_mut()).await else {
            // The wait ran out while the node was being made: it may stand
            // (or come) all the same. It is taken back before the call
            // returns, as after a wait (see `give_up`).
            return Ok(queued_too_late(session, &parent, owner, attempt, queued).await);
        };
        let mut q = match queued? {
            Ok(q) => q,
            Err(e) => {
                enqueue_failed(session, name, &parent, owner, attempt, e).await?;
                return Ok(Waited::Restart);
            }
        };
        let mut cleanup = Cleanup::new(session, &q, owner, attempt);
        let mut foreign = Vec::new();
        // A network step, bounded by the deadline; a session that ended means
        // start over.
        macro_rules! bounded {
            ($e:expr) => {
                bounded_step!(deadline, session, name, cleanup, $e)
            };
        }
        loop {
            match plan(&q, tag, &foreign) {
                Plan::Gone => {
                    cleanup.disarm();
                    return Ok(Waited::Restart);
                }
                Plan::Holder if q.epoch.is_cancelled() => bounded!(refresh(session, &mut q)),
                Plan::Holder => {
                    cleanup.disarm();
                    let count = q.node.data.count();
                    let lease = self.lease(session, name, owner, &q.path, q.node.clone(), count, &q.epoch);
                    return Ok(Waited::Acquired(lease));
                }
                Plan::Join => {
                    let joined = self.join_detached(session, name, owner, attempt, &parent);
                    let Some(joined) = until(deadline, joined).await else {
                        return Ok(give_up(cleanup).await);
                    };
                    let joined = joined?.inspect_err(|_| cleanup.join_failed());
                    match step!(session, name, Waited::Restart, joined, cleanup) {
                        Joined::Lease(lease, path) => {
                            if path == q.path {
                                cleanup.disarm();
                            } else {
                                cleanup.run().await;
                            }
                            return Ok(Waited::Acquired(lease));
                        }
                        Joined::Foreign(nodes) => {
                            foreign.extend(nodes);
                            bounded!(refresh(session, &mut q));
                        }
                        Joined::Again => bounded!(refresh(session, &mut q)),
                    }
                }
                Plan::Wait(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(give_up(cleanup).await);
                }
                Plan::Wait(node) => {
                    Counters::bump(&self.counters.watches);
                    let path = format!("{}/{node}", q.parent);
                    let armed = until(deadline, session.client.get_and_watch_data(&path)).await;
                    match armed {
                        None => return Ok(give_up(cleanup).await),
                        Some(Ok((_, _, watcher))) => match self.woken(session, name, watcher.changed(), deadline).await
                        {
                            Woken::Changed => {}
                            Woken::TimedOut => return Ok(give_up(cleanup).await),
                            Woken::Ended => {
                                cleanup.disarm();
                                return Ok(Waited::Restart);
                            }
                        },
                        // Gone already, or the answer was lost: look again.
                        Some(Err(e)) if e == ZkError::NoNode || is_connection_loss(&e) => {}
                        Some(Err(e)) => step!(session, name, Waited::Restart, Err::<(), _>(e), cleanup),
                    }
                    bounded!(refresh(session, &mut q));
                }
            }
        }
    }

    /// Joins the hold (see [`Inner::join`]), run to its end even if the
    /// wait stops waiting for it: a lease it gets then is released, a share
    /// it may have made is taken back.
    fn join_detached(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        attempt: &str,
        parent: &str,
    ) -> impl Future<Output = Result<ZkResult<Joined>, LockError>> + use<> {
        let (inner, s, n, o, a, p) = (
            self.clone(),
            session.clone(),
            name.to_owned(),
            owner.to_owned(),
            attempt.to_owned(),
            parent.to_owned(),
        );
        let orphan = (
            self.clone(),
            session.clone(),
            name.to_owned(),
            owner.to_owned(),
            attempt.to_owned(),
        );
        detach(
            BACKEND,
            async move { inner.join(&s, &n, &o, &a, &p).await },
            move |r| async move {
                let (inner, session, name, owner, attempt) = orphan;
                match r {
                    Ok(Joined::Lease(lease, _)) => {
                        inner.release_orphan(name, owner, lease.token, attempt).await;
                    }
                    Ok(_) => {}
                    // The share may have been made all the same (also when
                    // the session ended: the server may keep it a while, so
                    // the next session takes the share back).
                    Err(_) => {
                        Leftover::unknown_share(&session, &parent_path(&name), &owner, &attempt)
                            .take_back_retrying()
                            .await
                    }
                }
            },
        )
    }
}

/// Queues in `session` (see [`enqueue`]), run to its end even if the wait
/// stops waiting for it: the node it makes then is taken back.
pub(crate) fn enqueue_detached(
    session: &Arc<Session>,
    parent: &str,
    owner: &str,
    tag: u64,
    attempt: &str,
    mark: Mark,
) -> impl Future<Output = Result<ZkResult<Queued>, LockError>> + use<> {
    let (s, p, o, a) = (session.clone(), parent.to_owned(), owner.to_owned(), attempt.to_owned());
    let orphan = (session.clone(), parent.to_owned(), owner.to_owned(), attempt.to_owned());
    detach(
        BACKEND,
        async move { enqueue(&s, &p, &o, tag, &a, mark).await },
        move |r| async move {
            let (session, parent, owner, attempt) = orphan;
            match r {
                Ok(q) => {
                    Leftover::queued(&session, &q, &owner, &attempt)
                        .take_back_retrying()
                        .await
                }
                // The server may have made the node all the same (also when
                // the session ended: the server may keep it, and the node,
                // a while — the next session takes it back).
                Err(_) => {
                    Leftover::unknown_node(&session, &parent, &owner, &attempt)
                        .take_back_retrying()
                        .await
                }
            }
        },
    )
}

/// After queueing for `name` (under `parent`) failed with `e`: Ok when the session ended
/// (the acquisition starts over in a new one, which takes the attempt's
/// earlier node back), else the error, once the node the server may have
/// made all the same is taken back.
pub(crate) async fn enqueue_failed(
    session: &Arc<Session>,
    name: &str,
    parent: &str,
    owner: &str,
    attempt: &str,
    e: ZkError,
) -> Result<(), LockError> {
    if is_session_end(&e) {
        session.end(&e);
        return Ok(());
    }
    Leftover::unknown_node(session, parent, owner, attempt)
        .take_back_now()
        .await;
    Err(zk("acquire", Some(name), e))
}

/// `fut`'s output, unless `deadline` passes first.
pub(crate) async fn until<F: Future>(deadline: Option<Instant>, fut: F) -> Option<F::Output> {
    match deadline {
        Some(d) => tokio::time::timeout_at(d, fut).await.ok(),
        None => Some(fut.await),
    }
}

/// Leaves the queue after the wait ran out while the node was being made:
/// waits for the create's answer, for up to a session timeout, then takes
/// the node back as [`give_up`] does. A create still unanswered by then
/// goes on in the background, and its detached clean-up takes the node
/// back. Before, the call returned at once and left that clean-up to a
/// slow connection: the node came after the call returned and stood first
/// in the queue as a hold the owner's other processes joined.
pub(crate) async fn queued_too_late<F>(
    session: &Arc<Session>,
    parent: &str,
    owner: &str,
    attempt: &str,
    queued: F,
) -> Waited
where
    F: Future<Output = Result<ZkResult<Queued>, LockError>>,
{
    match tokio::time::timeout(session.client.session_timeout(), queued).await {
        Ok(Ok(Ok(q))) => Cleanup::new(session, &q, owner, attempt).run().await,
        // Also when the session ended: the node may stand all the same
        // (the next session takes it back).
        Ok(Ok(Err(_))) => {
            Leftover::unknown_node(session, parent, owner, attempt)
                .take_back_now()
                .await
        }
        Ok(Err(_)) | Err(_) => {}
    }
    Waited::TimedOut
}

/// Leaves the queue after the wait ran out: at once while connected (so no
/// node is left when `lock` returns; a connection that stopped answering
/// gets a quarter second, then the rest goes on in the background), in the
/// background while the connection is suspended (its requests would wait
/// for the reconnection), and in the backend's next session if this one
/// ended: at once if one can be had within a quarter second (see
/// `Leftover::in_next_session`), else when the next one is made.
pub(crate) async fn give_up(cleanup: Cleanup) -> Waited {
    cleanup.run().await;
    Waited::TimedOut
}

pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
