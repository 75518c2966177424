//! Acquiring a semaphore's permit or a read-write lock's read or write
//! hold in one session: queue a marked contender node, read the line, take
//! the step [`plan`] says, wait on a watch. The line's rules are in
//! [`line`](super::line); queueing, the deadline and taking back what a failed
//! or abandoned acquisition left are the mutex's (see [`crate::wait`],
//! [`crate::leftover`]). An acquisition carried on from an ended session
//! first takes back the nodes that session queued for it (each would be a
//! contender of its own here, see [`take_back_earlier`]).
//!
//! A writer records its token in the read-write lock's parent (persistent,
//! so the last write token outlives the holds: readers carry it) before its
//! lease is handed out, in one `multi` with a check that its node stands;
//! the record only grows.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::Poll;

use lockkit_core::LockError;
use lockkit_core::raw::Lease;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult, OneshotWatcher, WatchedEvent};

use super::line::{Entry, Listed, Node, Scope, Step, Watch, plan, read_line};
use crate::backend::Inner;
use crate::change::{Change, Known, change};
use crate::claim::claim;
use crate::conn::counters::Counters;
use crate::conn::session::Session;
use crate::dead::Suspects;
use crate::error::{BACKEND, is_connection_loss};
use crate::layout::{Child, Mark, beside_name, kind_parent, node_name, parse_last_write, queue_of};
use crate::leftover::{Leftover, take_back_earlier};
use crate::queue::{get, refresh, refresh_watching, sync};
use crate::result::ZkResult;
use crate::step::step;
use crate::wait::{Waited, bounded_step, enqueue_bounded, give_up, until, watch_step};
use crate::want::Want;

