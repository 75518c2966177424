//! Joining a lock's queue: [`enqueue`] creates a contender's node (and the
//! parent, if needed) with the listing of the parent in the same round
//! trip; [`enqueue_bounded`] queues an acquisition within its deadline,
//! the create carried to its end (and its node taken back) if the
//! acquisition stops waiting for it.

use std::future::Future;
use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::detach;
use tokio::time::Instant;
use zookeeper_client::{Error as ZkError, MultiWriteError, MultiWriteResult, Stat};

use crate::change::Known;
use crate::cleanup::Cleanup;
use crate::conn::counters::Counters;
use crate::conn::reconnect::Reconnect;
use crate::conn::session::Session;
use crate::error::{BACKEND, is_connection_loss, is_session_end, zk};
use crate::layout::{
    Child, Mark, NodeData, besides, child_prefix, child_stem, owner_tag, queue, shares, write_record_path,
};
use crate::leftover::Leftover;
use crate::queue::{ParentRead, Queued, list, read, sync};
use crate::result::ZkResult;
use crate::step::{Exit, until};
use crate::want::Want;

/// One contender to queue: `attempt` of `owner` under the lock's `parent`,
/// asking for `mark` (see [`Mark`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Contender<'a> {
    pub(crate) parent: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) attempt: &'a str,
    pub(crate) mark: Mark,
}

/// Creates this contender's node (and the parent, if needed) and lists the
/// parent in the same round trip. The node's name carries the attempt id,
/// so a create whose answer was lost with the connection is found again
/// (after a `sync`, so that the server listing has applied it if the leader
/// did) instead of leaving a second node of the same attempt.
pub(crate) async fn enqueue(session: &Session, contender: Contender<'_>) -> ZkResult<Queued> {
    let queueing = Queueing::new(session, contender);
    let mut lost = Reconnect::new(&session.client);
    loop {
        if let Some(q) = queueing.try_once(&mut lost).await? {
            return Ok(q);
        }
    }
}

/// One [`enqueue`]: the contender, and its node's name and data.
struct Queueing<'a> {
    session: &'a Session,
    contender: Contender<'a>,
    /// The path the create names (the server appends the sequence).
    prefix: String,
    /// The start of the node's name, whatever its sequence.
    stem: String,
    data: NodeData,
    encoded: Vec<u8>,
}

impl<'a> Queueing<'a> {
    fn new(session: &'a Session, contender: Contender<'a>) -> Self {
        let Contender {
            parent,
            owner,
            attempt,
            mark,
        } = contender;
        let tag = owner_tag(owner);
        let data = NodeData::contender(owner, attempt);
        Queueing {
            session,
            contender,
            prefix: child_prefix(parent, tag, attempt, mark),
            stem: child_stem(tag, attempt),
            encoded: data.encode(),
            data,
        }
    }

    /// One try: the create, with the listing of the parent (and the reads
    /// that may save a round trip) sent right behind it. `None`: try again
    /// (the parent was missing, or the node of a lost create is not there).
    async fn try_once(&self, lost: &mut Reconnect<'_>) -> ZkResult<Option<Queued>> {
        let (session, client, parent) = (self.session, &self.session.client, self.contender.parent);
        let epoch = session.epoch();
        // Sent now, answered in order: the listing includes our node.
        let (sent, create) = self.send_create()?;
        Counters::bump(&session.counters().listings);
        let listing = client.get_children(parent);
        let reading = self.last_write_read();
        let guessed = session.seq_guess.guess(parent).map(|seq| {
            let path = format!("{}{seq:010}", self.prefix);
            let read = client.get_data(&path);
            (path, read)
        });
        // `answered`: the create's own answer carried the stat.
        let (name, node, answered) = match create.await {
            Ok((path, stat)) => self.created(sent, &path, &stat),
            Err(ZkError::NoNode) => return self.make_parent(lost).await.map(|()| None),
            Err(e) if is_connection_loss(&e) => match self.find_created().await? {
                Some((name, known)) => (name, Some(known), false),
                None => return Ok(None),
            },
            Err(e) => return Err(e),
        };
        let me = Child::parse(&name).ok_or_else(|| ZkError::UnexpectedError(format!("created node {name}")))?;
        let (children, parent_stat, reading) = match listing.await {
            Ok((children, stat)) if children.contains(&name) => (children, Some(stat), reading),
            _ => (list(client, parent).await?, None, self.last_write_read()),
        };
        session.seq_guess.created(parent, me.seq, answered);
        let guessed = match guessed {
            Some((path, read)) if path == me.path(parent) => read.await.ok(),
            _ => None,
        };
        let Some(node) = self.own_node(&me, node, guessed).await? else {
            return Ok(None);
        };
        let at_creation = parent_stat.is_some_and(|p| p.pzxid == node.czxid);
        let mut q = Queued {
            parent: parent.to_owned(),
            path: me.path(parent),
            me,
            node,
            queue: queue(&children),
            shares: shares(&children),
            beside: besides(&children).into_iter().map(str::to_owned).collect(),
            epoch,
            at_creation,
            last_write: None,
        };
        q.last_write_from(client, reading).await?;
        Ok(Some(q))
    }

