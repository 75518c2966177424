//! Joining the hold of this owner (re-entry across sessions): in this
//! session's node of the hold, or in a new share node of this session.

use std::sync::Arc;

use lockkit_core::raw::Lease;
use tokio_util::sync::CancellationToken;
use zookeeper_client::{Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::backend::Inner;
use crate::change::{Change, Edit, Known, change};
use crate::claim::claim;
use crate::conn::session::Session;
use crate::error::is_connection_loss;
use crate::hold::{HoldNode, HoldOf, HoldView, View, count_after, hold_of};
use crate::layout::{NodeData, node_name, owner_tag, share_name};
use crate::lease::LeaseOf;
use crate::queue::{read, sync};
use crate::result::ZkResult;

/// How joining the hold of this owner ended.
pub(crate) enum Joined {
    /// Joined, with this session's node of the hold at this path.
    Lease(Lease, String),
    /// The hold's nodes carry this owner's tag but another owner's data:
    /// these nodes are not this owner's.
    Foreign(Vec<String>),
    /// The hold changed meanwhile: plan again on a new listing.
    Again,
}

impl Inner {
    /// Joins the hold of `owner` on `name` with `attempt`'s share: in this
    /// session's node of the hold if it has one (a versioned write), or else
    /// in a new share node of this session, created in one `multi` with a
    /// check that a node of the hold still stands — so the share never
    /// outlives the hold it joins without carrying it on.
    pub(crate) async fn join(
        &self,
        session: &Arc<Session>,
        name: &str,
        owner: &str,
        attempt: &str,
        parent: &str,
    ) -> ZkResult<Joined> {
        let joining = Joining {
            inner: self,
            session,
            name,
            owner,
            attempt,
            parent,
        };
        loop {
            let epoch = session.epoch();
            let view = match hold_of(&session.client, parent).await? {
                View::Held(view) => view,
                View::Foreign(path) => return Ok(Joined::Foreign(vec![node_name(&path).to_owned()])),
                View::Free | View::Kind => return Ok(Joined::Again),
            };
            if view.owner != owner {
                return Ok(Joined::Foreign(view.nodes.iter().map(|n| n.name.clone()).collect()));
            }
            let joined = match view.nodes.iter().find(|n| n.session == session.id) {
                Some(own) => joining.in_own_node(&view, own, &epoch).await?,
                None => joining.in_share_node(&view, &epoch).await?,
            };
            if let Some(joined) = joined {
                return Ok(joined);
            }
        }
    }
}

/// One join of `owner`'s hold on `name` (under `parent`) with `attempt`'s
/// share, in `session` (see [`Inner::join`]).
struct Joining<'a> {
    inner: &'a Inner,
    session: &'a Arc<Session>,
    name: &'a str,
    owner: &'a str,
    attempt: &'a str,
    parent: &'a str,
}

