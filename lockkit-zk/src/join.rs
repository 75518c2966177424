//! Joining the hold of this owner (re-entry across sessions): in this
//! session's node of the hold, or in a new share node of this session.

use std::sync::Arc;

use lockkit_core::raw::Lease;
use zookeeper_client::{Error as ZkError, MultiWriteError, MultiWriteResult};

use crate::backend::Inner;
use crate::change::{Change, Known, change};
use crate::claim::claim;
use crate::conn::session::Session;
use crate::error::is_connection_loss;
use crate::hold::{View, count_after, hold_of};
use crate::layout::{NodeData, node_name, owner_tag, share_name};
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
        let client = &session.client;
        loop {
            let epoch = session.epoch();
            let view = match hold_of(client, parent).await? {
                View::Held(view) => view,
                View::Foreign(path) => return Ok(Joined::Foreign(vec![node_name(&path).to_owned()])),
                View::Free => return Ok(Joined::Again),
            };
            if view.owner != owner {
                return Ok(Joined::Foreign(view.nodes.iter().map(|n| n.name.clone()).collect()));
            }
            if let Some(own) = view.nodes.iter().find(|n| n.session == session.id) {
                let (changed, listing) = change(
                    client,
                    &own.path,
                    owner,
                    Some(view.token),
                    Some(own.known.clone()),
                    Change::Add(attempt),
                    Some(parent),
                )
                .await?;
                let Some(node) = changed.and_then(|c| c.known()) else {
                    continue;
                };
                // This session's node of the hold may be the acquisition's
                // own contender node, come to hold since the plan (the
                // owner's node ahead went): it carries the attempt already,
                // so the change wrote nothing, and a node never written may
                // have been seen waiting. Claimed before it is used (see
                // `crate::claim`), or the waiter behind it could take it
                // for a dead waiter's.
                let Some(node) = claim(client, &own.path, &node, false).await? else {
                    return Ok(Joined::Again);
                };
                let own_data = Some(&node.data);
                let after = count_after(client, parent, &own.name, own_data, owner, view.token, listing).await?;
                let count = after.count;
                let lease = self.lease(session, name, owner, &own.path, node, count, &epoch);
                return Ok(Joined::Lease(lease, own.path.clone()));
            }
            let path = format!("{parent}/{}", share_name(owner_tag(owner), session.id));
            let data = NodeData {
                owner: owner.to_owned(),
                token: Some(view.token),
                attempts: vec![attempt.to_owned()],
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
                            None => continue,
                        },
                    };
                    let count = view.count_with(node_name(&path), Some(&data));
                    let node = Known {
                        data,
                        version: 0,
                        czxid,
                    };
                    let lease = self.lease(session, name, owner, &path, node, count, &epoch);
                    return Ok(Joined::Lease(lease, path));
                }
                // The marker is gone: this backend has moved on to a new
                // session.
                Err(MultiWriteError::OperationFailed { index: 0, .. }) if fenced => {
                    return Err(ZkError::SessionExpired);
                }
                // The checked node went or changed (look at the hold again),
                // or this session's share node exists already (a concurrent
                // attempt of this session made it: join that one).
                Err(MultiWriteError::OperationFailed {
                    source: ZkError::NoNode | ZkError::NodeExists | ZkError::BadVersion,
                    ..
                }) => {}
                Err(e) => match ZkError::from(e) {
                    // Made or not: the next reading says, once the server
                    // read from has caught up.
                    e if is_connection_loss(&e) => sync(client, parent).await?,
                    e => return Err(e),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use lockkit_core::raw::new_attempt_id;
    use zookeeper_client::Error as ZkError;

    use super::Joined;
    use crate::ZkBackend;
    use crate::layout::{Mark, owner_tag, parent_path};
    use crate::queue::enqueue;

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

        let ahead = enqueue(
            &other_session,
            &parent,
            "ahead",
            owner_tag("ahead"),
            &new_attempt_id(),
            Mark::Mutex,
        )
        .await
        .expect("the node ahead");
        let q = enqueue(&session, &parent, owner, owner_tag(owner), &attempt, Mark::Mutex)
            .await
            .expect("this acquisition's node");
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
