//! Waiting for a lock: the mutex's wait in one session
//! (`wait_in_session`: queue, plan, watch the predecessor), bounded by the
//! call's deadline, and the wait on a watch that the kinds' waits share
//! (`wait_on_watch`). Queueing for a wait is in [`crate::enqueue`], the
//! steps' outcomes in [`crate::step`].

use std::future::Future;
use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::{Lease, detach};
use tokio::time::Instant;
use zookeeper_client::{Error as ZkError, EventType, WatchedEvent};

use crate::backend::Inner;
use crate::claim::claim;
use crate::cleanup::Cleanup;
use crate::conn::counters::Counters;
use crate::conn::liveness::LiveGuard;
use crate::conn::session::Session;
use crate::dead::{CHECK_EVERY, Suspects};
use crate::enqueue::enqueue_bounded;
use crate::error::{BACKEND, is_connection_loss};
use crate::join::Joined;
use crate::layout::{admits, owner_tag, parent_path};
use crate::lease::LeaseOf;
use crate::leftover::Leftover;
use crate::queue::{Plan, Queued, plan, refresh};
use crate::result::ZkResult;
use crate::step::{Exit, Steps, Waited, until};
use crate::want::Want;

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

    /// The wait on a watch of a wait in one session (the mutex's and the
    /// kinds'): `armed` arms the watch and gives its event (`None`: nothing
    /// to wait for), bounded by the deadline of `steps`; then the event,
    /// the deadline or the session's end, whichever comes first (see
    /// [`Inner::woken`]). Ok when the caller should read the queue again:
    /// the watch fired, or the node was gone already, or the answer was
    /// lost. Otherwise how the wait stops: a deadline that passed gives up
    /// (the acquisition's clean-up runs), a session that ended means start
    /// over, another error takes the clean-up's node back and is returned
    /// (see [`Steps`]).
    pub(crate) async fn wait_on_watch<E>(
        &self,
        steps: &mut Steps<'_>,
        suspects: &mut Suspects,
        armed: impl Future<Output = ZkResult<Option<E>>>,
    ) -> Result<(), Exit>
    where
        E: Future<Output = WatchedEvent>,
    {
        Counters::bump(&self.counters.watches);
        match until(steps.deadline, armed).await {
            None => Err(steps.give_up().await),
            Some(Ok(None)) => Ok(()),
            Some(Ok(Some(event))) => match self
                .woken(steps.session, steps.name, event, steps.deadline, suspects)
                .await
            {
                Woken::Changed => Ok(()),
                Woken::TimedOut => Err(steps.give_up().await),
                // Ended by `woken`: the clean-up is only disarmed.
                Woken::Ended => Err(steps.restart()),
            },
            // Gone already, or the answer was lost: look again.
            Some(Err(e)) if e == ZkError::NoNode || is_connection_loss(&e) => Ok(()),
            Some(Err(e)) => steps.checked(Err(e)).await,
        }
    }

    /// Queues `want` (a mutex's) in `session` and waits there for the
    /// lock, up to `deadline`. Every network step is bounded by the
    /// deadline too, so a suspended connection (whose requests wait for
    /// the reconnection) cannot stretch the wait.
    pub(crate) async fn wait_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        want: Want<'_>,
        deadline: Option<Instant>,
    ) -> Result<Waited, LockError> {
        let q = match enqueue_bounded(session, want, &parent_path(want.name), deadline).await {
            Ok(q) => q,
            Err(exit) => return exit.waited(),
        };
        let cleanup = Cleanup::new(session, &q, want.owner, want.attempt);
        let mut wait = MutexWait {
            inner: self,
            want,
            live: None,
            suspects: Suspects::new(session, &q.parent),
            foreign: Vec::new(),
            steps: Steps {
                session,
                name: want.name,
                deadline,
                cleanup,
            },
            q,
        };
        match wait.run().await {
            Ok(lease) => Ok(Waited::Acquired(lease)),
            Err(exit) => exit.waited(),
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
            let of = LeaseOf {
                name,
                owner,
                path: &q.path,
                node,
                count,
            };
            self.lease(session, of, &q.epoch)
        }))
    }

    /// Joins the hold (see [`Inner::join`]) with `want`'s attempt, run to
    /// its end even if the wait stops waiting for it: a lease it gets then
    /// is released, a share it may have made is taken back.
    fn join_detached(
        self: &Arc<Self>,
        session: &Arc<Session>,
        want: Want<'_>,
        parent: &str,
    ) -> impl Future<Output = Result<ZkResult<Joined>, LockError>> + use<> {
        let Want {
            name, owner, attempt, ..
        } = want;
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

/// A mutex's wait in one session, from its queued node on (see
/// [`Inner::wait_in_session`]).
struct MutexWait<'a> {
    inner: &'a Arc<Inner>,
    want: Want<'a>,
    /// While it waits, its session keeps its liveness record fresh (from
    /// its first wait on: a node that holds from its create on is never
    /// taken for a waiter's, and a refresh per acquisition is one more
    /// write on the server).
    live: Option<LiveGuard>,
    /// The nodes it waits for, looked at for dead waiters' (see
    /// [`crate::dead`]).
    suspects: Suspects,
    /// Nodes whose name carries the owner's tag but whose data names
    /// another owner (see [`plan`]).
    foreign: Vec<String>,
    steps: Steps<'a>,
    /// Its node, and the queue as last listed.
    q: Queued,
}

