//! A semaphore's permits and a read-write lock's holds once granted:
//! release, extension (the session's lease: the hold stands while its node
//! does), and who holds or waits.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::backend::{ExtendOutcome, Hold, LockInfo, LockKind, ReleaseOutcome};

use crate::backend::Inner;
use crate::change::{Change, change};
use crate::conn::{SESSION_RESTARTS, Session};
use crate::error::{is_session_end, session_kept_ending, zk};
use crate::layout::kind_parent;
use crate::line::{line_of, line_synced};
use crate::queue::ZkResult;

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
        let parent = kind_parent(&hold.name, hold.kind);
        self.in_sessions("release", &hold.name, |session| {
            let parent = &parent;
            Box::pin(async move {
                loop {
                    let line = line_of(&session.client, parent, hold.kind).await?;
                    let Some(i) = line.find(hold, session.id) else {
                        return Ok(ReleaseOutcome::NotHeld);
                    };
                    let e = &line.entries[i];
                    let (known, remove) = (Some(e.known.clone()), Change::Remove(attempt));
                    let (changed, _) = change(&session.client, &e.path, &hold.owner, None, known, remove, None).await?;
                    // `None`: gone meanwhile, look again.
                    if let Some(c) = changed {
                        if c.node.is_none() {
                            session.released(&e.path);
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
        let parent = kind_parent(&hold.name, hold.kind);
        self.in_sessions("extend", &hold.name, |session| {
            let parent = &parent;
            Box::pin(async move {
                let line = line_of(&session.client, parent, hold.kind).await?;
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
        let parent = kind_parent(name, kind);
        self.in_sessions("holders", name, |session| {
            let parent = &parent;
            Box::pin(async move { Ok(line_synced(&session.client, parent, kind).await?.holders(name, kind)) })
        })
        .await
    }

    /// How many wait in the line of `name` of `kind`.
    pub(crate) async fn waiting_kind(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let parent = kind_parent(name, kind);
        self.in_sessions("waiting", name, |session| {
            let parent = &parent;
            Box::pin(async move { Ok(line_synced(&session.client, parent, kind).await?.waiting()) })
        })
        .await
    }
}
