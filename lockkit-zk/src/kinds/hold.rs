//! A semaphore's permits and a read-write lock's holds once granted:
//! release, extension (the session's lease: the hold stands while its node
//! does), and who holds or waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lockkit_core::raw::{ExtendOutcome, Hold, ReleaseOutcome};
use lockkit_core::{LockError, LockInfo, LockKind};

use super::line::{Scope, line_of, line_synced};
use crate::backend::Inner;
use crate::change::{Change, Edit, change};
use crate::conn::session::{SESSION_RESTARTS, Session};
use crate::error::{is_session_end, session_kept_ending, zk};
use crate::layout::{beside_name, node_name, owner_tag, parent_path};
use crate::result::ZkResult;

/// Deletes the beside marker of the released reader `reader` under
/// `parent`, once: left behind (the answer lost) it is only ignored — a
/// marker counts while its reader's node stands — until its session ends.
async fn drop_marker(client: &zookeeper_client::Client, parent: &str, reader: &str) {
    let marker = format!("{parent}/{}", beside_name(reader));
    if let Err(error) = client.delete(&marker, None).await {
        tracing::debug!(backend = crate::error::BACKEND, %marker, %error, "beside marker left to its session");
    }
}

/// The work of one operation in one session.
type Work<'a, T> = Pin<Box<dyn Future<Output = ZkResult<T>> + Send + 'a>>;

impl Inner {
    /// Runs `op` in the live session, starting over in a new one when the
    /// session ends under it.
    async fn in_sessions<'a, T>(
        &self,
        operation: &'static str,
        name: &str,
        mut op: impl FnMut(Arc<Session>) -> Work<'a, T>,
    ) -> Result<T, LockError> {
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match op(session.clone()).await {
                Ok(out) => return Ok(out),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk(operation, Some(name), e)),
            }
        }
        Err(session_kept_ending(operation, name))
    }

    /// Takes `attempt`'s share of `hold` (a permit, a read or a write hold)
    /// back, deleting its node with the last share; a share already gone
    /// changes nothing and reports the shares left.
    pub(crate) async fn release_kind(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let parent = parent_path(&hold.name);
        let tag = owner_tag(&hold.owner);
        let key = (
            parent.clone(),
            hold.owner.clone(),
            hold.token as i64,
            hold.kind == LockKind::Read,
        );
        self.in_sessions("release", &hold.name, |session| {
            let (parent, key) = (&parent, &key);
            Box::pin(async move {
                // This session's node as recorded: one versioned write.
                if let Some(h) = self.cached_kind(&session, key) {
                    let edit = Edit {
                        path: &h.path,
                        owner: &hold.owner,
                        token: None,
                        known: Some(h.known.clone()),
                        change: Change::Remove(attempt),
                        list_after: None,
                    };
                    let (changed, _) = change(&session.client, edit).await?;
                    if let Some(c) = changed {
                        match c.known() {
                            Some(known) => self.remember_kind(key.clone(), &h.path, &known, session.id),
                            None => {
                                self.forget_kind(key);
                                session.released(&h.path);
                                if h.known.data.token.is_some() && hold.kind == LockKind::Read {
                                    drop_marker(&session.client, parent, node_name(&h.path)).await;
                                }
                            }
                        }
                        return Ok(ReleaseOutcome::Released { remaining: c.count() });
                    }
                    self.forget_kind(key);
                }
                loop {
                    let line = line_of(&session.client, parent, hold.kind, Scope::Owner(tag)).await?;
                    let Some(i) = line.find(hold, session.id) else {
                        return Ok(ReleaseOutcome::NotHeld);
                    };
                    let e = &line.entries[i];
                    let Some(node) = &e.node else { continue };
                    let edit = Edit {
                        path: &e.path,
                        owner: &hold.owner,
                        token: None,
                        known: Some(node.known.clone()),
                        change: Change::Remove(attempt),
                        list_after: None,
                    };
                    let (changed, _) = change(&session.client, edit).await?;
                    // `None`: gone meanwhile, look again.
                    if let Some(c) = changed {
                        if c.node.is_none() {
                            self.forget_kind(key);
                            session.released(&e.path);
                            if e.beside {
                                drop_marker(&session.client, parent, &e.child.name).await;
                            }
                        }
                        return Ok(ReleaseOutcome::Released { remaining: c.count() });
                    }
                }
            })
        })
        .await
    }

    /// Whether `hold` still stands: its node does (and so its session).
    pub(crate) async fn extend_kind(&self, hold: &Hold) -> Result<ExtendOutcome, LockError> {
        let parent = parent_path(&hold.name);
        let tag = owner_tag(&hold.owner);
        self.in_sessions("extend", &hold.name, |session| {
            let parent = &parent;
            Box::pin(async move {
                let line = line_of(&session.client, parent, hold.kind, Scope::Owner(tag)).await?;
                Ok(match line.find(hold, session.id) {
                    Some(_) => ExtendOutcome::Extended { valid_until: None },
                    None => ExtendOutcome::NotHeld,
                })
            })
        })
        .await
    }

    /// The holds of `kind` on `name`, in the order granted.
    pub(crate) async fn holders_kind(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        let parent = parent_path(name);
        self.in_sessions("holders", name, |session| {
            let parent = &parent;
            Box::pin(async move {
                Ok(line_synced(&session.client, parent, kind, Scope::All)
                    .await?
                    .holders(name, kind))
            })
        })
        .await
    }

    /// The first hold on `name` of a semaphore or read-write lock, whatever
    /// its kind (`None`: none stands now).
    pub(crate) async fn first_hold_kind(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let parent = parent_path(name);
        self.in_sessions("inspect", name, |session| {
            let parent = &parent;
            Box::pin(async move {
                Ok(line_synced(&session.client, parent, LockKind::Write, Scope::All)
                    .await?
                    .first_hold(name))
            })
        })
        .await
    }

    /// How many wait in the line of `name` of `kind`.
    pub(crate) async fn waiting_kind(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let parent = parent_path(name);
        self.in_sessions("waiting", name, |session| {
            let parent = &parent;
            Box::pin(async move {
                Ok(line_synced(&session.client, parent, kind, Scope::Grants)
                    .await?
                    .waiting(kind))
            })
        })
        .await
    }
}
