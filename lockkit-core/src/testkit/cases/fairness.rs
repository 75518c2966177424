//! The conformance cases of the contract's
//! [fair by default](crate::contract#fair-by-default): waiters are served
//! in the order they began waiting, a releaser does not overtake the queue,
//! a dead waiter leaves it within a bound, and `fair=false` (barging) stays
//! correct.
//!
//! A backend that does not declare [`Capabilities::fair`] lists the
//! fairness checks as not applicable (`conformance_tests!`); the
//! `fair=false` case runs everywhere.
//!
//! [`Capabilities::fair`]: crate::backend::Capabilities::fair

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::timeout;

use crate::backend::LockKind;

use super::steps::{assert_holder, holder, must_lock, must_unlock, spawn_lock};
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockGuard};

/// Fails the case where the backend does not declare fair queues: such a
/// backend lists the fairness cases as not applicable
/// (`conformance_tests!(…, not_applicable: […] because …)`).
fn require_fair(kit: &Kit, client: &LockClient, case: &str) {
    assert!(
        client.capabilities().fair,
        "{}: {case}: the backend does not declare fair queues (Capabilities::fair): list the case as not applicable",
        kit.label()
    );
}

/// Waits (up to the kit's bound) until `n` acquisitions wait for `name`.
async fn until_waiting(kit: &Kit, client: &LockClient, name: &str, n: usize) {
    super::steps::until_waiting(kit, client, name, LockKind::Mutex, n).await;
}

/// The order in which tasks got a name, by their labels.
#[derive(Clone, Default)]
struct Order(Arc<Mutex<Vec<String>>>);

