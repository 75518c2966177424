//! The steps and checks the cases share: lock and unlock that must
//! succeed, who holds a name, how many wait for it.

use std::time::Duration;

use tokio::time::Instant;

use crate::backend::{LeaseKind, LockKind};
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError, LockGuard};

/// Whether the client's backend grants ttl leases (not sessions).
pub(super) fn ttl_leases(client: &LockClient) -> bool {
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

/// Who holds `name`, as `client` sees it: owner, hold count, token.
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

/// Locks `name`, panicking if that fails.
pub(super) async fn must_lock(client: &LockClient, name: &str, opts: &crate::LockOptions) -> LockGuard {
    client
        .lock_with(name, opts)
        .await
        .unwrap_or_else(|e| panic!("lock {name:?} should succeed: {}", error_chain(&e)))
}

/// Unlocks `guard`, panicking if that fails; the holds left.
pub(super) async fn must_unlock(guard: LockGuard) -> u32 {
    let name = guard.name().to_owned();
    guard
        .unlock()
        .await
        .unwrap_or_else(|e| panic!("unlock {name:?} should succeed: {}", error_chain(&e)))
        .remaining_holds
}

/// Whether `name` is held for `client` (a `try_lock` it gets is given back).
pub(super) async fn is_busy(client: &LockClient, name: &str) -> bool {
    match client.try_lock(name).await {
        Ok(None) => true,
        Ok(Some(g)) => {
            must_unlock(g).await;
            false
        }
        Err(e) => panic!("try_lock {name:?}: {}", error_chain(&e)),
    }
}

/// A task that locks `name` through `client`.
pub(super) fn spawn_lock(
    client: &LockClient,
    name: &str,
    opts: crate::LockOptions,
) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move { client.lock_with(&name, &opts).await })
}