impl Joining<'_> {
    /// Joins in `own`, this session's node of the hold `view` (read in
    /// `epoch`): the share is added with a versioned write. `None`: the
    /// node went meanwhile, look at the hold again.
    async fn in_own_node(
        &self,
        view: &HoldView,
        own: &HoldNode,
        epoch: &CancellationToken,
    ) -> ZkResult<Option<Joined>> {
        let (client, owner, parent) = (&self.session.client, self.owner, self.parent);
        let edit = Edit {
            path: &own.path,
            owner,
            token: Some(view.token),
            known: Some(own.known.clone()),
            change: Change::Add(self.attempt),
            list_after: Some(parent),
        };
        let (changed, listing) = change(client, edit).await?;
        let Some(node) = changed.and_then(|c| c.known()) else {
            return Ok(None);
        };
        // This session's node of the hold may be the acquisition's own
        // contender node, come to hold since the plan (the owner's node
        // ahead went): it carries the attempt already, so the change wrote
        // nothing, and a node never written may have been seen waiting.
        // Claimed before it is used (see `crate::claim`), or the waiter
        // behind it could take it for a dead waiter's.
        let Some(node) = claim(client, &own.path, &node, false).await? else {
            return Ok(Some(Joined::Again));
        };
        let hold = HoldOf {
            parent,
            owner,
            token: view.token,
        };
        let after = count_after(client, hold, &own.name, Some(&node.data), listing).await?;
        let of = LeaseOf {
            name: self.name,
            owner,
            path: &own.path,
            node,
            count: after.count,
        };
        let lease = self.inner.lease(self.session, of, epoch);
        Ok(Some(Joined::Lease(lease, own.path.clone())))
    }

    /// Joins with a share node of this session, which has no node of the
    /// hold `view` (read in `epoch`). `None`: the hold changed meanwhile,
    /// or the share node's create is in doubt — look at the hold again.
    async fn in_share_node(&self, view: &HoldView, epoch: &CancellationToken) -> ZkResult<Option<Joined>> {
        let (session, client, owner) = (self.session, &self.session.client, self.owner);
        let path = format!("{}/{}", self.parent, share_name(owner_tag(owner), session.id));
        let data = NodeData {
            owner: owner.to_owned(),
            token: Some(view.token),
            attempts: vec![self.attempt.to_owned()],
        };
        // The write to a node of the hold (its data as it is, under its
        // version) makes sure that node stands, and bumps its version:
        // its holder's next versioned write notices that the hold has
        // another node now (see `HeldNode::alone`).
        let checked = &view.nodes[0];
        // And this session's marker stands (see `conn::session::SESSIONS`).
        let mut multi = client.new_multi_writer();
        let fenced = session.marker.is_some();
        if let Some(marker) = &session.marker {
            multi.add_check_version(marker, -1)?;
        }
        multi.add_set_data(&checked.path, &checked.known.data.encode(), Some(checked.known.version))?;
        multi.add_create(&path, &data.encode(), &session.share_options())?;
        match multi.commit().await {
            Ok(results) => {
                let czxid = match results.last() {
                    Some(MultiWriteResult::Create { stat, .. }) if !stat.is_invalid() => stat.czxid,
                    // Some servers answer a create in a multi without its stat.
                    _ => match read(client, &path).await? {
                        Some((_, stat)) => stat.czxid,
                        None => return Ok(None),
                    },
                };
                let count = view.count_with(node_name(&path), Some(&data));
                let node = Known {
                    data,
                    version: 0,
                    czxid,
                };
                let of = LeaseOf {
                    name: self.name,
                    owner,
                    path: &path,
                    node,
                    count,
                };
                let lease = self.inner.lease(session, of, epoch);
                Ok(Some(Joined::Lease(lease, path)))
            }
            // The marker is gone: this backend has moved on to a new
            // session.
            Err(MultiWriteError::OperationFailed { index: 0, .. }) if fenced => Err(ZkError::SessionExpired),
            // The checked node went or changed (look at the hold again),
            // or this session's share node exists already (a concurrent
            // attempt of this session made it: join that one).
            Err(MultiWriteError::OperationFailed {
                source: ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion,
                ..
            }) => Ok(None),
            Err(e) => match ZkError::from(e) {
                // Made or not: the next reading says, once the server
                // read from has caught up.
                e if is_connection_loss(&e) => sync(client, self.parent).await.map(|()| None),
                e => Err(e),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use lockkit_core::raw::new_attempt_id;
    use zookeeper_client::Error as ZkError;

    use super::Joined;
    use crate::ZkBackend;
    use crate::enqueue::{Contender, enqueue};
    use crate::layout::{Mark, parent_path};

    /// The owner's node ahead goes between an acquisition's plan ("join
    /// the owner's hold") and its join, so the hold the join finds is the
    /// acquisition's own contender node, which carries its attempt already
    /// and was seen waiting behind another owner's node. The lease it gets
    /// rests on that node: it must be claimed, so that the delete a waiter
    /// behind sends for a dead waiter's node (at version 0) fails.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_join_that_finds_its_own_waiting_node_holding_claims_it() {
        let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_ZK_URL") else {
            return;
        };
        let mine = ZkBackend::from_url(&url).await.expect("connect");
        let other = ZkBackend::from_url(&url).await.expect("connect");
        let (inner, others) = (mine.inner(), other.inner());
        let session = inner.sessions.get().await.expect("session");
        let other_session = others.sessions.get().await.expect("session");
        let name = format!("lockkit-unit/join-own/{}", new_attempt_id());
        let parent = parent_path(&name);
        let (owner, attempt) = ("join-own", new_attempt_id());

        let ahead = Contender {
            parent: &parent,
            owner: "ahead",
            attempt: &new_attempt_id(),
            mark: Mark::Mutex,
        };
        let ahead = enqueue(&other_session, ahead).await.expect("the node ahead");
        let own = Contender {
            parent: &parent,
            owner,
            attempt: &attempt,
            mark: Mark::Mutex,
        };
        let q = enqueue(&session, own).await.expect("this acquisition's node");
        assert!(
            q.queue.len() == 2 && q.queue[0].name != q.me.name,
            "it waits behind the node ahead"
        );
        other_session
            .client
            .delete(&ahead.path, None)
            .await
            .expect("the node ahead goes");

        let joined = inner
            .join(&session, &name, owner, &attempt, &parent)
            .await
            .expect("join");
        let Joined::Lease(lease, path) = joined else {
            panic!("the join takes the hold its own node carries");
        };
        assert_eq!(path, q.path, "the lease rests on the acquisition's own node");
        assert_eq!(lease.hold_count, 1);
        assert_eq!(
            other_session.client.delete(&q.path, Some(0)).await,
            Err(ZkError::BadVersion),
            "a dead waiter's delete of the holding node fails: it is claimed"
        );
        session.client.delete(&q.path, None).await.expect("clean up");
    }
}
