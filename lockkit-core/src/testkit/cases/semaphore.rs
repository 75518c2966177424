//! Semaphores ([`LockKind::Permit`]): at most N permits at once, one hold
//! and one token each, the count agreed by everyone, permits of crashed
//! holders back after their lease, waiters served in order.
//!
//! A backend that does not declare [`Capabilities::semaphores`] must refuse
//! them with [`LockError::Unsupported`]; that is what these cases check
//! there.
//!
//! [`Capabilities::semaphores`]: crate::backend::Capabilities::semaphores

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use futures_util::future::join_all;
use tokio::time::timeout;

use super::steps::{must_unlock, ttl_leases, until_waiting};
use crate::backend::LockKind;
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError, LockGuard, LockOptions, Semaphore};

/// Whether the backend has semaphores; where it does not, checks that it
/// says so.
pub(super) async fn supported(kit: &Kit, client: &LockClient, case: &str) -> bool {
    if client.capabilities().semaphores {
        return true;
    }
    let sem = client.semaphore(&kit.name(case), 2).expect("a semaphore handle");
    match sem.try_acquire().await {
        Err(LockError::Unsupported { .. }) => {
            eprintln!("{}: {case}: no semaphores (Capabilities::semaphores)", kit.label());
            false
        }
        other => panic!("a backend without semaphores must say Unsupported, got {other:?}"),
    }
}

async fn take(sem: &Semaphore, opts: &LockOptions) -> LockGuard {
    sem.acquire_with(opts)
        .await
        .unwrap_or_else(|e| panic!("acquire a permit of {:?}: {}", sem.name(), error_chain(&e)))
}

async fn try_take(sem: &Semaphore) -> Option<LockGuard> {
    sem.try_acquire()
        .await
        .unwrap_or_else(|e| panic!("try_acquire a permit of {:?}: {}", sem.name(), error_chain(&e)))
}

/// At most N permits at once, each a hold with a token of its own (an
/// owner asking twice takes two); the count is the name's: a handle with
/// another count is refused while the semaphore is in use, not let in.
pub async fn semaphore_permits(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    if !supported(kit, &a, "semaphore_permits").await {
        return;
    }
    let name = kit.name("semaphore_permits");
    let (sa, sb) = (a.semaphore(&name, 3).unwrap(), b.semaphore(&name, 3).unwrap());
    let opts = kit.long(&a);
    let a1 = take(&sa, &opts).await;
    let a2 = take(&sa, &opts).await;
    let b1 = take(&sb, &kit.long(&b)).await;
    assert_eq!(
        (a1.hold_count(), a2.hold_count()),
        (1, 1),
        "each permit is a hold of its own"
    );
    assert_eq!(a1.kind(), LockKind::Permit { permits: 3 });
    let tokens = [a1.fencing_token(), a2.fencing_token(), b1.fencing_token()];
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "each permit gets a new, greater token: {tokens:?}"
    );
    assert!(try_take(&sb).await.is_none(), "a fourth permit of three");
    let holders = sb
        .holders()
        .await
        .unwrap_or_else(|e| panic!("holders: {}", error_chain(&e)));
    let seen: Vec<(String, u64)> = holders.iter().map(|h| (h.owner.clone(), h.token)).collect();
    assert_eq!(
        seen,
        [
            (a.owner().to_owned(), tokens[0]),
            (a.owner().to_owned(), tokens[1]),
            (b.owner().to_owned(), tokens[2])
        ],
        "the permits held, in the order granted"
    );

    let other_count = b.semaphore(&name, 5).unwrap();
    match other_count.try_acquire().await {
        Err(LockError::Conflict { .. }) => {}
        other => panic!("a handle with another permit count must get Conflict, got {other:?}"),
    }
    assert_eq!(must_unlock(a2).await, 0, "a permit's release frees that permit");
    let b2 = try_take(&sb).await.expect("the freed permit");
    assert!(b2.fencing_token() > tokens[2]);
    for g in [a1, b1, b2] {
        must_unlock(g).await;
    }
    assert!(sb.holders().await.unwrap().is_empty(), "no permit left");
    let again = take(&other_count, &kit.long(&b)).await;
    assert_eq!(
        again.kind(),
        LockKind::Permit { permits: 5 },
        "unused, the name takes a new count"
    );
    must_unlock(again).await;
}