    /// Sends the create, with a check of this session's marker in the same
    /// `multi` (see `conn::session::SESSIONS`): when it was sent, and its
    /// answer — the node's path and stat, or `SessionExpired` when the
    /// marker is gone (this backend has moved on to a new session).
    fn send_create(&self) -> ZkResult<(std::time::Instant, impl Future<Output = ZkResult<(String, Stat)>> + 'a)> {
        let session = self.session;
        let mut multi = session.client.new_multi_writer();
        if let Some(marker) = &session.marker {
            multi.add_check_version(marker, -1)?;
        }
        multi.add_create(&self.prefix, &self.encoded, &session.contender_options())?;
        let fenced = session.marker.is_some();
        let sent = std::time::Instant::now();
        let create = multi.commit();
        let answer = async move {
            match create.await {
                Ok(results) => match results.into_iter().last() {
                    Some(MultiWriteResult::Create { path, stat }) => Ok((path, stat)),
                    other => Err(ZkError::UnexpectedError(format!("a create answered {other:?}"))),
                },
                Err(MultiWriteError::OperationFailed { index: 0, .. }) if fenced => Err(ZkError::SessionExpired),
                Err(e) => Err(ZkError::from(e)),
            }
        };
        Ok((sent, answer))
    }

    /// A reader's read of the read-write lock's last write token, sent now
    /// (see [`Queued::last_write_from`]).
    fn last_write_read(&self) -> Option<ParentRead> {
        let (client, parent) = (&self.session.client, self.contender.parent);
        let record = write_record_path(parent);
        (self.contender.mark == Mark::Read).then(|| Box::pin(client.get_data(&record)) as ParentRead)
    }

    /// The create sent at `sent` was answered with the node at `path`: its
    /// name, and what is known of it if the answer carried its stat.
    fn created(&self, sent: std::time::Instant, path: &str, stat: &Stat) -> (String, Option<Known>, bool) {
        // A lease proven by this answer may follow a suspension that left
        // the heartbeat's deadline behind.
        self.session.proven(sent);
        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
        // Some servers answer a create in a multi without its stat: a read
        // sent behind it, of the name it likely got (see `conn::seq_guess`),
        // or one after, tells.
        let answered = !stat.is_invalid();
        (name, answered.then(|| Known::read(self.data.clone(), stat)), answered)
    }

    /// Creates the missing parent (a container, whatever the kind: the
    /// last write token lives apart); Ok when the create may be tried again.
    async fn make_parent(&self, lost: &mut Reconnect<'_>) -> ZkResult<()> {
        let parent = self.contender.parent;
        match self
            .session
            .client
            .create(parent, &[], &self.session.parent_options(Mark::Mutex))
            .await
        {
            Ok(_) | Err(ZkError::NodeExists) => Ok(()),
            Err(e) if is_connection_loss(&e) => lost.wait(e).await,
            Err(e) => Err(e),
        }
    }

    /// After a create whose answer was lost: the node it made, if any, by
    /// the attempt id in its name. Only this session's: a node of the
    /// attempt that an earlier session of this backend made (before it was
    /// fenced) is not this create's.
    async fn find_created(&self) -> ZkResult<Option<(String, Known)>> {
        let (client, parent) = (&self.session.client, self.contender.parent);
        sync(client, parent).await?;
        let children = list(client, parent).await?;
        for name in children.into_iter().filter(|c| c.starts_with(&self.stem)) {
            if let Some((Some(data), stat)) = read(client, &format!("{parent}/{name}")).await?
                && stat.ephemeral_owner == self.session.id
            {
                let known = Known {
                    data,
                    version: stat.version,
                    czxid: stat.czxid,
                };
                return Ok(Some((name, known)));
            }
        }
        Ok(None)
    }

