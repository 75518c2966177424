//! The conformance cases, one per contract point (the README's "The contract").
//!
//! Each case panics with a message naming what broke. Cases wait for events
//! within [`Kit::bound`](crate::testkit::Kit::bound); the only sleeps are
//! the ones that let a lease run for a multiple of its ttl.

mod admin;
mod crowd;
mod election;
mod exclusion;
mod fairness;
mod fencing;
mod jobs;
mod leases;
mod multi_lock;
mod names;
mod ownership;
mod reentry;
mod rwlock;
mod semaphore;
mod waiting;

use std::time::Duration;

use tokio::time::Instant;

use super::kit::{Kit, error_chain};
use crate::backend::{LeaseKind, LockKind};
use crate::{LockClient, LockError, LockGuard};

pub use admin::admin;
pub use crowd::{crowd_mutex, crowd_rwlock, crowd_semaphore};
pub use election::{election_never_two_leaders, election_observe_sees_every_change, election_one_leader};
pub use exclusion::{mutual_exclusion, stress, try_lock_never_waits};
pub use fairness::{dead_waiter_skipped, fifo_order, releaser_does_not_overtake, unfair_still_correct};
pub use fencing::fencing_monotonic;
pub use jobs::{job_at_most_stops, job_runs_once_and_at_least_holds};
pub use leases::{crash_release, extend_and_auto_extend, lost_signal, lost_when_starved};
pub use multi_lock::{multi_lock_all_or_nothing, multi_lock_no_deadlock};
pub use names::{invalid_input, names};
pub use ownership::release_by_non_owner;
pub use reentry::{idempotent_attempts, reentrancy};
pub use rwlock::{rw_crash_release, rw_exclusion_and_tokens, rw_reentry_and_downgrade, rw_writer_not_starved};
pub use semaphore::{semaphore_crash_release, semaphore_order_and_bound, semaphore_permits};
pub use waiting::{bounded_wait, cancellation_safety};

fn ttl_leases(client: &LockClient) -> bool {
    client.capabilities().leases == LeaseKind::Ttl
}

/// Waits (up to the kit's bound) until `n` acquisitions of `kind` wait for
/// `name`.
pub(super) async fn until_waiting(kit: &Kit, client: &LockClient, name: &str, kind: LockKind, n: usize) {
    let deadline = Instant::now() + kit.bound;
    loop {
        let waiting = client
            .backend()
            .waiting_for(name, kind)
            .await
            .unwrap_or_else(|e| panic!("waiting({name:?}): {}", error_chain(&e)));
        if waiting == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} waiters expected on {name:?} within {:?}, the backend counts {waiting}",
            kit.bound
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) async fn holder(client: &LockClient, name: &str) -> Option<(String, u32, u64)> {
    client
        .inspect(name)
        .await
        .unwrap_or_else(|e| panic!("inspect {name:?}: {}", error_chain(&e)))
        .map(|i| (i.owner, i.hold_count, i.token))
}

/// Asserts who `client` sees holding `name` (`project` picks what to
/// compare from owner, count and token). Where the backend does not
/// declare [`shared_holds`](crate::Capabilities::shared_holds), a hold by
/// another client shows without its owner, count and token (owner `""`):
/// then only that the name is held is compared.
pub(super) async fn assert_holder<T: PartialEq + std::fmt::Debug>(
    client: &LockClient,
    name: &str,
    expected: Option<T>,
    project: impl FnOnce((String, u32, u64)) -> T,
) {
    let info = client
        .inspect(name)
        .await
        .unwrap_or_else(|e| panic!("inspect {name:?}: {}", error_chain(&e)));
    match info {
        Some(i) if i.owner.is_empty() && !client.capabilities().shared_holds => {
            assert!(expected.is_some(), "{name:?} is held, but {expected:?} was expected");
        }
        other => assert_eq!(
            other.map(|i| project((i.owner, i.hold_count, i.token))),
            expected,
            "the holder of {name:?}"
        ),
    }
}

pub(super) async fn must_lock(client: &LockClient, name: &str, opts: &crate::LockOptions) -> LockGuard {
    client
        .lock_with(name, opts)
        .await
        .unwrap_or_else(|e| panic!("lock {name:?} should succeed: {}", error_chain(&e)))
}

pub(super) async fn must_unlock(guard: LockGuard) -> u32 {
    let name = guard.name().to_owned();
    guard
        .unlock()
        .await
        .unwrap_or_else(|e| panic!("unlock {name:?} should succeed: {}", error_chain(&e)))
        .remaining_holds
}

async fn is_busy(client: &LockClient, name: &str) -> bool {
    match client.try_lock(name).await {
        Ok(None) => true,
        Ok(Some(g)) => {
            must_unlock(g).await;
            false
        }
        Err(e) => panic!("try_lock {name:?}: {}", error_chain(&e)),
    }
}

pub(super) fn spawn_lock(
    client: &LockClient,
    name: &str,
    opts: crate::LockOptions,
) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move { client.lock_with(&name, &opts).await })
}