/// Permits never leak: a holder that crashes (abandons its permit and its
/// client) gives it back when its lease ends — not before.
pub async fn semaphore_crash_release(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    if !supported(kit, &b, "semaphore_crash_release").await {
        return;
    }
    let name = kit.name("semaphore_crash_release");
    let (sa, sb) = (a.semaphore(&name, 1).unwrap(), b.semaphore(&name, 1).unwrap());
    let crashed = take(&sa, &kit.short(&a)).await;
    let valid_until = crashed.valid_until().filter(|_| ttl_leases(&a));
    let token = crashed.fencing_token();
    crashed.abandon();
    drop((sa, a));
    if let Some(valid_until) = valid_until
        && Instant::now() < valid_until
    {
        assert!(
            try_take(&sb).await.is_none(),
            "a crashed holder's permit runs to its lease's end"
        );
    }
    let back = timeout(kit.bound, take(&sb, &kit.long(&b)))
        .await
        .expect("a crashed holder's permit must come back within its lease");
    if let Some(valid_until) = valid_until {
        assert!(
            Instant::now() >= valid_until,
            "given back before the crashed holder's lease could end"
        );
    }
    assert!(back.fencing_token() > token);
    must_unlock(back).await;
}

/// Waiters for a permit are served in the order they queued, and never
/// more than N hold at once however many tasks (each its own client, as
/// processes) compete.
pub async fn semaphore_order_and_bound(kit: &Kit) {
    let holder = kit.client().await;
    if !supported(kit, &holder, "semaphore_order_and_bound").await {
        return;
    }
    let name = kit.name("semaphore_order");
    let kind = LockKind::Permit { permits: 2 };
    let sem = holder.semaphore(&name, 2).unwrap();
    let (p1, p2) = (
        take(&sem, &kit.long(&holder)).await,
        take(&sem, &kit.long(&holder)).await,
    );
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 1..=3 {
        let client = kit.client().await;
        let (sem, opts, order) = (client.semaphore(&name, 2).unwrap(), kit.long(&client), order.clone());
        waiters.push(tokio::spawn(async move {
            let g = take(&sem, &opts).await;
            order.lock().unwrap().push(i);
            g
        }));
        until_waiting(kit, &holder, &name, kind, i).await;
    }
    must_unlock(p1).await;
    let first = waiters.remove(0).await.expect("waiter 1");
    must_unlock(p2).await;
    let second = waiters.remove(0).await.expect("waiter 2");
    must_unlock(first).await;
    let third = waiters.remove(0).await.expect("waiter 3");
    assert_eq!(
        *order.lock().unwrap(),
        [1, 2, 3],
        "permits go to the waiters in line order"
    );
    must_unlock(second).await;
    must_unlock(third).await;

    // Many contenders, each its own client: never more than 2 at once.
    let (tasks, rounds) = (6, kit.stress_iterations.clamp(1, 20));
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let clients = join_all((0..tasks).map(|_| kit.client())).await;
    let runs = clients.into_iter().map(|c| {
        let (sem, opts) = (c.semaphore(&name, 2).unwrap(), kit.long(&c));
        let (inside, most) = (inside.clone(), most.clone());
        tokio::spawn(async move {
            for _ in 0..rounds {
                let g = take(&sem, &opts).await;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::task::yield_now().await;
                inside.fetch_sub(1, Ordering::SeqCst);
                must_unlock(g).await;
            }
        })
    });
    for r in join_all(runs).await {
        r.expect("a contender panicked");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 2, "{most} permits of 2 were held at once");
    assert!(sem.holders().await.unwrap().is_empty(), "every permit came back");
}
