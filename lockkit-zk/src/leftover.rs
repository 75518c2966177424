//! Taking back what an acquisition that did not take the lock left: its
//! contender nodes and its share in a node of the hold ([`Leftover`]), at
//! once, in the background or in the backend's next session. The
//! acquisition's guard for it is in [`crate::cleanup`].

use std::sync::Arc;
use std::time::Duration;

use crate::change::{Change, Edit, Known, change};
use crate::conn::session::Session;
use crate::error::{BACKEND, is_session_end};
use crate::hold::{View, read_hold};
use crate::layout::{child_stem, owner_tag};
use crate::orphan::Orphan;
use crate::queue::{Queued, list, sync};
use crate::result::ZkResult;
use crate::take_out::{AttemptOf, take_out_of};

/// How often taking back what a failed or abandoned acquisition left is
/// tried, before it is left to the session's end. Every try waits for the
/// connection to be back, so each failure is one more lost connection.
const LEFTOVER_TRIES: u32 = 8;
/// The pause after the first failed try; doubled after each one, up to
/// [`LEFTOVER_PAUSE_MAX`].
const LEFTOVER_PAUSE: Duration = Duration::from_millis(100);
const LEFTOVER_PAUSE_MAX: Duration = Duration::from_secs(2);

/// What an acquisition that did not take the lock may have left under
/// `parent`: its contender nodes, and its share in a node of this session's
/// hold (a join or re-entry whose outcome is unknown). Taking it back takes
/// `attempt`'s share out of those nodes, deleting a node left without
/// shares: never another attempt's share.
///
/// The contender nodes are the one of this session and any that an earlier
/// session of the backend queued for the same attempt before it started
/// over in this one: the server keeps a session (and its nodes) a while
/// after the client gave it up. Such a node outliving the call would come
/// first later and stand as a hold of the owner carrying the share of a
/// call that has returned, counted by the owner's next acquisition, which
/// joins it.
pub(crate) struct Leftover {
    session: Arc<Session>,
    parent: String,
    owner: String,
    attempt: String,
    /// The contender node as created, when its create was answered.
    node: Option<(String, Known)>,
    /// Look for this attempt's contender nodes by listing (its create's
    /// outcome is unknown, the known node's write failed, or the listing
    /// behind the create showed a node of an earlier session): their names
    /// carry the attempt id.
    find_node: bool,
    /// Look for this attempt's share in this session's nodes of the hold (a
    /// join or re-entry whose outcome is unknown).
    find_share: bool,
    /// Handed over from a session that ended: its nodes may still stand on
    /// the server (it keeps a session until its timeout after it last heard
    /// of it), so a share is looked for in every node of the hold.
    orphaned: bool,
    /// The node of a semaphore's or read-write lock's hold this attempt
    /// joined (a repeat or a re-entry) without knowing whether its share
    /// was added.
    share_at: Option<String>,
}

impl Leftover {
    /// The contender node of `q`, as created, and any other node of the
    /// attempt that `q`'s first listing shows (an earlier session's: it
    /// is older, so it is listed if it still stands).
    pub(crate) fn queued(session: &Arc<Session>, q: &Queued, owner: &str, attempt: &str) -> Self {
        let stem = child_stem(q.me.owner_tag, attempt);
        let earlier = q.queue.iter().any(|c| c.name != q.me.name && c.name.starts_with(&stem));
        Leftover {
            session: session.clone(),
            parent: q.parent.clone(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            node: Some((q.path.clone(), q.node.clone())),
            find_node: earlier,
            find_share: false,
            orphaned: false,
            share_at: None,
        }
    }

    /// The leftover of an acquisition whose session ended first, taken back
    /// by a later session of the backend: the server may keep the ended
    /// session (and its nodes) until its timeout, and the call has returned
    /// — left standing, its contender node could come first and stand as a
    /// hold of the owner that the owner's other processes join, counting a
    /// share nobody holds. Its nodes are found by the attempt id (in the
    /// contender node's name, in every node's shares), whichever session.
    pub(crate) fn orphaned(session: &Arc<Session>, orphan: Orphan) -> Self {
        Leftover {
            session: session.clone(),
            parent: orphan.parent,
            owner: orphan.owner,
            attempt: orphan.attempt,
            node: None,
            find_node: true,
            find_share: orphan.find_share,
            orphaned: true,
            share_at: None,
        }
    }

    /// Takes back in `session`, in the background, what an ended session
    /// handed over (see [`Leftover::orphaned`]): the backend's sessions
    /// adopt leftovers with it (see
    /// [`Adopt`](crate::conn::session::Adopt)).
    pub(crate) fn adopt(session: &Arc<Session>, orphan: Orphan) {
        tokio::spawn(Leftover::orphaned(session, orphan).take_back_retrying());
    }

    /// Hands this leftover to the backend's next session: its own ended.
    fn orphan(self) {
        tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, "the session ended first: the next session takes the acquisition's leftover back");
        let session = self.session.clone();
        session.orphan(self.into_orphan());
    }

