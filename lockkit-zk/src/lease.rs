//! The lease handed out for a mutex's hold ([`Inner::lease`]): on this
//! session's node of the hold ([`LeaseOf`]), recorded in the held-node
//! cache for re-entry and release.

use std::sync::Arc;

use lockkit_core::raw::Lease;
use tokio_util::sync::CancellationToken;

use crate::backend::Inner;
use crate::cache::Written;
use crate::change::Known;
use crate::conn::session::Session;
use crate::layout::{Share, node_name};

/// What a lease rests on: `owner`'s hold of `name`, through this session's
/// node of it at `path` (as `node` now), with the hold count `count` over
/// all the hold's nodes.
pub(crate) struct LeaseOf<'a> {
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) path: &'a str,
    pub(crate) node: Known,
    pub(crate) count: u32,
}

impl Inner {
    /// A lease on the hold `of` names, lost with the connection epoch
    /// `epoch` (the one its node was proven in) or the node's going.
    pub(crate) fn lease(&self, session: &Arc<Session>, of: LeaseOf<'_>, epoch: &CancellationToken) -> Lease {
        let LeaseOf {
            name,
            owner,
            path,
            node,
            count,
        } = of;
        let (token, czxid) = (node.token(), node.czxid);
        // Alone: a contender node that carries the whole count.
        let alone = Share::parse(node_name(path)).is_none() && count == node.data.count();
        self.remember(Written {
            name,
            path,
            owner,
            known: Some(node),
            session: session.id,
            alone,
        });
        Lease {
            token: token as u64,
            hold_count: count,
            valid_until: None,
            lost: Some(session.lease_token(path, czxid, epoch)),
            session_deadline: Some(session.deadline.clone()),
        }
    }
}
