//! Acquiring a semaphore's permit or a read-write lock's read or write
//! hold in one session: queue a marked contender node, read the line, take
//! the step [`plan`] says (the writes of a grant are in
//! [`grant`](super::grant)), wait on a watch ([`arm`](super::arm)). The
//! line's rules are in [`line`](super::line); queueing, the deadline and
//! taking back what a failed or abandoned acquisition left are the mutex's
//! (see [`crate::enqueue`], [`crate::step`], [`crate::leftover`]). An
//! acquisition carried on from an ended session first takes back the nodes
//! that session queued for it (each would be a contender of its own here,
//! see [`take_back_earlier`]).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lockkit_core::LockError;
use lockkit_core::raw::Lease;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::OneshotWatcher;

use super::arm::{any_event, arm};
use super::grant::{go_beside, parent_of, record_write};
use super::line::{Entry, Line, Listed, Node, Scope, read_line};
use super::plan::{Step, Watch, plan};
use crate::backend::Inner;
use crate::change::{Change, Edit, Known, change};
use crate::claim::claim;
use crate::cleanup::Cleanup;
use crate::conn::counters::Counters;
use crate::conn::liveness::LiveGuard;
use crate::conn::session::Session;
use crate::dead::Suspects;
use crate::enqueue::enqueue_bounded;
use crate::error::{BACKEND, is_connection_loss};
use crate::layout::{Child, Mark, node_name, parent_path};
use crate::leftover::Leftover;
use crate::queue::{Queued, refresh, refresh_watching, sync};
use crate::result::ZkResult;
use crate::step::{Exit, Steps, Waited, until};
use crate::take_out::take_back_earlier;
use crate::want::Want;

impl Inner {
    /// A lease on the node at `path` (as `node`) with `token`, recorded
    /// for its release.
    fn kind_lease(
        &self,
        session: &Arc<Session>,
        (path, node): (&str, &Known),
        token: i64,
        epoch: &CancellationToken,
    ) -> Lease {
        let reader = Child::parse(node_name(path)).is_some_and(|c| c.mark == Mark::Read);
        let key = (parent_of(path).to_owned(), node.data.owner.clone(), token, reader);
        self.remember_kind(key, path, node, session.id);
        Lease {
            token: token as u64,
            hold_count: node.data.count(),
            valid_until: None,
            lost: Some(session.lease_token(path, node.czxid, epoch)),
            session_deadline: Some(session.deadline.clone()),
        }
    }

