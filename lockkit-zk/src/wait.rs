//! Waiting for a lock: the acquisition's wait in one session
//! (`wait_in_session`: queue, plan, watch the predecessor), bounded by the
//! call's deadline, and leaving the queue when the wait runs out.

use std::future::Future;
use std::sync::Arc;

use lockkit_core::raw::{Lease, detach};
use lockkit_core::{LockError, LockKind};
use tokio::time::Instant;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::backend::Inner;
use crate::claim::claim;
use crate::conn::counters::Counters;
use crate::conn::session::Session;
use crate::dead::{CHECK_EVERY, Suspects};
use crate::error::{BACKEND, is_session_end, zk};
use crate::join::Joined;
use crate::layout::{Mark, owner_tag, parent_path};
use crate::leftover::{Cleanup, Leftover};
use crate::queue::{Plan, Queued, enqueue, plan, refresh};
use crate::result::ZkResult;
use crate::step::step;
use crate::want::Want;

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
            Some(r) => $crate::step::step!($session, $name, $crate::wait::Waited::Restart, r, $cleanup),
            None => return Ok($crate::wait::give_up($cleanup).await),
        }
    };
}
pub(crate) use bounded_step;

/// The wait on a watch of a wait in one session (the mutex's and the
/// kinds'): `$armed` arms the watch, bounded by the call's deadline, and
/// gives its event (`None`: nothing to wait for); then the event, the
/// deadline or the session's end, whichever comes first (see
/// [`Inner::woken`]). Falls through when the caller should read the queue
/// again: the watch fired, or the node was gone already, or the answer was
/// lost. Returns otherwise: a deadline that passed gives up (the
/// acquisition's clean-up runs), a session that ended means start over
/// (`Waited::Restart`), another error takes the clean-up's node back and
/// is returned.
macro_rules! watch_step {
    ($inner:expr, $deadline:expr, $session:expr, $name:expr, $cleanup:ident, $suspects:expr, $armed:expr) => {
        $crate::conn::counters::Counters::bump(&$inner.counters.watches);
        match $crate::wait::until($deadline, $armed).await {
            None => return Ok($crate::wait::give_up($cleanup).await),
            Some(Ok(None)) => {}
            Some(Ok(Some(event))) => match $inner.woken($session, $name, event, $deadline, $suspects).await {
                $crate::wait::Woken::Changed => {}
                $crate::wait::Woken::TimedOut => return Ok($crate::wait::give_up($cleanup).await),
                $crate::wait::Woken::Ended => {
                    $cleanup.disarm();
                    return Ok($crate::wait::Waited::Restart);
                }
            },
            // Gone already, or the answer was lost: look again.
            Some(Err(e)) if e == ::zookeeper_client::Error::NoNode || $crate::error::is_connection_loss(&e) => {}
            Some(Err(e)) => {
                $crate::step::step!(
                    $session,
                    $name,
                    $crate::wait::Waited::Restart,
                    Err::<(), _>(e),
                    $cleanup
                )
            }
        }
    };
}
pub(crate) use watch_step;

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
    /// Every [`CHECK_EVERY`] meanwhile, `suspects` are looked at: a dead
    /// waiter's node among them is taken out (its watch then fires).
    pub(crate) async fn woken(
        &self,
        session: &Session,
        name: &str,
        event: impl Future<Output = WatchedEvent>,
        deadline: Option<Instant>,
        suspects: &mut Suspects,
    ) -> Woken {
        let mut event = std::pin::pin!(event);
        let mut ticks = tokio::time::interval_at(Instant::now() + CHECK_EVERY, CHECK_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                event = &mut event => {
                    Counters::bump(&self.counters.wakeups);
                    tracing::trace!(backend = BACKEND, lock = %name, ?event, "woken by the node waited for");
                    if event.event_type == EventType::Session && event.session_state.is_terminated() {
                        session.end(event.session_state);
                        return Woken::Ended;
                    }
                    return Woken::Changed;
                }
                _ = ticks.tick() => suspects.check(&self.liveness, &self.counters).await,
                _ = sleep_until(deadline) => return Woken::TimedOut,
                _ = session.ended() => return Woken::Ended,
            }
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
        let want = Want {
            name,
            owner,
            attempt,
            kind: LockKind::Mutex,
        };
        let mut q = match enqueue_bounded(session, want, &parent, deadline).await? {
            Ok(q) => q,
            Err(waited) => return Ok(waited),
        };
        let mut cleanup = Cleanup::new(session, &q, owner, attempt);
        let mut foreign = Vec::new();
        let mut suspects = Suspects::new(session, &q.parent);
        // While it waits, its session keeps its liveness record fresh (from
        // its first wait on: a node that holds from its create on is never
        // taken for a waiter's, and a refresh per acquisition is one more
        // write on the server).
        let mut live = None;
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
                    let lease = bounded!(self.holder_lease(session, name, owner, &q));
                    cleanup.disarm();
                    // None: deleted as a dead waiter's: queue again.
                    return Ok(lease.map_or(Waited::Restart, Waited::Acquired));
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
                    live.get_or_insert_with(|| session.live());
                    // Every contender but the first waits (the first may
                    // hold through share nodes: not counted as waiting).
                    suspects.saw_waiting(q.queue.get(1).map(|c| c.seq));
                    let ahead = q.queue.iter().find(|c| c.name == node);
                    suspects.waiting_for(ahead.map(|c| (c.name.clone(), c.seq, None)));
                    let path = format!("{}/{node}", q.parent);
                    // Its going only: not its claim (see `crate::claim`).
                    let watching = session.client.get_and_watch_children(&path);
                    let armed = async {
                        let (_, _, watcher) = watching.await?;
                        ZkResult::Ok(Some(watcher.changed()))
                    };
                    watch_step!(self, deadline, session, name, cleanup, &mut suspects, armed);
                    bounded!(refresh(session, &mut q));
                }
            }
        }
    }

    /// The lease on `q`'s node, which holds now; a node that came to hold
    /// after it was listed behind others is claimed first (see
    /// [`crate::claim`]). `None`: it was deleted as a dead waiter's.
    pub(crate) async fn holder_lease(
        self: &Arc<Self>,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        q: &Queued,
    ) -> ZkResult<Option<Lease>> {
        let node = claim(&session.client, &q.path, &q.node, q.at_creation).await?;
        Ok(node.map(|node| {
            let count = node.data.count();
            self.lease(session, name, owner, &q.path, node, count, &q.epoch)
        }))
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

/// Queues `want` in `session` under `parent` for a wait (see
/// [`enqueue_detached`]), bounded by `deadline`: the queued contender, or
/// how the wait ended (`Err`) — it ran out while the node was being made
/// (see [`queued_too_late`]), or the session ended (start over, see
/// [`enqueue_failed`]). The mutex's wait and the kinds' queue alike.
pub(crate) async fn enqueue_bounded(
    session: &Arc<Session>,
    want: Want<'_>,
    parent: &str,
    deadline: Option<Instant>,
) -> Result<Result<Queued, Waited>, LockError> {
    let (name, owner, attempt) = (want.name, want.owner, want.attempt);
    let queued = enqueue_detached(session, parent, owner, owner_tag(owner), attempt, Mark::of(want.kind));
    let mut queued = std::pin::pin!(queued);
    let Some(queued) = until(deadline, queued.as_mut()).await else {
        // The wait ran out while the node was being made: it may stand
        // (or come) all the same. It is taken back before the call
        // returns, as after a wait (see `give_up`).
        return Ok(Err(queued_too_late(session, parent, owner, attempt, queued).await));
    };
    match queued? {
        Ok(q) => Ok(Ok(q)),
        Err(e) => {
            enqueue_failed(session, name, parent, owner, attempt, e).await?;
            Ok(Err(Waited::Restart))
        }
    }
}

/// Queues in `session` (see [`enqueue`]), run to its end even if the wait
/// stops waiting for it: the node it makes then is taken back.
fn enqueue_detached(
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
async fn queued_too_late<F>(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str, queued: F) -> Waited
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
