//! `wait_replicas`: an acquisition or extension followed by `WAIT`, and
//! what too few acknowledgements make of it.

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::raw::{Hold, LockBackend};

use crate::backend::{Inner, RedisBackend};
use crate::error::{Fault, ReplicasError};
use crate::scripts::{self, AcquireReply, Claim, Replicas};

/// One acquisition attempt followed by `WAIT` (in the same round trip): a
/// hold (new, re-entered or repeated) that fewer than `replicas.n` replicas
/// acknowledged is taken back — this attempt's share, by its id — and the
/// attempt fails with a retryable [`ReplicasError`].
pub(crate) async fn acquire_replicated(
    inner: &Arc<Inner>,
    claim: &Claim<'_>,
    replicas: Replicas,
) -> Result<AcquireReply, Fault> {
    let mut conn = inner.conn.clone();
    let (reply, acked) = scripts::acquire_replicated(&mut conn, &inner.keys, claim, replicas).await?;
    let Claim {
        name,
        owner,
        attempt,
        kind,
        ..
    } = *claim;
    let AcquireReply::Acquired { token, .. } = reply else {
        return Ok(reply);
    };
    if acked >= replicas.n {
        return Ok(reply);
    }
    let hold = Hold {
        name: name.to_owned(),
        owner: owner.to_owned(),
        token,
        kind,
    };
    let backend = RedisBackend { inner: inner.clone() };
    match backend.release(&hold, attempt).await {
        Ok(_) => {
            tracing::debug!(lock = %name, acked, asked = replicas.n, "took back an acquisition too few replicas acknowledged")
        }
        Err(e) => {
            tracing::warn!(lock = %name, error = %e, "taking back an acquisition too few replicas acknowledged failed; it expires with its ttl")
        }
    }
    Err(short_ack(acked, replicas))
}

/// Extension replies, or a [`ReplicasError`] for all of them when fewer
/// replicas acknowledged than asked (holds not held stay not held).
pub(crate) fn replicated(
    r: Result<(Vec<Option<i64>>, Option<u32>), Fault>,
    replicas: Option<Replicas>,
) -> Result<Vec<Result<Option<i64>, Fault>>, Fault> {
    let (leases, acked) = r?;
    let short = match (replicas, acked) {
        (Some(replicas), Some(acked)) if acked < replicas.n => Some(short_ack(acked, replicas)),
        _ => None,
    };
    Ok(leases
        .into_iter()
        .map(|l| match (&short, l) {
            (Some(f), Some(_)) => Err(f.clone()),
            (_, l) => Ok(l),
        })
        .collect())
}

fn short_ack(acked: u32, replicas: Replicas) -> Fault {
    Fault::Replicas(ReplicasError {
        acknowledged: acked,
        asked: replicas.n,
        timeout: Duration::from_millis(replicas.timeout_ms),
    })
}
