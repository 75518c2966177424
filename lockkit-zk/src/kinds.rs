//! Acquiring a semaphore's permit or a read-write lock's read or write
//! hold in one session: queue a marked contender node, read the line, take
//! the step [`plan`] says, wait on a watch. The line's rules are in
//! [`crate::line`]; queueing, the deadline and taking back what a failed
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
use std::task::Poll;

use lockkit_core::LockError;
use lockkit_core::backend::{Lease, LockKind};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Client, Error as ZkError, MultiWriteError, MultiWriteResult, OneshotWatcher, WatchedEvent};

use crate::acquire::step;
use crate::backend::Inner;
use crate::change::{Change, Known, change};
use crate::conn::Session;
use crate::error::{BACKEND, is_connection_loss};
use crate::layout::{Child, Mark, kind_parent, queue_of};
use crate::leftover::{Leftover, take_back_earlier};
use crate::line::{Entry, Step, parse_last_write, plan, read_line};
use crate::queue::{ZkResult, get, refresh, sync};
use crate::wait::{Waited, bounded_step, enqueue_bounded, give_up, until, watch_step};

/// One acquisition of a semaphore's permit or a read-write lock's hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want<'a> {
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) attempt: &'a str,
    pub(crate) kind: LockKind,
}

/// A lease on the node at `path` (as `node`) with `token`.
fn lease(session: &Arc<Session>, path: &str, node: &Known, token: i64, epoch: &CancellationToken) -> Lease {
    Lease {
        token: token as u64,
        hold_count: node.data.count(),
        valid_until: None,
        lost: Some(session.lease_token(path, node.czxid, epoch)),
        session_deadline: Some(session.deadline.clone()),
    }
}

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

/// Arms the watches of the nodes `nodes` under `parent`, or (none) of the
/// parent's children unless they changed since `seen` was listed: `None`
/// then, look again (a children watch armed after the change would not
/// fire for it). A node gone already: `NoNode`.
async fn arm(client: &Client, parent: &str, nodes: &[String], seen: &[Child]) -> ZkResult<Option<Vec<OneshotWatcher>>> {
    if nodes.is_empty() {
        let (children, watcher) = client.list_and_watch_children(parent).await?;
        let now = seen.first().map(|me| queue_of(&children, me.mark)).unwrap_or_default();
        let same = now.len() == seen.len() && now.iter().zip(seen).all(|(a, b)| a.name == b.name);
        return Ok(same.then(|| vec![watcher]));
    }
    let arming: Vec<_> = nodes
        .iter()
        .map(|n| client.get_and_watch_data(&format!("{parent}/{n}")))
        .collect();
    let mut watchers = Vec::with_capacity(nodes.len());
    for armed in arming {
        watchers.push(armed.await?.2);
    }
    Ok(Some(watchers))
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
        loop {
            let line = bounded!(read_line(client, &q.parent, &q.queue, mark));
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
                    let token = line.token(i);
                    if mark == Mark::Write && !bounded!(record_write(client, &q.parent, &q.path, token)) {
                        cleanup.disarm();
                        return Ok(Waited::Restart);
                    }
                    cleanup.disarm();
                    let lease = lease(session, &q.path, &line.entries[i].known, token, &q.epoch);
                    return Ok(Waited::Acquired(lease));
                }
                Step::Join(i) => {
                    let Entry { path, known, .. } = &line.entries[i];
                    let add = change(
                        client,
                        path,
                        owner,
                        None,
                        Some(known.clone()),
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
                            let lease = lease(session, path, &node, line.token(i), &q.epoch);
                            return Ok(Waited::Acquired(lease));
                        }
                        // Gone meanwhile: look again.
                        None => bounded!(refresh(session, &mut q)),
                    }
                }
                Step::Beside(w) => {
                    let writer = &line.entries[w];
                    let token = writer.known.czxid;
                    let Some(me) = line.entries.iter().find(|e| e.child.name == q.me.name) else {
                        continue;
                    };
                    let mut data = me.known.data.clone();
                    data.token = Some(token);
                    let encoded = data.encode();
                    let set = set_while(client, &writer.path, &q.path, &encoded, me.known.version);
                    match until(deadline, set).await {
                        None => return Ok(give_up(cleanup).await),
                        Some(Ok(Some(version))) => {
                            cleanup.disarm();
                            let node = Known {
                                data,
                                version,
                                czxid: me.known.czxid,
                            };
                            return Ok(Waited::Acquired(lease(session, &q.path, &node, token, &q.epoch)));
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
                Step::Wait(nodes) => {
                    let armed = async { ZkResult::Ok(arm(client, &q.parent, &nodes, &q.queue).await?.map(any_event)) };
                    watch_step!(self, deadline, session, name, cleanup, armed);
                    bounded!(refresh(session, &mut q));
                }
            }
        }
    }
}