    /// The contender's node as created: as the create's answer had it, or
    /// the guessed read behind it, or else read now. `None`: gone already.
    async fn own_node(
        &self,
        me: &Child,
        node: Option<Known>,
        guessed: Option<(Vec<u8>, Stat)>,
    ) -> ZkResult<Option<Known>> {
        Ok(Some(match (node, guessed) {
            (Some(node), _) => node,
            (None, Some((_, stat))) => Known::read(self.data.clone(), &stat),
            (None, None) => {
                Counters::bump(&self.session.counters().late_stat_reads);
                let client = &self.session.client;
                match read(client, &me.path(self.contender.parent)).await? {
                    Some((_, stat)) => Known::read(self.data.clone(), &stat),
                    None => return Ok(None),
                }
            }
        }))
    }
}

/// Queues `want` in `session` under `parent` for a wait (see
/// [`enqueue_detached`]), bounded by `deadline`: the queued contender, or
/// how the acquisition stops — it ran out while the node was being made
/// ([`Exit::GaveUp`], see [`queued_too_late`]), or the session ended
/// ([`Exit::Restart`]), or the create failed (see [`enqueue_failed`]).
/// The mutex's wait and the kinds' queue alike.
pub(crate) async fn enqueue_bounded(
    session: &Arc<Session>,
    want: Want<'_>,
    parent: &str,
    deadline: Option<Instant>,
) -> Result<Queued, Exit> {
    let contender = Contender {
        parent,
        owner: want.owner,
        attempt: want.attempt,
        mark: Mark::of(want.kind),
    };
    let queued = enqueue_detached(session, contender);
    let mut queued = std::pin::pin!(queued);
    let Some(queued) = until(deadline, queued.as_mut()).await else {
        // The wait ran out while the node was being made: it may stand
        // (or come) all the same. It is taken back before the call
        // returns, as after a wait (see `Steps::give_up`).
        queued_too_late(session, contender, queued).await;
        return Err(Exit::GaveUp);
    };
    match queued? {
        Ok(q) => Ok(q),
        Err(e) => Err(enqueue_failed(session, want.name, contender, e).await),
    }
}

/// Queues in `session` (see [`enqueue`]), run to its end even if the wait
/// stops waiting for it: the node it makes then is taken back.
fn enqueue_detached(
    session: &Arc<Session>,
    contender: Contender<'_>,
) -> impl Future<Output = Result<ZkResult<Queued>, LockError>> + use<> {
    let Contender {
        parent,
        owner,
        attempt,
        mark,
    } = contender;
    let (s, p, o, a) = (session.clone(), parent.to_owned(), owner.to_owned(), attempt.to_owned());
    let orphan = (session.clone(), parent.to_owned(), owner.to_owned(), attempt.to_owned());
    detach(
        BACKEND,
        async move {
            let contender = Contender {
                parent: &p,
                owner: &o,
                attempt: &a,
                mark,
            };
            enqueue(&s, contender).await
        },
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

/// After queueing `contender` for `name` failed with `e`: start over when
/// the session ended (in a new one, which takes the attempt's earlier node
/// back), else the error, once the node the server may have made all the
/// same is taken back.
pub(crate) async fn enqueue_failed(session: &Arc<Session>, name: &str, contender: Contender<'_>, e: ZkError) -> Exit {
    if is_session_end(&e) {
        session.end(&e);
        return Exit::Restart;
    }
    let Contender {
        parent, owner, attempt, ..
    } = contender;
    Leftover::unknown_node(session, parent, owner, attempt)
        .take_back_now()
        .await;
    Exit::Failed(zk("acquire", Some(name), e))
}

/// Leaves the queue after the wait ran out while the node was being made:
/// waits for the create's answer, for up to a session timeout, then takes
/// the node back as `Steps::give_up` does. A create still unanswered by
/// then goes on in the background, and its detached clean-up takes the
/// node back. Returning at once would leave that clean-up to a slow
/// connection: the node could come after the call returned and stand
/// first in the queue as a hold the owner's other processes join.
async fn queued_too_late<F>(session: &Arc<Session>, contender: Contender<'_>, queued: F)
where
    F: Future<Output = Result<ZkResult<Queued>, LockError>>,
{
    let Contender {
        parent, owner, attempt, ..
    } = contender;
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
}
