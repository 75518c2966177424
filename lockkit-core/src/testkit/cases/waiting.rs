//! Waiting: `lock` waits up to its bound, hands over on release, and a
//! dropped `lock` future leaves nothing behind.

use std::time::{Duration, Instant};

use tokio::time::timeout;

use super::steps::{assert_holder, holder, must_lock, must_unlock, spawn_lock};
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockError, LockGuard};

/// Contract point 4: `lock` waits up to its bound and fails with `WaitTimeout`, not
/// earlier; a release during the wait hands the lock over, also to a waiter
/// without a bound.
pub async fn bounded_wait(kit: &Kit) {
    let name = kit.name("bounded_wait");
    let (a, b, c) = (kit.client().await, kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let err = b
        .lock_with(&name, &kit.long(&b).wait(wait))
        .await
        .expect_err("must time out");
    assert!(
        matches!(err, LockError::WaitTimeout { .. }),
        "expected WaitTimeout, got {err:?}"
    );
    assert!(started.elapsed() >= wait, "gave up before the wait bound");
    assert!(err.is_retryable());
    assert_holder(&b, &name, Some(a.owner().to_owned()), |h| h.0).await;

    let waiter = spawn_lock(&b, &name, kit.long(&b));
    tokio::task::yield_now().await;
    let token = ga.fencing_token();
    must_unlock(ga).await;
    let gb = await_waiter(kit, waiter).await;
    assert!(gb.fencing_token() > token);

    let forever = spawn_lock(&c, &name, kit.long(&c).wait_forever());
    tokio::task::yield_now().await;
    let token = gb.fencing_token();
    must_unlock(gb).await;
    let gc = await_waiter(kit, forever).await;
    assert!(gc.fencing_token() > token);
    must_unlock(gc).await;
}

async fn await_waiter(kit: &Kit, waiter: tokio::task::JoinHandle<Result<LockGuard, LockError>>) -> LockGuard {
    timeout(kit.bound, waiter)
        .await
        .expect("the waiter must get the lock promptly after the release")
        .expect("waiter task panicked")
        .unwrap_or_else(|e| panic!("waiter: {}", error_chain(&e)))
}
/// Contract point 5: Dropping a `lock` future at any point — while waiting, or while an
/// attempt is on the wire — leaves no hold and no queue entry: the next
/// waiter is not delayed.
pub async fn cancellation_safety(kit: &Kit) {
    let name = kit.name("cancellation_safety");
    let (a, b, c) = (kit.client().await, kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    for i in 0..12u64 {
        let give_up = Duration::from_millis(i * 7 % 40);
        match timeout(give_up, b.lock_with(&name, &kit.long(&b))).await {
            Err(_) => {}
            Ok(r) => panic!("a lock of a held name must still be waiting, got {r:?}"),
        }
    }
    let opts = kit.long(&b);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        r = b.lock_with(&name, &opts) => panic!("a lock of a held name must still be waiting, got {r:?}"),
    }
    assert_holder(&c, &name, Some((a.owner().to_owned(), 1)), |h| (h.0, h.1)).await;
    let waiter = spawn_lock(&c, &name, kit.long(&c));
    tokio::task::yield_now().await;
    must_unlock(ga).await;
    let gc = await_waiter(kit, waiter).await;
    must_unlock(gc).await;

    // Now cancel acquisitions of a free name at many points in flight. A hold
    // left behind would block `c` for its 60 s lease, past the bound.
    let free = kit.name("cancellation_safety_inflight");
    for i in 0..20u64 {
        let give_up = Duration::from_micros(i * i * 25);
        match timeout(give_up, b.lock_with(&free, &kit.long(&b))).await {
            Ok(Ok(g)) => {
                must_unlock(g).await;
            }
            Ok(Err(e)) => panic!("lock of a free name failed: {}", error_chain(&e)),
            Err(_) => {}
        }
        let g = timeout(kit.bound, c.lock_with(&free, &kit.long(&c)))
            .await
            .unwrap_or_else(|_| panic!("a cancelled acquisition (after {give_up:?}) left the name held"))
            .unwrap_or_else(|e| panic!("lock after a cancelled acquisition: {}", error_chain(&e)));
        must_unlock(g).await;
    }
    assert_eq!(holder(&c, &free).await, None);
}
