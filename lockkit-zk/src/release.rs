//! Releasing: taking an attempt's share of a hold back, from the cached
//! node in one round trip or from whichever node of the hold carries it;
//! and the operator's override, removing a hold whoever holds it.

use lockkit_core::raw::{Hold, ReleaseOutcome};
use lockkit_core::{LockError, LockInfo};

use crate::backend::Inner;
use crate::cache::Written;
use crate::change::{Change, Edit, Known, change};
use crate::conn::session::{SESSION_RESTARTS, Session};
use crate::error::{BACKEND, ForeignNode, is_session_end, session_kept_ending, zk};
use crate::hold::{DeleteError, HoldOf, View, count_after, delete_hold, hold_of};
use crate::layout::{Share, node_name, parent_path};
use crate::result::ZkResult;

impl Inner {
    /// Releases a hold whose acquirer stopped waiting for it.
    pub(crate) async fn release_orphan(&self, name: String, owner: String, token: u64, attempt: String) {
        let hold = Hold {
            name,
            owner,
            token,
            kind: lockkit_core::LockKind::Mutex,
        };
        match self.release(&hold, &attempt).await {
            Ok(outcome) => {
                tracing::debug!(backend = BACKEND, lock = %hold.name, ?outcome, "released an abandoned acquisition")
            }
            Err(error) => {
                tracing::warn!(backend = BACKEND, lock = %hold.name, %error, "could not release an abandoned acquisition; it ends with the session")
            }
        }
    }

    pub(crate) async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match self.release_in(&session, hold, token, attempt).await {
                Ok(outcome) => return Ok(outcome),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("release", Some(&hold.name), e)),
            }
        }
        Err(session_kept_ending("release", &hold.name))
    }

    /// Takes `attempt`'s share of `hold` back: from this session's node as
    /// last written (one round trip, the listing that tells whether other
    /// nodes carry the hold pipelined behind the write), or from whichever
    /// node of the hold carries it — and from every other node that carries
    /// it too (an attempt carried on in a new session, see
    /// [`HoldView::count`](crate::hold::HoldView::count)). A share already
    /// gone (a repeated release) changes nothing; the holds left are
    /// reported again.
    pub(crate) async fn release_in(
        &self,
        session: &Session,
        hold: &Hold,
        token: i64,
        attempt: &str,
    ) -> ZkResult<ReleaseOutcome> {
        let releasing = Releasing {
            inner: self,
            session,
            hold,
            token,
            attempt,
            parent: parent_path(&hold.name),
        };
        let mut next = self
            .cached(session, hold, token)
            .filter(|h| h.known.data.has(attempt))
            .map(|h| Carrier {
                path: h.path,
                known: h.known,
                mine: true,
                alone: h.alone,
            });
        let mut took = false;
        loop {
            let carrier = match next.take() {
                Some(carrier) => carrier,
                None => match releasing.carrier(took).await? {
                    Ok(carrier) => carrier,
                    Err(outcome) => return Ok(outcome),
                },
            };
            let Some((remaining, also)) = releasing.take_out(carrier).await? else {
                continue;
            };
            took = true;
            match also {
                Some(carrier) => next = Some(carrier),
                None => return Ok(ReleaseOutcome::Released { remaining }),
            }
        }
    }

    /// Removes the hold on `name` whoever holds it (every node of the
    /// hold); what was removed.
    pub(crate) async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match delete_hold(&session, name).await {
                Ok(Some((paths, info))) => {
                    for path in &paths {
                        self.forget(name, path);
                    }
                    tracing::warn!(backend = BACKEND, lock = %name, owner = %info.owner, token = info.token, nodes = paths.len(), "lock force-released");
                    return Ok(Some(info));
                }
                Ok(None) => return Ok(None),
                Err(DeleteError::Zk(e)) if is_session_end(&e) => session.end(&e),
                Err(DeleteError::Zk(e)) => return Err(zk("force_release", Some(name), e)),
                Err(DeleteError::Foreign(path)) => {
                    return Err(LockError::backend(
                        BACKEND,
                        "force_release",
                        Some(name),
                        false,
                        ForeignNode { path },
                    ));
                }
            }
        }
        Err(session_kept_ending("force_release", name))
    }
}