impl Order {
    fn push(&self, who: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).push(who.to_owned());
    }

    fn seen(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

/// Takes `name` as `who` (waiting up to the kit's bound), notes it in
/// `order`, and releases at once.
fn spawn_take(kit: &Kit, client: &LockClient, name: &str, who: &str, order: &Order) -> tokio::task::JoinHandle<()> {
    let waiter = spawn_lock(client, name, kit.long(client));
    let (who, order, bound) = (who.to_owned(), order.clone(), kit.bound * 2);
    tokio::spawn(async move {
        let guard = timeout(bound, waiter)
            .await
            .unwrap_or_else(|_| panic!("{who} was not served within {bound:?}"))
            .expect("waiter task panicked")
            .unwrap_or_else(|e| panic!("{who}: lock: {}", error_chain(&e)));
        order.push(&who);
        must_unlock(guard).await;
    })
}

/// Contract point 12: N waiters that queued one after another are served
/// in that order, one each, when the holder releases.
pub async fn fifo_order(kit: &Kit) {
    let name = kit.name("fifo_order");
    let holder_client = kit.client().await;
    require_fair(kit, &holder_client, "fifo_order");
    let guard = must_lock(&holder_client, &name, &kit.long(&holder_client)).await;
    let order = Order::default();
    let mut tasks = Vec::new();
    let mut expected = Vec::new();
    for i in 1..=4 {
        let client = kit.client().await;
        let who = format!("waiter {i}");
        tasks.push(spawn_take(kit, &client, &name, &who, &order));
        until_waiting(kit, &holder_client, &name, i).await;
        expected.push(who);
    }
    must_unlock(guard).await;
    for task in tasks {
        task.await.expect("waiter task panicked");
    }
    assert_eq!(
        order.seen(),
        expected,
        "waiters must be served in the order they queued"
    );
    until_waiting(kit, &holder_client, &name, 0).await;
    assert_eq!(holder(&holder_client, &name).await, None);
}

/// Contract point 12: a client that releases and at once wants the name
/// again does not take it ahead of a waiter: `try_lock` refuses, `lock`
/// queues behind.
pub async fn releaser_does_not_overtake(kit: &Kit) {
    let name = kit.name("releaser_does_not_overtake");
    let (a, b) = (kit.client().await, kit.client().await);
    require_fair(kit, &a, "releaser_does_not_overtake");
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    let order = Order::default();
    let waiter = spawn_lock(&b, &name, kit.long(&b));
    until_waiting(kit, &a, &name, 1).await;
    must_unlock(ga).await;
    if let Some(g) = a
        .try_lock_with(&name, &kit.long(&a))
        .await
        .unwrap_or_else(|e| panic!("try_lock: {}", error_chain(&e)))
    {
        panic!(
            "try_lock took the name (token {}) ahead of the waiter queued before the release",
            g.fencing_token()
        );
    }
    let again = {
        let (a, name, order) = (a.clone(), name.clone(), order.clone());
        let opts = kit.long(&a);
        tokio::spawn(async move {
            let g = a.lock_with(&name, &opts).await;
            order.push("releaser");
            g
        })
    };
    let gb = timeout(kit.bound, waiter)
        .await
        .expect("the waiter must get the name promptly after the release")
        .expect("waiter task panicked")
        .unwrap_or_else(|e| panic!("waiter: {}", error_chain(&e)));
    order.push("waiter");
    // The releaser queues behind the waiter while the waiter holds.
    until_waiting(kit, &b, &name, 1).await;
    // The waiter holds while the releaser waits.
    assert_holder(&b, &name, Some(b.owner().to_owned()), |h| h.0).await;
    must_unlock(gb).await;
    let ga = timeout(kit.bound, again)
        .await
        .expect("the releaser gets the name after the waiter")
        .expect("task panicked")
        .unwrap_or_else(|e| panic!("releaser: {}", error_chain(&e)));
    assert_eq!(order.seen(), ["waiter", "releaser"]);
    must_unlock(ga).await;
}

/// Contract point 12: a waiter that dies while queued (its process gone:
/// no clean-up runs, its connections close) leaves the queue within a
/// bound, and the waiter behind it is served within
/// [`Kit::dead_waiter_bound`] of the release.
pub async fn dead_waiter_skipped(kit: &Kit) {
    let name = kit.name("dead_waiter_skipped");
    let (a, c) = (kit.client().await, kit.client().await);
    require_fair(kit, &a, "dead_waiter_skipped");
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    // The doomed waiter lives on a runtime of its own: shutting it down
    // drops its tasks and connections without letting any clean-up talk to
    // the server, as a killed process would.
    let doomed = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the doomed waiter");
    {
        let (kit, name) = (kit.clone(), name.clone());
        doomed.spawn(async move {
            let client = kit.client().await;
            let opts = kit.long(&client).wait_forever();
            let _never: Result<LockGuard, _> = client.lock_with(&name, &opts).await;
            std::future::pending::<()>().await;
        });
    }
    until_waiting(kit, &a, &name, 1).await;
    let waiter = spawn_lock(&c, &name, kit.long(&c));
    until_waiting(kit, &a, &name, 2).await;
    // Its worker thread stops (the waiter's tasks dropped) before the
    // release, so that no wake-up can reach a half-dead waiter.
    tokio::task::spawn_blocking(move || doomed.shutdown_timeout(Duration::from_secs(5)))
        .await
        .expect("shutting the doomed runtime down");
    let released = std::time::Instant::now();
    must_unlock(ga).await;
    let gc = timeout(kit.bound, waiter)
        .await
        .expect("the waiter behind a dead one must be served within the bound")
        .expect("waiter task panicked")
        .unwrap_or_else(|e| panic!("waiter: {}", error_chain(&e)));
    let delay = released.elapsed();
    eprintln!(
        "{}: dead_waiter_skipped: served {delay:?} after the release",
        kit.label()
    );
    assert!(
        delay <= kit.dead_waiter_bound,
        "the waiter behind a dead one was served {delay:?} after the release (bound {:?})",
        kit.dead_waiter_bound
    );
    assert_holder(&a, &name, Some(c.owner().to_owned()), |h| h.0).await;
    must_unlock(gc).await;
    until_waiting(kit, &a, &name, 0).await;
}

/// Contract point 12, `fair=false`: barging acquisitions still exclude each
/// other, tokens still grow, and every contender gets its turns.
pub async fn unfair_still_correct(kit: &Kit) {
    let name = kit.name("unfair_still_correct");
    let clients = futures_util::future::join_all((0..4).map(|_| kit.client())).await;
    let history = Arc::new(Mutex::new(Vec::new()));
    let tasks = clients.into_iter().enumerate().map(|(worker, client)| {
        let (name, history) = (name.clone(), history.clone());
        let opts = client
            .options()
            .fair(false)
            .ttl(Duration::from_secs(60))
            .wait(kit.bound * 4);
        tokio::spawn(async move {
            for _ in 0..25 {
                let g = must_lock(&client, &name, &opts).await;
                let acquired = std::time::Instant::now();
                tokio::task::yield_now().await;
                history
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(crate::testkit::history::Grant {
                        worker,
                        token: g.fencing_token(),
                        acquired,
                        released: std::time::Instant::now(),
                    });
                must_unlock(g).await;
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.expect("task panicked");
    }
    let mut grants = std::mem::take(&mut *history.lock().unwrap_or_else(|e| e.into_inner()));
    assert_eq!(grants.len(), 100);
    crate::testkit::history::check_history(&mut grants).unwrap_or_else(|e| panic!("history check: {e}"));
}
