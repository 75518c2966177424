//! Releasing on one Redis: one share of a hold, sent again when its reply
//! was lost; and the operator's override, a hold removed whoever holds it.

use lockkit_core::raw::{Hold, ReleaseOutcome};
use lockkit_core::{LockError, LockInfo, LockKind};

use crate::backend::RedisBackend;
use crate::scripts::{self, ReleaseOf, Released, Telling};

/// How often a release whose reply was lost is sent (it is idempotent by
/// its attempt id).
const RELEASE_TRIES: u32 = 3;

impl RedisBackend {
    /// The body of [`LockBackend::release`](lockkit_core::raw::LockBackend::release)
    /// (its behaviour is documented on the impl in `backend`).
    pub(crate) async fn release_share(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        let (mut lost_try, mut tries) = (false, 1);
        let of = ReleaseOf::new(hold, attempt);
        loop {
            // Only the kinds' turn messages carry a nonce.
            let nonce = if hold.kind == LockKind::Mutex {
                String::new()
            } else {
                scripts::nonce()
            };
            let telling = Telling {
                publish: self.inner.publish,
                queued: self.inner.waiters.waiter_id().is_some(),
                nonce: &nonce,
            };
            let r = scripts::release(&mut self.inner.conn.clone(), &self.inner.keys, &of, &telling).await;
            if let Ok(Released {
                published: Some(message),
                ..
            }) = &r
            {
                self.inner
                    .waiters
                    .deliver_locally(&self.inner.keys.holds(&hold.name, hold.kind), message);
            }
            match r.map(|r| r.remaining) {
                Ok(Some(remaining)) => return Ok(ReleaseOutcome::Released { remaining }),
                Ok(None) if lost_try => return Ok(ReleaseOutcome::Released { remaining: 0 }),
                Ok(None) => return Ok(ReleaseOutcome::NotHeld),
                Err(f) if f.retryable() && tries < RELEASE_TRIES => {
                    tracing::debug!(lock = %hold.name, error = %f, "release reply lost; sending it again");
                    (lost_try, tries) = (true, tries + 1);
                }
                Err(f) => return Err(self.error("release", &hold.name, f)),
            }
        }
    }

    /// Removes the hold on `name` whoever holds it: the operator's
    /// override; what was removed.
    pub(crate) async fn force_release_name(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let removed = scripts::force_release(&mut self.inner.conn.clone(), &self.inner.keys, name, self.inner.publish)
            .await
            .map_err(|f| self.error("force_release", name, f))?;
        Ok(removed.map(|s| s.into_info(name)))
    }
}
