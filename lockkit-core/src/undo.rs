//! Taking back the share of an acquisition that failed but may have taken
//! effect.
//!
//! A `lock`/`try_lock` that ends in a retryable error — a reply lost to a
//! timeout or a broken connection — may have been granted on the server
//! all the same. Nobody holds a guard for that share, and the owner's next
//! acquisition of the name would re-enter it and keep it alive for as long
//! as the owner keeps the name. So the client takes it back in the
//! background: it looks up the owner's hold and releases this attempt's
//! share of it (a no-op where the attempt never landed: releases are
//! idempotent by attempt id). The first look is made before the error is
//! returned, so a caller that tries again at once does not re-enter the
//! stray share; a command still in flight can land after a look, so the
//! look is repeated in the background until the lease has certainly run
//! out.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::{Hold, LockBackend, LockKind, ReleaseOutcome};
use crate::backoff::Backoff;

/// How many looks the undo takes, spread over the lease.
const LOOKS: u32 = 3;

/// The longest the first look may delay the failed call's error.
const FIRST_LOOK: Duration = Duration::from_secs(1);

/// Takes back `attempt`'s share of `owner`'s hold on `name`, if it landed:
/// one look before returning (bounded by [`FIRST_LOOK`] and a third of the
/// lease — so a caller that retries at once does not re-enter the stray
/// share), the rest in a background task that ends by itself within about
/// `ttl` (plus retries of looks that failed, for at most another `ttl`).
pub(crate) async fn undo_failed_attempt(
    backend: Arc<dyn LockBackend>,
    name: String,
    owner: String,
    kind: LockKind,
    attempt: String,
    ttl: Duration,
) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let gap = ttl / LOOKS;
    // One task does every look, so dropping the caller mid-look stops none.
    let (first_done, first) = tokio::sync::oneshot::channel::<()>();
    runtime.spawn(async move {
        let give_up = tokio::time::Instant::now() + ttl * 2;
        let mut first_done = Some(first_done);
        for look in 0..LOOKS {
            if look > 0 {
                tokio::time::sleep(gap).await;
            }
            let mut backoff = Backoff::new(Duration::from_millis(20), gap.max(Duration::from_millis(100)));
            loop {
                match take_back(backend.as_ref(), &name, &owner, kind, &attempt).await {
                    Ok(Some(remaining)) => {
                        tracing::debug!(backend = backend.name(), lock = %name, remaining,
                            "took back the share of an acquisition that failed but had been granted");
                        break;
                    }
                    Ok(None) => break,
                    Err(e) if tokio::time::Instant::now() < give_up => {
                        tracing::debug!(backend = backend.name(), lock = %name, error = %e,
                            "looking for the share of a failed acquisition failed; trying again");
                        tokio::time::sleep(backoff.next_delay()).await;
                    }
                    Err(e) => {
                        tracing::warn!(backend = backend.name(), lock = %name, error = %e,
                            "could not check for the share of a failed acquisition; it ends with its lease");
                        return;
                    }
                }
            }
            if let Some(done) = first_done.take() {
                let _ = done.send(());
            }
        }
    });
    let _ = tokio::time::timeout(FIRST_LOOK.min(gap), first).await;
}

/// One look: `Some(holds left)` if the owner holds the name (this attempt's
/// share, if it was there, is gone now), `None` if it does not. Every hold
/// of the owner gets the release: only the one carrying the attempt's
/// share changes (a semaphore's permits are holds of their own).
async fn take_back(
    backend: &dyn LockBackend,
    name: &str,
    owner: &str,
    kind: LockKind,
    attempt: &str,
) -> Result<Option<u32>, crate::LockError> {
    let mut left = None;
    for info in backend.holders(name, kind).await? {
        if info.owner != owner {
            continue;
        }
        let hold = Hold {
            name: name.to_owned(),
            owner: owner.to_owned(),
            token: info.token,
            kind,
        };
        if let ReleaseOutcome::Released { remaining } = backend.release(&hold, attempt).await? {
            left = Some(left.unwrap_or(0) + remaining);
        }
    }
    Ok(left)
}
