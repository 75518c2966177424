//! Mutual exclusion: one holder at a time among concurrent contenders,
//! `try_lock` that never waits, and the stress case's exact counter.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::time::timeout;

use super::steps::{assert_holder, holder, is_busy, must_lock, must_unlock};
use crate::LockError;
use crate::testkit::history::{Grant, check_history};
use crate::testkit::kit::{Kit, error_chain};

/// Contract point 1: While a lease is valid no other owner holds the name; of many
/// concurrent contenders exactly one wins.
pub async fn mutual_exclusion(kit: &Kit) {
    let name = kit.name("mutual_exclusion");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    assert_eq!(ga.hold_count(), 1);
    assert!(is_busy(&b, &name).await, "another owner acquired a held lock");
    let err = b
        .lock_with(&name, &kit.long(&b).wait(Duration::from_millis(100)))
        .await
        .expect_err("lock of a held name must time out");
    assert!(
        matches!(err, LockError::WaitTimeout { .. }),
        "expected WaitTimeout, got {err:?}"
    );
    assert_holder(&b, &name, Some((a.owner().to_owned(), 1, ga.fencing_token())), |h| h).await;
    assert_eq!(must_unlock(ga).await, 0);
    assert_eq!(
        holder(&b, &name).await,
        None,
        "the name must be free after the last release"
    );

    let race = kit.name("mutual_exclusion_race");
    let clients = join_all((0..8).map(|_| kit.client())).await;
    let opts = kit.long(&a);
    let results = join_all(clients.iter().map(|c| c.try_lock_with(&race, &opts))).await;
    let mut winners = Vec::new();
    for r in results {
        if let Some(g) = r.unwrap_or_else(|e| panic!("try_lock in a race: {}", error_chain(&e))) {
            winners.push(g);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of 8 concurrent contenders must win");
    for g in winners {
        must_unlock(g).await;
    }
}
/// Contract point 3: `try_lock` answers at once, without waiting for the holder.
pub async fn try_lock_never_waits(kit: &Kit) {
    let name = kit.name("try_lock_never_waits");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    // The holder's lease is 60 s, above the bound: a try_lock that waited fails here.
    let r = timeout(kit.bound, b.try_lock(&name)).await;
    assert!(
        matches!(r, Ok(Ok(None))),
        "try_lock on a held name must return Ok(None) at once, got {r:?}"
    );
    let free = kit.name("try_lock_free");
    let g = timeout(kit.bound, b.try_lock(&free))
        .await
        .expect("try_lock on a free name returns at once")
        .expect("no error")
        .expect("a free name is acquired");
    must_unlock(g).await;
    must_unlock(ga).await;
}
/// Contract point 12: K tasks × M cycles of acquire → read counter → yield → write
/// counter + 1 → release on one name: the total is exact, and the recorded
/// history has no overlapping holds and strictly increasing tokens.
pub async fn stress(kit: &Kit) {
    let name = kit.name("stress");
    let counter = Arc::new(AtomicU64::new(0));
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients = join_all((0..kit.stress_tasks).map(|_| kit.client())).await;
    let tasks = clients.into_iter().enumerate().map(|(worker, client)| {
        let (name, counter, history) = (name.clone(), counter.clone(), history.clone());
        let opts = client
            .options()
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(120));
        let iterations = kit.stress_iterations;
        tokio::spawn(async move {
            for _ in 0..iterations {
                let g = must_lock(&client, &name, &opts).await;
                let acquired = Instant::now();
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                let released = Instant::now();
                history.lock().expect("history").push(Grant {
                    worker,
                    token: g.fencing_token(),
                    acquired,
                    released,
                });
                must_unlock(g).await;
            }
        })
    });
    for t in join_all(tasks).await {
        t.expect("stress task panicked");
    }
    let total = (kit.stress_tasks * kit.stress_iterations) as u64;
    assert_eq!(
        counter.load(Ordering::SeqCst),
        total,
        "lost updates: the lock did not exclude"
    );
    let mut grants = std::mem::take(&mut *history.lock().expect("history"));
    assert_eq!(grants.len() as u64, total);
    check_history(&mut grants).unwrap_or_else(|e| panic!("history check: {e}"));
}