    /// Queues `want` in `session` and takes the steps of its line until it
    /// holds, up to `deadline`; with `try_only`, a contender that would
    /// wait leaves at once ([`Waited::TimedOut`]: busy).
    pub(crate) async fn kind_in_session(
        self: &Arc<Self>,
        session: &Arc<Session>,
        want: Want<'_>,
        deadline: Option<Instant>,
        try_only: bool,
    ) -> Result<Waited, LockError> {
        let parent = parent_path(want.name);
        let q = match enqueue_bounded(session, want, &parent, deadline).await {
            Ok(q) => q,
            Err(exit) => return exit.waited(),
        };
        let cleanup = Cleanup::new(session, &q, want.owner, want.attempt);
        let mut wait = KindWait {
            inner: self,
            want,
            mark: Mark::of(want.kind),
            try_only,
            live: None,
            suspects: Suspects::new(session, &q.parent),
            watching: None,
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
}

/// A semaphore's or read-write lock's acquisition in one session, from its
/// queued node on (see [`Inner::kind_in_session`]).
struct KindWait<'a> {
    inner: &'a Arc<Inner>,
    want: Want<'a>,
    /// What its node asks for.
    mark: Mark,
    /// A try: a contender that would wait leaves at once.
    try_only: bool,
    /// While it waits, its session keeps its liveness record fresh (from
    /// its first wait on, as a mutex's waiter).
    live: Option<LiveGuard>,
    /// The nodes it waits for, looked at for dead waiters' (see
    /// [`crate::dead`]).
    suspects: Suspects,
    /// A watch of the parent's children armed with the last listing.
    watching: Option<OneshotWatcher>,
    steps: Steps<'a>,
    /// Its node, and the line as last listed.
    q: Queued,
}

impl KindWait<'_> {
    /// Takes the steps [`plan`] says on each reading of the line until it
    /// holds, or the acquisition stops.
    async fn run(&mut self) -> Result<Lease, Exit> {
        let Want { owner, attempt, .. } = self.want;
        let session = self.steps.session;
        if self
            .steps
            .bounded(take_back_earlier(session, &self.q, owner, attempt))
            .await?
        {
            self.refresh().await?;
        }
        loop {
            // Armed with the listing planned on now, if at all.
            let listed_with = self.watching.take();
            let line = self.read_line().await?;
            let acquired = match plan(&line, &self.q.me, owner, session.id, attempt) {
                Step::Gone => return Err(self.steps.restart()),
                Step::Conflict(reason) => return Err(self.conflict(reason).await),
                Step::Holder(_) | Step::Join(_) | Step::Beside(_) if self.q.epoch.is_cancelled() => {
                    self.refresh().await?;
                    None
                }
                Step::Holder(i) => self.hold(&line, i).await?,
                Step::Join(i) => self.join(&line, i).await?,
                Step::Beside(w) => self.beside(&line, w).await?,
                Step::Wait(_) if self.try_only || self.steps.deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Err(self.steps.give_up().await);
                }
                Step::Wait(watches) => {
                    self.wait(&line, &watches, listed_with).await?;
                    None
                }
            };
            if let Some(lease) = acquired {
                return Ok(lease);
            }
        }
    }

    /// Lists the parent again.
    async fn refresh(&mut self) -> Result<(), Exit> {
        let session = self.steps.session;
        self.steps.bounded(refresh(session, &mut self.q)).await
    }

    /// The line as last listed, with the data of the owner's nodes.
    async fn read_line(&mut self) -> Result<Line, Exit> {
        let (session, q) = (self.steps.session, &self.q);
        let own = Node {
            known: q.node.clone(),
            session: session.id,
        };
        let listed = Listed {
            queue: &q.queue,
            shares: &q.shares,
            beside: &q.beside,
            mark: self.mark,
            own: Some((&q.me, &own)),
            last_write: q.last_write,
        };
        let reading = read_line(&session.client, &q.parent, listed, Scope::Owner(q.me.owner_tag));
        let line = self.steps.bounded(reading).await?;
        session.counters().reads.fetch_add(line.reads as u64, Ordering::Relaxed);
        Ok(line)
    }

    /// The request does not fit the name's state: its node is taken back,
    /// the conflict returned.
    async fn conflict(&mut self, reason: String) -> Exit {
        self.steps.cleanup.run().await;
        let name = self.want.name.to_owned();
        Exit::Failed(LockError::Conflict {
            backend: BACKEND,
            name,
            reason,
        })
    }

    /// Its own node holds, at `i` of `line`: the lease, once the node is
    /// claimed (see [`crate::claim`]) and a writer's token recorded. `None`:
    /// its node was not read, look again.
    async fn hold(&mut self, line: &Line, i: usize) -> Result<Option<Lease>, Exit> {
        let (session, q) = (self.steps.session, &self.q);
        let client = &session.client;
        let Some(me) = &line.entries[i].node else {
            return Ok(None);
        };
        let node = self
            .steps
            .bounded(claim(client, &q.path, &me.known, q.at_creation))
            .await?;
        let (Some(node), Some(token)) = (node, line.token(i)) else {
            // Deleted as a dead waiter's: queue again.
            return Err(self.steps.restart());
        };
        if self.mark == Mark::Write
            && !self
                .steps
                .bounded(record_write(session, &q.parent, &q.path, token))
                .await?
        {
            return Err(self.steps.restart());
        }
        self.steps.cleanup.disarm();
        Ok(Some(self.inner.kind_lease(session, (&q.path, &node), token, &q.epoch)))
    }

    /// The owner's holding node at `i` of `line` is the hold (a repeated
    /// attempt, or a re-entry): the attempt is added there, and its own
    /// node goes. `None`: look again.
    async fn join(&mut self, line: &Line, i: usize) -> Result<Option<Lease>, Exit> {
        let Want { owner, attempt, .. } = self.want;
        let session = self.steps.session;
        let Entry { path, node, .. } = &line.entries[i];
        let (Some(node), Some(token)) = (node, line.token(i)) else {
            self.refresh().await?;
            return Ok(None);
        };
        let edit = Edit {
            path,
            owner,
            token: None,
            known: Some(node.known.clone()),
            change: Change::Add(attempt),
            list_after: None,
        };
        self.steps.cleanup.joined_at(path);
        let (changed, _) = self.steps.bounded(change(&session.client, edit)).await?;
        match changed.and_then(|c| c.known()) {
            Some(node) => {
                // Nothing awaited from here: the share is the caller's once
                // added. Its own node goes in the background (it may keep
                // its place in the line a moment longer).
                self.steps.cleanup.disarm();
                Leftover::node_only(session, &self.q, owner, attempt).spawn();
                Ok(Some(self.inner.kind_lease(
                    session,
                    (path, &node),
                    token,
                    &self.q.epoch,
                )))
            }
            // Gone meanwhile: look again.
            None => {
                self.refresh().await?;
                Ok(None)
            }
        }
    }

    /// A reader of the owner of the holding writer at `w` of `line`: goes
    /// beside it (see [`go_beside`]). `None`: look again.
    async fn beside(&mut self, line: &Line, w: usize) -> Result<Option<Lease>, Exit> {
        let session = self.steps.session;
        let writer = &line.entries[w];
        let Some(token) = writer.node.as_ref().map(|n| n.known.czxid) else {
            return Ok(None);
        };
        let mine = line.entries.iter().find(|e| e.child.name == self.q.me.name);
        let Some(me) = mine.and_then(|e| e.node.as_ref()) else {
            return Ok(None);
        };
        let mut data = me.known.data.clone();
        data.token = Some(token);
        let encoded = data.encode();
        let set = go_beside(session, &writer.path, &self.q.path, &encoded, me.known.version);
        match until(self.steps.deadline, set).await {
            None => return Err(self.steps.give_up().await),
            Some(Ok(Some(version))) => {
                self.steps.cleanup.disarm();
                let node = Known {
                    data,
                    version,
                    czxid: me.known.czxid,
                };
                let lease = self
                    .inner
                    .kind_lease(session, (&self.q.path, &node), token, &self.q.epoch);
                return Ok(Some(lease));
            }
            // Written or not: the next reading says.
            Some(Err(e)) if is_connection_loss(&e) => self.steps.bounded(sync(&session.client, &self.q.parent)).await?,
            Some(r) => {
                self.steps.checked(r).await?;
            }
        }
        self.refresh().await?;
        Ok(None)
    }

    /// Waits for any of `watches` (see [`Step::Wait`]), then lists the
    /// parent again. `listed_with`: a watch of the parent's children armed
    /// with the listing planned on.
    async fn wait(&mut self, line: &Line, watches: &[Watch], listed_with: Option<OneshotWatcher>) -> Result<(), Exit> {
        let session = self.steps.session;
        self.live.get_or_insert_with(|| session.live());
        self.suspect(line, watches);
        let armed = listed_with.filter(|_| watches == [Watch::Children]);
        if armed.is_none() && watches.contains(&Watch::Children) {
            Counters::bump(&session.counters().listings);
        }
        let q = &self.q;
        let armed = async {
            ZkResult::Ok(match armed {
                Some(watcher) => Some(any_event(vec![watcher])),
                None => arm(&session.client, &q.parent, watches, &q.queue).await?.map(any_event),
            })
        };
        self.inner
            .wait_on_watch(&mut self.steps, &mut self.suspects, armed)
            .await?;
        // Woken by its predecessor's claim, a semaphore's waiter is likely
        // the first one now: it lists and arms its watch of the children
        // in one request.
        if matches!(watches, [Watch::Claim(_)]) {
            self.watching = self.steps.bounded(refresh_watching(session, &mut self.q)).await?;
        } else {
            self.refresh().await?;
        }
        Ok(())
    }

    /// Tells the dead waiters' check what the wait waits for (see
    /// [`crate::dead`]).
    fn suspect(&mut self, line: &Line, watches: &[Watch]) {
        let first_waiting = (0..line.entries.len()).find(|&i| !line.granted(i));
        self.suspects
            .saw_waiting(first_waiting.map(|i| line.entries[i].child.seq));
        let ahead = watches.iter().flat_map(|w| match w {
            Watch::Gone(n) | Watch::Claim(n) => line.entries.iter().filter(|e| e.child.name == *n).take(1).collect(),
            // The first waiter of a semaphore: any permit held.
            Watch::Children => (0..line.entries.len())
                .filter(|&i| line.granted(i))
                .map(|i| &line.entries[i])
                .collect::<Vec<_>>(),
        });
        self.suspects
            .waiting_for(ahead.map(|e| (e.child.name.clone(), e.child.seq, e.node.as_ref().map(|n| n.session))));
    }
}