    fn into_orphan(self) -> Orphan {
        Orphan {
            parent: self.parent,
            owner: self.owner,
            attempt: self.attempt,
            find_share: self.find_share,
        }
    }

    /// Takes this leftover of an ended session back in the backend's next
    /// session before the call that left it returns: the server may keep
    /// the ended session, and its nodes, while it still hears from the
    /// client, and the owner's other processes must not meet the call's
    /// node as a hold after it failed. A next session that cannot be made
    /// (the servers are slow or out of reach) is tried for again until the
    /// server has certainly ended the old one ([`Session::gone_by`]): a
    /// call that returned at its first failed connect would leave its node
    /// standing for the owner's other processes to join. The take-back in
    /// the next session has until then too (at least a quarter timeout);
    /// what is left after that goes on later or in the background.
    pub(crate) async fn in_next_session(self) {
        let bound = self.session.client.session_timeout();
        let deadline = self.session.gone_by().max(tokio::time::Instant::now() + bound);
        let Some(sessions) = self.session.sessions() else {
            return self.orphan();
        };
        let mut pause = LEFTOVER_PAUSE;
        let next = loop {
            match tokio::time::timeout_at(deadline, sessions.get()).await {
                Ok(Ok(next)) if !next.is_dead() => break next,
                Err(_) => return self.orphan(),
                Ok(Ok(_)) | Ok(Err(_)) => {}
            }
            if tokio::time::Instant::now() + pause >= deadline {
                return self.orphan();
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LEFTOVER_PAUSE_MAX);
        };
        let mut leftover = Leftover::orphaned(&next, self.into_orphan());
        let until = deadline.max(tokio::time::Instant::now() + bound / 4);
        match tokio::time::timeout_at(until, leftover.take_back()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) if is_session_end(&e) => leftover.orphan(),
            Ok(Err(_)) | Err(_) => leftover.spawn(),
        }
    }

    /// A contender node whose create failed without an answer that says it
    /// was not made: the server may have made it.
    pub(crate) fn unknown_node(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str) -> Self {
        Leftover {
            session: session.clone(),
            parent: parent.to_owned(),
            owner: owner.to_owned(),
            attempt: attempt.to_owned(),
            node: None,
            find_node: true,
            find_share: false,
            orphaned: false,
            share_at: None,
        }
    }

    /// A share of a hold this session has a node of, whose write failed
    /// without an answer that says it was not made.
    pub(crate) fn unknown_share(session: &Arc<Session>, parent: &str, owner: &str, attempt: &str) -> Self {
        Leftover {
            find_node: false,
            find_share: true,
            ..Self::unknown_node(session, parent, owner, attempt)
        }
    }

    /// Looks for a share joined to the hold too: a join failed.
    pub(crate) fn join_failed(&mut self) {
        self.find_share = true;
    }

    /// Takes the attempt's share out of the node at `path` too: a
    /// semaphore's or read-write lock's join of that node failed.
    pub(crate) fn joined_at(&mut self, path: &str) {
        self.share_at = Some(path.to_owned());
    }

    /// Only the contender node of `q`, as created: it joined another node
    /// of the attempt's owner (which may carry the same attempt, repeated).
    pub(crate) fn node_only(session: &Arc<Session>, q: &Queued, owner: &str, attempt: &str) -> Self {
        Leftover {
            find_node: false,
            ..Self::queued(session, q, owner, attempt)
        }
    }

    /// Whose shares this leftover is, and where.
    fn of(&self) -> AttemptOf<'_> {
        AttemptOf {
            parent: &self.parent,
            owner: &self.owner,
            attempt: &self.attempt,
        }
    }

    /// One try. Ok: nothing of this attempt is left (as far as it looks).
    /// Cancel safe: a try cut short leaves the leftover whole for the next.
    async fn take_back(&mut self) -> ZkResult<()> {
        let client = &self.session.client;
        if let Some((path, known)) = self.node.clone() {
            // Its own node, by path: the owner is checked, not the token (a
            // reader granted beside its owner's write hold carries that
            // hold's token, see `rwlock`).
            let edit = Edit {
                path: &path,
                owner: &self.owner,
                token: None,
                known: Some(known),
                change: Change::Remove(&self.attempt),
                list_after: None,
            };
            let removed = change(client, edit).await;
            self.node = None;
            if let Err(e) = removed {
                self.find_node = true;
                return Err(e);
            }
        }
        if let Some(path) = self.share_at.clone() {
            // A share a semaphore's or read-write lock's join may have added.
            let edit = Edit {
                path: &path,
                owner: &self.owner,
                token: None,
                known: None,
                change: Change::Remove(&self.attempt),
                list_after: None,
            };
            change(client, edit).await?;
            self.share_at = None;
        }
        if !self.find_node && !self.find_share {
            return Ok(());
        }
        // The server read from has applied whatever the leader did of a
        // write whose answer was lost.
        sync(client, &self.parent).await?;
        let stem = child_stem(owner_tag(&self.owner), &self.attempt);
        loop {
            let children = list(client, &self.parent).await?;
            if self.find_node {
                // Whichever session's: the attempt id names this call, and
                // a node of another session carrying it is one an earlier
                // session of this backend queued for it.
                let nodes = children.iter().filter(|c| c.starts_with(&stem));
                take_out_of(client, self.of(), nodes, None).await?;
            }
            if !self.find_share {
                return Ok(());
            }
            let Some(view) = read_hold(client, &self.parent, &children).await? else {
                continue;
            };
            if let View::Held(view) = view {
                let mine = view
                    .nodes
                    .iter()
                    .filter(|n| (self.orphaned || n.session == self.session.id) && n.known.data.has(&self.attempt));
                for n in mine {
                    let edit = Edit {
                        path: &n.path,
                        owner: &self.owner,
                        token: Some(view.token),
                        known: Some(n.known.clone()),
                        change: Change::Remove(&self.attempt),
                        list_after: None,
                    };
                    change(client, edit).await?;
                }
            }
            return Ok(());
        }
    }

    /// Takes the leftover back, trying again after an error while the
    /// session lives, at most [`LEFTOVER_TRIES`] times; each try waits for
    /// the connection to be up. If the session ends first, the backend's
    /// next session takes it back (see [`Leftover::orphaned`]).
    pub(crate) async fn take_back_retrying(mut self) {
        let session = self.session.clone();
        let mut pause = LEFTOVER_PAUSE;
        for tried in 1..=LEFTOVER_TRIES {
            if !session.until_connected().await {
                return self.orphan();
            }
            let result = tokio::select! {
                r = self.take_back() => r,
                _ = session.ended() => return self.orphan(),
            };
            match result {
                Ok(()) => {
                    if tried > 1 || self.orphaned {
                        tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, tried, orphaned = self.orphaned, "took a failed acquisition's node back");
                    }
                    return;
                }
                Err(e) if is_session_end(&e) => return self.orphan(),
                Err(error) if tried == LEFTOVER_TRIES => {
                    tracing::warn!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error, tried, "could not take a failed acquisition's node back; it goes with the session");
                }
                Err(error) => {
                    tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error, tried, "taking a failed acquisition's node back failed; trying again");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = session.ended() => return self.orphan(),
                    }
                    pause = (pause * 2).min(LEFTOVER_PAUSE_MAX);
                }
            }
        }
    }

    /// Takes the leftover back before the failing call returns: tried
    /// again while the connection is lost or slow, for up to one session
    /// timeout (the rest then goes on in the background). A slow connection
    /// (latency) or a suspended one keeps the session, and with it the
    /// call's node, on the server: left to the background, the node could
    /// come first in the queue after the call returned and stand as a hold
    /// of the owner that its other processes join. A session that ends meanwhile hands the leftover to the
    /// next one (see [`in_next_session`](Self::in_next_session)).
    pub(crate) async fn take_back_now(mut self) {
        if self.session.is_dead() {
            return self.in_next_session().await;
        }
        let bound = self.session.client.session_timeout();
        let started = tokio::time::Instant::now();
        let mut pause = LEFTOVER_PAUSE;
        loop {
            let left = bound.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, self.take_back()).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) if is_session_end(&e) => return self.in_next_session().await,
                Ok(Err(error)) if started.elapsed() + pause < bound => {
                    tracing::debug!(backend = BACKEND, parent = %self.parent, attempt = %self.attempt, %error,
                        "taking a failed acquisition's node back failed; trying again before the call returns");
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.session.ended() => return self.in_next_session().await,
                    }
                    pause = (pause * 2).min(LEFTOVER_PAUSE_MAX);
                }
                Ok(Err(_)) | Err(_) => return self.spawn(),
            }
        }
    }

    /// Takes the leftover back in the background.
    pub(crate) fn spawn(self) {
        if self.session.is_dead() {
            return self.orphan();
        }
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(self.take_back_retrying());
            }
            Err(_) => tracing::debug!(
                backend = BACKEND,
                "no runtime to delete a queued node; it goes with the session"
            ),
        }
    }
}