/// Sets the data of `path` (under `version`) only while the node `check`
/// stands, in one `multi`. `None`: `check` is gone or `path` changed.
async fn set_while(client: &Client, check: &str, path: &str, data: &[u8], version: i32) -> ZkResult<Option<i32>> {
    let mut multi = client.new_multi_writer();
    multi.add_check_version(check, -1)?;
    multi.add_set_data(path, data, Some(version))?;
    match multi.commit().await {
        Ok(results) => match results.last() {
            Some(MultiWriteResult::SetData { stat }) if !stat.is_invalid() => Ok(Some(stat.version)),
            _ => Ok(Some(version + 1)),
        },
        Err(MultiWriteError::OperationFailed {
            source: ZkError::NoNode | ZkError::BadVersion,
            ..
        }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Records `token` as the last write token in the read-write lock's parent
/// while the writer's node `node` stands. False: that node is gone.
async fn record_write(client: &Client, parent: &str, node: &str, token: i64) -> ZkResult<bool> {
    loop {
        let Some((data, stat)) = get(client, parent).await? else {
            return Ok(false);
        };
        if parse_last_write(&data) >= token {
            return Ok(true);
        }
        match set_while(client, node, parent, token.to_string().as_bytes(), stat.version).await {
            Ok(Some(_)) => return Ok(true),
            // The node is gone, or the parent changed: the next read says.
            Ok(None) => {}
            Err(e) if is_connection_loss(&e) => sync(client, parent).await?,
            Err(e) => return Err(e),
        }
    }
}

/// An arming of one watch: its watcher, or `None` when what it waits
/// for has happened already (look again).
type Arming<'a> = Pin<Box<dyn Future<Output = ZkResult<Option<OneshotWatcher>>> + Send + 'a>>;

/// Arms `watches` of nodes under `parent`, pipelined: `None` when one of
/// them has happened already (a node claimed, the parent's children changed
/// since `seen` was listed: a children watch armed after the change would
/// not fire for it), look again. A node gone already: `NoNode`.
async fn arm(
    client: &Client,
    parent: &str,
    watches: &[Watch],
    seen: &[Child],
) -> ZkResult<Option<Vec<OneshotWatcher>>> {
    let arming: Vec<Arming<'_>> = watches
        .iter()
        .map(|w| -> Arming<'_> {
            match w {
                Watch::Gone(n) => {
                    let armed = client.get_and_watch_children(&format!("{parent}/{n}"));
                    Box::pin(async move { Ok(Some(armed.await?.2)) })
                }
                Watch::Claim(n) => {
                    let armed = client.get_and_watch_data(&format!("{parent}/{n}"));
                    Box::pin(async move {
                        let (_, stat, watcher) = armed.await?;
                        Ok((stat.version == 0).then_some(watcher))
                    })
                }
                Watch::Children => {
                    let armed = client.list_and_watch_children(parent);
                    Box::pin(async move {
                        let (children, watcher) = armed.await?;
                        let now = seen.first().map(|me| queue_of(&children, me.mark)).unwrap_or_default();
                        let same = now.len() == seen.len() && now.iter().zip(seen).all(|(a, b)| a.name == b.name);
                        Ok(same.then_some(watcher))
                    })
                }
            }
        })
        .collect();
    let mut watchers = Vec::with_capacity(watches.len());
    let mut happened = false;
    for armed in arming {
        match armed.await? {
            Some(w) => watchers.push(w),
            None => happened = true,
        }
    }
    Ok((!happened).then_some(watchers))
}

/// Goes beside the owner's write hold at `writer`: the write token in the
/// reader's node at `path` (under `version`) and its beside marker, in
/// one `multi` that checks the writer's node stands. `None`: it is gone,
/// or the reader's node changed.
async fn go_beside(session: &Session, writer: &str, path: &str, data: &[u8], version: i32) -> ZkResult<Option<i32>> {
    let marker = format!("{}/{}", parent_of(path), beside_name(node_name(path)));
    let mut multi = session.client.new_multi_writer();
    multi.add_check_version(writer, -1)?;
    multi.add_set_data(path, data, Some(version))?;
    multi.add_create(&marker, &[], &session.share_options())?;
    match multi.commit().await {
        Ok(results) => match results.get(1) {
            Some(MultiWriteResult::SetData { stat }) if !stat.is_invalid() => Ok(Some(stat.version)),
            _ => Ok(Some(version + 1)),
        },
        Err(MultiWriteError::OperationFailed {
            source: ZkError::NoNode | ZkError::BadVersion | ZkError::NodeExists,
            ..
        }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The parent of a node's path.
fn parent_of(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// The first event of any of `watchers`.
async fn any_event(watchers: Vec<OneshotWatcher>) -> WatchedEvent {
    let mut events: Vec<Pin<Box<dyn Future<Output = WatchedEvent> + Send>>> =
        watchers.into_iter().map(|w| Box::pin(w.changed()) as _).collect();
    std::future::poll_fn(|cx| {
        for event in &mut events {
            if let Poll::Ready(e) = event.as_mut().poll(cx) {
                return Poll::Ready(e);
            }
        }
        Poll::Pending
    })
    .await
}

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
        let Want {
            name,
            owner,
            attempt,
            kind,
        } = want;
        let (mark, parent) = (Mark::of(kind), kind_parent(name, kind));
        let client = &session.client;
        let mut q = match enqueue_bounded(session, want, &parent, deadline).await? {
            Ok(q) => q,
            Err(waited) => return Ok(waited),
        };
        let mut cleanup = crate::leftover::Cleanup::new(session, &q, owner, attempt);
        macro_rules! bounded {
            ($e:expr) => {
                bounded_step!(deadline, session, name, cleanup, $e)
            };
        }
        if bounded!(take_back_earlier(session, &q, owner, attempt)) {
            bounded!(refresh(session, &mut q));
        }
        let tag = q.me.owner_tag;
        // A watch of the parent's children armed with the last listing.
        let mut watching = None;
        let mut suspects = Suspects::new(session, &q.parent);
        // While it waits, its session keeps its liveness record fresh (from
        // its first wait on, as a mutex's waiter).
        let mut live = None;
        loop {
            // Armed with the listing planned on now, if at all.
            let listed_with = watching.take();
            let own = Node {
                known: q.node.clone(),
                session: session.id,
            };
            let listed = Listed {
                queue: &q.queue,
                beside: &q.beside,
                mark,
                own: Some((&q.me, &own)),
                last_write: q.last_write,
            };
            let line = bounded!(read_line(client, &q.parent, listed, Scope::Owner(tag)));
            session.counters().reads.fetch_add(line.reads as u64, Ordering::Relaxed);
            match plan(&line, &q.me, owner, session.id, attempt) {
                Step::Gone => {
                    cleanup.disarm();
                    return Ok(Waited::Restart);
                }
                Step::Conflict(reason) => {
                    cleanup.run().await;
                    let name = name.to_owned();
                    return Err(LockError::Conflict {
                        backend: BACKEND,
                        name,
                        reason,
                    });
                }
                Step::Holder(_) | Step::Join(_) | Step::Beside(_) if q.epoch.is_cancelled() => {
                    bounded!(refresh(session, &mut q));
                }
                Step::Holder(i) => {
                    let Some(me) = &line.entries[i].node else {
                        continue;
                    };
                    let node = bounded!(claim(client, &q.path, &me.known, q.at_creation));
                    let (Some(node), Some(token)) = (node, line.token(i)) else {
                        // Deleted as a dead waiter's: queue again.
                        cleanup.disarm();
                        return Ok(Waited::Restart);
                    };
                    if mark == Mark::Write && !bounded!(record_write(client, &q.parent, &q.path, token)) {
                        cleanup.disarm();
                        return Ok(Waited::Restart);
                    }
                    cleanup.disarm();
                    let lease = self.kind_lease(session, (&q.path, &node), token, &q.epoch);
                    return Ok(Waited::Acquired(lease));
                }
                Step::Join(i) => {
                    let Entry { path, node, .. } = &line.entries[i];
                    let (Some(node), Some(token)) = (node, line.token(i)) else {
                        bounded!(refresh(session, &mut q));
                        continue;
                    };
                    let add = change(
                        client,
                        path,
                        owner,
                        None,
                        Some(node.known.clone()),
                        Change::Add(attempt),
                        None,
                    );
                    cleanup.joined_at(path);
                    let (changed, _) = bounded!(add);
                    match changed.and_then(|c| c.known()) {
                        Some(node) => {
                            // Nothing awaited from here: the share is the
                            // caller's once added. Its own node goes in
                            // the background (it may keep its place in the
                            // line a moment longer).
                            cleanup.disarm();
                            Leftover::node_only(session, &q, owner, attempt).spawn();
                            return Ok(Waited::Acquired(self.kind_lease(
                                session,
                                (path, &node),
                                token,
                                &q.epoch,
                            )));
                        }
                        // Gone meanwhile: look again.
                        None => bounded!(refresh(session, &mut q)),
                    }
                }
                Step::Beside(w) => {
                    let writer = &line.entries[w];
                    let Some(token) = writer.node.as_ref().map(|n| n.known.czxid) else {
                        continue;
                    };
                    let Some(me) = line
                        .entries
                        .iter()
                        .find(|e| e.child.name == q.me.name)
                        .and_then(|e| e.node.as_ref())
                    else {
                        continue;
                    };
                    let mut data = me.known.data.clone();
                    data.token = Some(token);
                    let encoded = data.encode();
                    let set = go_beside(session, &writer.path, &q.path, &encoded, me.known.version);
                    match until(deadline, set).await {
                        None => return Ok(give_up(cleanup).await),
                        Some(Ok(Some(version))) => {
                            cleanup.disarm();
                            let node = Known {
                                data,
                                version,
                                czxid: me.known.czxid,
                            };
                            return Ok(Waited::Acquired(self.kind_lease(
                                session,
                                (&q.path, &node),
                                token,
                                &q.epoch,
                            )));
                        }
                        // Written or not: the next reading says.
                        Some(Err(e)) if is_connection_loss(&e) => bounded!(sync(client, &q.parent)),
                        Some(r) => {
                            step!(session, name, Waited::Restart, r, cleanup);
                        }
                    }
                    bounded!(refresh(session, &mut q));
                }
                Step::Wait(_) if try_only || deadline.is_some_and(|d| Instant::now() >= d) => {
                    return Ok(give_up(cleanup).await);
                }
                Step::Wait(watches) => {
                    live.get_or_insert_with(|| session.live());
                    let first_waiting = (0..line.entries.len()).find(|&i| !line.granted(i));
                    suspects.saw_waiting(first_waiting.map(|i| line.entries[i].child.seq));
                    let ahead = watches.iter().flat_map(|w| match w {
                        Watch::Gone(n) | Watch::Claim(n) => {
                            line.entries.iter().filter(|e| e.child.name == *n).take(1).collect()
                        }
                        // The first waiter of a semaphore: any permit held.
                        Watch::Children => (0..line.entries.len())
                            .filter(|&i| line.granted(i))
                            .map(|i| &line.entries[i])
                            .collect::<Vec<_>>(),
                    });
                    suspects.waiting_for(
                        ahead.map(|e| (e.child.name.clone(), e.child.seq, e.node.as_ref().map(|n| n.session))),
                    );
                    let armed = listed_with.filter(|_| watches == [Watch::Children]);
                    if armed.is_none() && watches.contains(&Watch::Children) {
                        Counters::bump(&session.counters().listings);
                    }
                    let armed = async {
                        ZkResult::Ok(match armed {
                            Some(watcher) => Some(any_event(vec![watcher])),
                            None => arm(client, &q.parent, &watches, &q.queue).await?.map(any_event),
                        })
                    };
                    watch_step!(self, deadline, session, name, cleanup, &mut suspects, armed);
                    // Woken by its predecessor's claim, a semaphore's
                    // waiter is likely the first one now: it lists and
                    // arms its watch of the children in one request.
                    if matches!(watches.as_slice(), [Watch::Claim(_)]) {
                        watching = bounded!(refresh_watching(session, &mut q));
                    } else {
                        bounded!(refresh(session, &mut q));
                    }
                }
            }
        }
    }
}
