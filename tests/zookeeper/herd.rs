//! No herd effect on ZooKeeper: each waiter watches only its predecessor, so
//! one release wakes exactly one waiter, and the lock is handed on in queue
//! order. Wake-ups are counted by each backend ([`ZkStats::wakeups`]: watch
//! events delivered to waiting acquisitions).
#![cfg(feature = "zookeeper")]

use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockGuard, LockOptions};
use lockkit_zk::ZkBackend;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::common::unique;

const WAITERS: usize = 16;
/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(15);

fn server_url() -> Option<String> {
    lockkit_core::testkit::server_url("LOCKKIT_ZK_URL")
}

/// Polls `check` until it holds, for at most [`BOUND`].
async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < BOUND, "not within {BOUND:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

type Waiting = JoinHandle<(Result<LockGuard, LockError>, Instant)>;

struct Waiter {
    backend: ZkBackend,
    task: Waiting,
}

/// A waiter with its own session, queued behind the `queued` contenders
/// already there: returns once its node is in line and its watch is set.
async fn queue_waiter(url: &str, name: &str, probe: &ZkBackend, queued: usize) -> Waiter {
    let backend = ZkBackend::from_url(url).await.expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new().wait(Duration::from_secs(300))).unwrap();
    let n = name.to_owned();
    let task = tokio::spawn(async move {
        let r = client.lock(&n).await;
        (r, Instant::now())
    });
    eventually("the waiter queues and watches its predecessor", async || {
        backend.stats().watches == 1 && probe.contenders(name).await.unwrap() == queued + 1
    })
    .await;
    Waiter { backend, task }
}

fn wakeups(waiters: &[Waiter]) -> Vec<u64> {
    waiters.iter().map(|w| w.backend.stats().wakeups).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_waiter_in_queue_order() {
    let Some(url) = server_url() else { return };
    let name = unique("herd");
    let holder_backend = ZkBackend::from_url(&url).await.expect("connect");
    let holder = LockClient::new(holder_backend.clone(), LockOptions::new()).unwrap();
    let mut held = holder.lock(&name).await.expect("lock a free name");
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        waiters.push(queue_waiter(&url, &name, &holder_backend, i + 1).await);
    }
    assert_eq!(wakeups(&waiters), [0; WAITERS], "queueing woke nobody");

    let mut handoffs = Vec::new();
    let mut last_token = held.fencing_token();
    for k in 0..WAITERS {
        let released_at = Instant::now();
        assert!(held.unlock().await.expect("unlock").is_free());
        let (guard, acquired_at) = timeout(BOUND, &mut waiters[k].task)
            .await
            .unwrap_or_else(|_| panic!("waiter {k} did not get the lock after the release"))
            .expect("waiter task");
        let guard = guard.unwrap_or_else(|e| panic!("waiter {k}: {e}"));
        handoffs.push(acquired_at - released_at);
        assert!(guard.fencing_token() > last_token, "tokens grow along the queue");
        last_token = guard.fencing_token();
        for (j, later) in waiters.iter().enumerate().skip(k + 1) {
            assert!(
                !later.task.is_finished(),
                "waiter {j} got the lock before waiter {k}: not FIFO"
            );
        }
        let woken = wakeups(&waiters);
        assert!(
            woken[..=k].iter().all(|w| *w == 1) && woken[k + 1..].iter().all(|w| *w == 0),
            "after {} releases exactly the first {} waiters woke, once each: {woken:?}",
            k + 1,
            k + 1
        );
        held = guard;
    }
    held.unlock().await.expect("unlock");
    assert_eq!(wakeups(&waiters), [1; WAITERS], "one wake-up per waiter in all");
    assert_eq!(
        holder_backend.contenders(&name).await.unwrap(),
        0,
        "nothing left in line"
    );
    handoffs.sort();
    eprintln!(
        "{WAITERS} hand-offs: median {:?}, max {:?} (release call to the next lock returning)",
        handoffs[WAITERS / 2],
        handoffs[WAITERS - 1]
    );
}

/// A waiter that gives up wakes only the one behind it, which looks again
/// and finds a new predecessor rather than the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_passes_its_place_on() {
    let Some(url) = server_url() else { return };
    let name = unique("herd_give_up");
    let holder_backend = ZkBackend::from_url(&url).await.expect("connect");
    let holder = LockClient::new(holder_backend.clone(), LockOptions::new()).unwrap();
    let held = holder.lock(&name).await.expect("lock a free name");
    let first = queue_waiter(&url, &name, &holder_backend, 1).await;
    let quitter = queue_waiter(&url, &name, &holder_backend, 2).await;
    let last = queue_waiter(&url, &name, &holder_backend, 3).await;

    // Dropping the waiting future deletes its node in the background.
    quitter.task.abort();
    eventually("the waiter behind the quitter is woken", async || {
        last.backend.stats().wakeups == 1
    })
    .await;
    eventually("it watches its new predecessor", async || {
        last.backend.stats().watches == 2 && holder_backend.contenders(&name).await.unwrap() == 3
    })
    .await;
    assert_eq!(
        first.backend.stats().wakeups,
        0,
        "the quitter's predecessor was not woken"
    );
    assert_eq!(holder_backend.stats().wakeups, 0);
    assert!(
        !last.task.is_finished(),
        "the lock is still held: waking is not acquiring"
    );

    held.unlock().await.expect("unlock");
    let (g1, _) = timeout(BOUND, first.task).await.expect("first acquires").unwrap();
    let g1 = g1.expect("first");
    assert_eq!(
        last.backend.stats().wakeups,
        1,
        "the release woke only the first waiter"
    );
    assert!(!last.task.is_finished());
    g1.unlock().await.expect("unlock");
    let (g3, _) = timeout(BOUND, last.task).await.expect("last acquires").unwrap();
    let g3 = g3.expect("last");
    assert_eq!(last.backend.stats().wakeups, 2);
    g3.unlock().await.expect("unlock");
    assert_eq!(holder_backend.contenders(&name).await.unwrap(), 0);
}