/// A node of a hold that carries the share being released.
struct Carrier {
    path: String,
    /// As last known.
    known: Known,
    /// This session's node.
    mine: bool,
    /// It carried the hold alone as of this session's last write (see
    /// [`HeldNode::alone`](crate::held::HeldNode::alone)).
    alone: bool,
}

/// One release of `attempt`'s share of `hold` (its token `token`, under
/// `parent`) in `session` (see [`Inner::release_in`]).
struct Releasing<'a> {
    inner: &'a Inner,
    session: &'a Session,
    hold: &'a Hold,
    token: i64,
    attempt: &'a str,
    parent: String,
}

impl Releasing<'_> {
    /// The node of the hold, as read now, that carries the share. `Err`:
    /// none does, the outcome (`took`: the release took a share out of a
    /// node already).
    async fn carrier(&self, took: bool) -> ZkResult<Result<Carrier, ReleaseOutcome>> {
        let (session, hold) = (self.session, self.hold);
        match hold_of(&session.client, &self.parent).await? {
            View::Held(view) if view.owner == hold.owner && view.token == self.token => {
                match view.nodes.iter().find(|n| n.known.data.has(self.attempt)) {
                    Some(n) => Ok(Ok(Carrier {
                        path: n.path.clone(),
                        known: n.known.clone(),
                        mine: n.session == session.id,
                        alone: false,
                    })),
                    None => Ok(Err(ReleaseOutcome::Released {
                        remaining: view.count(),
                    })),
                }
            }
            _ if took => Ok(Err(ReleaseOutcome::Released { remaining: 0 })),
            _ => Ok(Err(ReleaseOutcome::NotHeld)),
        }
    }

    /// Takes the share out of `carrier`: the holds left, and another node
    /// that carries the share too (an attempt carried on in a new session).
    /// `None`: that node is gone — the hold may stand on others.
    async fn take_out(&self, carrier: Carrier) -> ZkResult<Option<(u32, Option<Carrier>)>> {
        let (client, hold, token) = (&self.session.client, self.hold, self.token);
        let Carrier {
            path,
            known,
            mine,
            alone,
        } = carrier;
        // Alone (the common case), the release is the versioned write
        // alone: nobody wrote the node since, so no other node carries
        // the hold. Otherwise a listing behind it tells.
        let edit = Edit {
            path: &path,
            owner: &hold.owner,
            token: Some(token),
            known: Some(known),
            change: Change::Remove(self.attempt),
            list_after: (!alone).then_some(self.parent.as_str()),
        };
        let (changed, listing) = change(client, edit).await?;
        let Some(changed) = changed else {
            self.inner.forget(&hold.name, &path);
            return Ok(None);
        };
        if changed.node.is_none() {
            self.session.released(&path);
        }
        let own = changed.count();
        let (remaining, view) = if alone && !changed.raced {
            (own, None)
        } else {
            let own_data = changed.node.as_ref().map(|(data, _)| data);
            let of = HoldOf {
                parent: &self.parent,
                owner: &hold.owner,
                token,
            };
            let after = count_after(client, of, node_name(&path), own_data, listing).await?;
            (after.count, after.view)
        };
        if mine {
            let alone = Share::parse(node_name(&path)).is_none() && remaining == own;
            self.inner.remember(Written {
                name: &hold.name,
                path: &path,
                owner: &hold.owner,
                known: changed.known(),
                session: self.session.id,
                alone,
            });
        }
        let also = view.and_then(|v| {
            v.nodes
                .into_iter()
                .find(|n| n.path != path && n.known.data.has(self.attempt))
        });
        let also = also.map(|n| Carrier {
            mine: n.session == self.session.id,
            path: n.path,
            known: n.known,
            alone: false,
        });
        Ok(Some((remaining, also)))
    }
}
