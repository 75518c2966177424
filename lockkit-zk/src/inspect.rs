//! Inspection: `inspect`, `list` and the holder watch (the operator's
//! `force_release` is a release, in `release`).

use lockkit_core::{LockError, LockInfo};
use std::time::Duration;

use lockkit_core::raw::HolderWatch;

use crate::backend::Inner;
use crate::conn::session::SESSION_RESTARTS;
use crate::error::{BACKEND, ForeignNode, is_connection_loss, is_session_end, session_kept_ending, zk};
use crate::hold::{View, hold_of, list_held};
use crate::layout::parent_path;
use crate::queue::sync;
use zookeeper_client::Error as ZkError;

impl Inner {
    /// A watch on the holder of `name` (see `LockBackend::watch_holder`):
    /// a children watch on its parent, which fires when a contender or a
    /// share node comes or goes — a grant follows the node before it going,
    /// an expiry is its session's nodes going — or, while the name has no
    /// parent, a watch on the parent's creation.
    pub(crate) async fn watch_holder(&self, name: &str, within: Duration) -> Result<HolderWatch, LockError> {
        let parent = parent_path(name);
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let client = &session.client;
            let armed = match client.list_and_watch_children(&parent).await {
                Ok((_, watcher)) => Ok(watcher),
                Err(ZkError::NoNode) => client.check_and_watch_stat(&parent).await.map(|(_, watcher)| watcher),
                Err(e) => Err(e),
            };
            match armed {
                Ok(watcher) => {
                    return Ok(Box::pin(async move {
                        tokio::select! {
                            _ = watcher.changed() => {}
                            _ = tokio::time::sleep(within) => {}
                        }
                    }));
                }
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("watch", Some(name), e)),
            }
        }
        Err(session_kept_ending("watch", name))
    }

    pub(crate) async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let parent = parent_path(name);
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            // The server read from (a follower of an ensemble) has applied
            // every write the leader committed before: a release another
            // client saw answered is seen here too.
            let read = async {
                match sync(&session.client, &parent).await {
                    Ok(()) | Err(ZkError::NoNode) => {}
                    Err(e) => return Err(e),
                }
                hold_of(&session.client, &parent).await
            };
            match read.await {
                Ok(View::Free) => return Ok(None),
                // Held as another kind: its line names the first hold. Gone
                // meanwhile: look again.
                Ok(View::Kind) => match self.first_hold_kind(name).await? {
                    Some(info) => return Ok(Some(info)),
                    None => continue,
                },
                Ok(View::Held(view)) => return Ok(Some(view.info(name))),
                Ok(View::Foreign(path)) => {
                    return Err(LockError::backend(
                        BACKEND,
                        "inspect",
                        Some(name),
                        false,
                        ForeignNode { path },
                    ));
                }
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("inspect", Some(name), e)),
            }
        }
        Err(session_kept_ending("inspect", name))
    }

    pub(crate) async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            match list_held(&session, prefix, limit).await {
                Ok(held) => return Ok(held),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) if is_connection_loss(&e) => {}
                Err(e) => return Err(zk("list", None, e)),
            }
        }
        Err(LockError::backend(
            BACKEND,
            "list",
            None,
            true,
            "the ZooKeeper connection was lost again and again",
        ))
    }
}
