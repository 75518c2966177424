//! Extending: checking that a lease's session still has its node of the
//! hold (leases are the session's; there is no ttl to push back).

use lockkit_core::LockError;
use lockkit_core::raw::{ExtendOutcome, Hold};
use zookeeper_client::Error as ZkError;

use crate::backend::Inner;
use crate::conn::session::SESSION_RESTARTS;
use crate::error::{is_session_end, session_kept_ending, zk};
use crate::hold::{View, hold_of};
use crate::layout::parent_path;
use crate::queue::read;

impl Inner {
    pub(crate) async fn extend(&self, hold: &Hold) -> Result<ExtendOutcome, LockError> {
        let Ok(token) = i64::try_from(hold.token) else {
            return Ok(ExtendOutcome::NotHeld);
        };
        for _ in 0..SESSION_RESTARTS {
            let session = self.sessions.get().await?;
            let parent = parent_path(&hold.name);
            // The lease rests on this session's node of the hold.
            let checked = async {
                if let Some(h) = self.cached(&session, hold, token)
                    && let Some((Some(data), stat)) = read(&session.client, &h.path).await?
                    && data.owner == hold.owner
                    && data.hold_token(stat.czxid) == token
                {
                    return Ok(true);
                }
                Ok::<_, ZkError>(match hold_of(&session.client, &parent).await? {
                    View::Held(view) => {
                        view.owner == hold.owner
                            && view.token == token
                            && view.nodes.iter().any(|n| n.session == session.id)
                    }
                    _ => false,
                })
            };
            match checked.await {
                Ok(true) => return Ok(ExtendOutcome::Extended { valid_until: None }),
                Ok(false) => return Ok(ExtendOutcome::NotHeld),
                Err(e) if is_session_end(&e) => session.end(&e),
                Err(e) => return Err(zk("extend", Some(&hold.name), e)),
            }
        }
        Err(session_kept_ending("extend", &hold.name))
    }
}
