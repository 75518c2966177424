//! Semaphores and read-write locks on the SQL table, beyond the kit: a
//! waiter that gives up or is cancelled leaves the line (so it does not
//! hold back a later fair try), a permit count that disagrees with the
//! semaphore's is refused while it is in use and taken once it is not, and
//! an unfair waiter takes any free permit.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::{Duration, Instant};

use lockkit::{LockError, LockKind};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

use crate::common::unique;

/// Waits (bounded) until `name`'s line has `n` places.
async fn until_waiting(client: &lockkit::LockClient, name: &str, kind: LockKind, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting = client.backend().waiting_for(name, kind).await.unwrap();
        if waiting == n {
            return;
        }
        assert!(Instant::now() < deadline, "{n} waiting expected, {waiting} counted");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn waiters_leave(url: String) {
    let (a, b, c) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("kinds_leave");
    let kind = LockKind::Permit { permits: 1 };
    let held = a.semaphore(&name, 1).unwrap().acquire().await.unwrap();
    // Gave up at its bound: its place is gone when the call returns.
    let short = b.options().wait(Duration::from_millis(200));
    match b.semaphore(&name, 1).unwrap().acquire_with(&short).await {
        Err(LockError::WaitTimeout { .. }) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert_eq!(a.backend().waiting_for(&name, kind).await.unwrap(), 0);
    // Cancelled while in line: its place goes in the background.
    let sem_b = b.semaphore(&name, 1).unwrap();
    let waiting = tokio::spawn(async move { sem_b.acquire().await });
    until_waiting(&a, &name, kind, 1).await;
    waiting.abort();
    until_waiting(&a, &name, kind, 0).await;
    // Nobody waits: a fair try takes the released permit.
    held.unlock().await.unwrap();
    let taken = c.semaphore(&name, 1).unwrap().try_acquire().await.unwrap();
    taken
        .expect("no stale place holds the try back")
        .unlock()
        .await
        .unwrap();

    // A writer that gave up no longer keeps new readers out.
    let rw = unique("kinds_leave_rw");
    let read = a.rw_lock(&rw).unwrap().read().await.unwrap();
    let short = b.options().wait(Duration::from_millis(200));
    assert!(b.rw_lock(&rw).unwrap().write_with(&short).await.is_err());
    let second = c.rw_lock(&rw).unwrap().try_read().await.unwrap();
    second.expect("no writer waits").unlock().await.unwrap();
    read.unlock().await.unwrap();
}

async fn permit_counts(url: String) {
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("kinds_counts");
    let two = a.semaphore(&name, 2).unwrap().acquire().await.unwrap();
    match b.semaphore(&name, 3).unwrap().try_acquire().await {
        Err(LockError::Conflict { .. }) => {}
        other => panic!("another count while in use must conflict, got {other:?}"),
    }
    two.unlock().await.unwrap();
    let three = b.semaphore(&name, 3).unwrap();
    let mut permits = Vec::new();
    for _ in 0..3 {
        permits.push(
            three
                .try_acquire()
                .await
                .unwrap()
                .expect("the unused semaphore takes a new count"),
        );
    }
    assert!(three.try_acquire().await.unwrap().is_none(), "3 permits");
    for p in permits {
        p.unlock().await.unwrap();
    }

    // Unfair: a waiter takes the permit that comes free.
    let holder = a.semaphore(&name, 3).unwrap();
    let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| holder.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let unfair = b.options().fair(false).wait(Duration::from_secs(10));
    let sem_b = b.semaphore(&name, 3).unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire_with(&unfair).await });
    until_waiting(&a, &name, LockKind::Permit { permits: 3 }, 1).await;
    for h in held {
        h.unlock().await.unwrap();
    }
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    waiters_leave(url.clone()).await;
    permit_counts(url).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_kinds() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        waiters_leave(url.clone()).await;
        permit_counts(url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kinds() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        waiters_leave(url.clone()).await;
        permit_counts(url).await;
    }
}
