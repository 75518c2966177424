//! Multi-locks ([`LockClient::lock_all`](crate::LockClient::lock_all)):
//! all or nothing within one bound, no deadlock between overlapping sets,
//! one lost signal.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::timeout;

use super::steps::{assert_holder, holder, must_lock, must_unlock, ttl_leases};
use crate::LockError;
use crate::testkit::kit::{Kit, error_chain};

/// A set with one member held elsewhere is not taken at all (`lock_all`
/// fails at its bound, `try_lock_all` says busy) and leaves nothing held;
/// once free, the whole set is taken, each member with its own token; the
/// set is lost when a member is.
pub async fn multi_lock_all_or_nothing(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let base = kit.name("multi");
    let names: Vec<String> = ["x", "y", "z"].iter().map(|n| format!("{base}/{n}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let blocker = must_lock(&a, &names[1], &kit.long(&a)).await;

    let short_wait = kit.long(&b).wait(Duration::from_millis(300));
    match b.lock_all_with(&refs, &short_wait).await {
        Err(LockError::WaitTimeout { name, .. }) => assert_eq!(name, names[1], "the member waited for"),
        other => panic!("lock_all with a busy member must time out, got {other:?}"),
    }
    assert!(b.try_lock_all(&refs).await.expect("try_lock_all").is_none());
    for n in [&names[0], &names[2]] {
        assert_eq!(holder(&b, n).await, None, "{n} left held by an incomplete set");
    }
    must_unlock(blocker).await;

    let set = b
        .lock_all_with(&[refs[2], refs[0], refs[1], refs[0]], &kit.long(&b))
        .await
        .unwrap_or_else(|e| panic!("lock_all: {}", error_chain(&e)));
    let taken: Vec<&str> = set.names().collect();
    assert_eq!(taken, refs, "taken once each, in byte order");
    for n in &names {
        let token = set.token(n).expect("a member's token");
        assert_holder(&a, n, Some((b.owner().to_owned(), 1, token)), |h| h).await;
    }
    set.unlock().await.expect("unlock all");
    for n in &names {
        assert_eq!(holder(&a, n).await, None);
    }

    if ttl_leases(&b) {
        // A member lost is the set lost.
        let set = b.lock_all_with(&refs, &kit.short(&b)).await.expect("lock_all");
        timeout(kit.bound, set.lost())
            .await
            .expect("the set is lost with its leases");
        assert!(set.is_lost());
        assert!(set.lost_reason().is_some());
        drop(set);
    }
}

/// Tasks locking overlapping sets (in whatever order they list them) all
/// finish: taken in one order, the sets never deadlock; and no two hold a
/// name at once.
pub async fn multi_lock_no_deadlock(kit: &Kit) {
    let base = kit.name("multi_many");
    let names: Vec<String> = (0..4).map(|i| format!("{base}/{i}")).collect();
    let busy: Arc<HashMap<String, AtomicBool>> =
        Arc::new(names.iter().map(|n| (n.clone(), AtomicBool::new(false))).collect());
    let clients = join_all((0..6).map(|_| kit.client())).await;
    let rounds = kit.stress_iterations.clamp(1, 10);
    let runs = clients.into_iter().enumerate().map(|(i, client)| {
        // Overlapping sets, listed in different orders.
        let mut set: Vec<String> = (0..3).map(|k| names[(i + k) % names.len()].clone()).collect();
        if i % 2 == 1 {
            set.reverse();
        }
        let (busy, opts) = (busy.clone(), kit.long(&client));
        tokio::spawn(async move {
            let refs: Vec<&str> = set.iter().map(String::as_str).collect();
            for _ in 0..rounds {
                let g = client
                    .lock_all_with(&refs, &opts)
                    .await
                    .unwrap_or_else(|e| panic!("lock_all {refs:?}: {}", error_chain(&e)));
                for n in &set {
                    assert!(!busy[n].swap(true, Ordering::SeqCst), "{n} held twice at once");
                }
                tokio::task::yield_now().await;
                for n in &set {
                    busy[n].store(false, Ordering::SeqCst);
                }
                g.unlock().await.expect("unlock all");
            }
        })
    });
    for r in timeout(kit.bound * 4, join_all(runs))
        .await
        .expect("overlapping multi-locks deadlocked")
    {
        r.expect("a task panicked");
    }
}
