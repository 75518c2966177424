//! `wait_replicas`: an acquisition or extension followed by `WAIT`, and
//! what too few acknowledgements make of it.

use std::time::Duration;

use crate::error::{Fault, ReplicasError};
use crate::scripts::{Extended, Replicas};

/// The fault of an acquisition (a hold: new, re-entered or repeated)
/// that fewer than `replicas.n` replicas acknowledged: it is taken back —
/// this attempt's share, by its id — and the attempt fails with a
/// retryable [`ReplicasError`].
pub(crate) fn short_of(acked: Option<u32>, replicas: Option<Replicas>) -> Option<Fault> {
    match (replicas, acked) {
        (Some(replicas), Some(acked)) if acked < replicas.n => Some(short_ack(acked, replicas)),
        (Some(replicas), None) => Some(short_ack(0, replicas)),
        _ => None,
    }
}

/// Extension replies, or a [`ReplicasError`] for all of them when fewer
/// replicas acknowledged than asked (holds not held stay not held).
pub(crate) fn replicated(extended: Extended, replicas: Option<Replicas>) -> Vec<Result<Option<i64>, Fault>> {
    let short = short_of(extended.acked, replicas);
    extended
        .leases
        .into_iter()
        .map(|l| match (&short, l) {
            (Some(f), Some(_)) => Err(f.clone()),
            (_, l) => Ok(l),
        })
        .collect()
}

fn short_ack(acked: u32, replicas: Replicas) -> Fault {
    Fault::Replicas(ReplicasError {
        acknowledged: acked,
        asked: replicas.n,
        timeout: Duration::from_millis(replicas.timeout_ms),
    })
}