impl MutexWait<'_> {
    /// Takes the steps the queue's plan says until the lock is held, or
    /// the wait stops.
    async fn run(&mut self) -> Result<Lease, Exit> {
        let tag = owner_tag(self.want.owner);
        loop {
            match plan(&self.q, tag, &self.foreign) {
                Plan::Gone => return Err(self.steps.restart()),
                Plan::Holder if self.q.epoch.is_cancelled() => self.refresh().await?,
                Plan::Holder => return self.hold().await,
                Plan::Join => {
                    if let Some(lease) = self.join().await? {
                        return Ok(lease);
                    }
                }
                Plan::Wait(_) if self.steps.deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(self.steps.give_up().await);
                }
                Plan::Wait(node) => self.wait_for(&node).await?,
            }
        }
    }

    /// Lists the parent again.
    async fn refresh(&mut self) -> Result<(), Exit> {
        let session = self.steps.session;
        self.steps.bounded(refresh(session, &mut self.q)).await
    }

    /// Its node holds: the lease, once the node is claimed (see
    /// [`Inner::holder_lease`]).
    async fn hold(&mut self) -> Result<Lease, Exit> {
        let (session, Want { name, owner, .. }) = (self.steps.session, self.want);
        let lease = self.inner.holder_lease(session, name, owner, &self.q);
        let lease = self.steps.bounded(lease).await?;
        self.steps.cleanup.disarm();
        // None: deleted as a dead waiter's: queue again.
        lease.ok_or(Exit::Restart)
    }

    /// The hold is this owner's: joins it. `None`: it changed meanwhile,
    /// listed again.
    async fn join(&mut self) -> Result<Option<Lease>, Exit> {
        let joined = self.inner.join_detached(self.steps.session, self.want, &self.q.parent);
        let Some(joined) = until(self.steps.deadline, joined).await else {
            return Err(self.steps.give_up().await);
        };
        let joined = joined?.inspect_err(|_| self.steps.cleanup.join_failed());
        match self.steps.checked(joined).await? {
            Joined::Lease(lease, path) => {
                if path == self.q.path {
                    self.steps.cleanup.disarm();
                } else {
                    self.steps.cleanup.run().await;
                }
                return Ok(Some(lease));
            }
            Joined::Foreign(nodes) => {
                self.foreign.extend(nodes);
                self.refresh().await?;
            }
            Joined::Again => self.refresh().await?,
        }
        Ok(None)
    }

    /// Waits for the node `node` ahead to go, then lists the parent again.
    async fn wait_for(&mut self, node: &str) -> Result<(), Exit> {
        let session = self.steps.session;
        self.live.get_or_insert_with(|| session.live());
        // The first contender the line's rule keeps out, and every one
        // behind it, waits (the first may hold through share nodes: not
        // counted as waiting; nor the readers or permits that hold beside
        // it).
        let queue = &self.q.queue;
        let first_waiting = (0..queue.len()).find(|&i| !admits(queue[i].mark, i, queue[..i].iter().map(|c| c.mark)));
        self.suspects.saw_waiting(first_waiting.map(|i| queue[i].seq));
        let ahead = self.q.queue.iter().find(|c| c.name == node);
        self.suspects.waiting_for(ahead.map(|c| (c.name.clone(), c.seq, None)));
        let path = format!("{}/{node}", self.q.parent);
        // Its going only: not its claim (see `crate::claim`).
        let watching = session.client.get_and_watch_children(&path);
        let armed = async {
            let (_, _, watcher) = watching.await?;
            ZkResult::Ok(Some(watcher.changed()))
        };
        self.inner
            .wait_on_watch(&mut self.steps, &mut self.suspects, armed)
            .await?;
        self.refresh().await
    }
}

/// Sleeps until `deadline`; forever without one.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
