//! Semaphores and read-write locks on the SQL table, beyond the kit: a
//! waiter that gives up or is cancelled leaves the line (so it does not
//! hold back a later fair try), a permit count that disagrees with the
//! semaphore's is refused while it is in use and taken once it is not, and
//! an unfair waiter takes any free permit; shares of one owner's read hold
//! come and go beside a writer.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use lockkit::{LockError, LockKind};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

use crate::common::unique;

/// Waits (bounded) until `name`'s line has `n` places (also the other
/// files' tests').
pub(crate) async fn until_waiting(client: &lockkit::LockClient, name: &str, kind: LockKind, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
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
    // Nobody waits: a fair try takes the released permit — at once, or,
    // if the cancelled waiter's last attempt was still running and took it,
    // once that orphan is given back in the background; well before a
    // stale place's lease (5 s) would end.
    held.unlock().await.unwrap();
    let sem_c = c.semaphore(&name, 1).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let taken = loop {
        match sem_c.try_acquire().await.unwrap() {
            Some(g) => break g,
            None => assert!(Instant::now() < deadline, "a stale place holds the try back"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    taken.unlock().await.unwrap();

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

    // Unfair: a waiter (which takes no place in line, as an unfair mutex's
    // does not) takes the permit that comes free.
    let holder = a.semaphore(&name, 3).unwrap();
    let held: Vec<_> = futures_util::future::join_all((0..3).map(|_| holder.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let unfair = b.options().fair(false).wait(Duration::from_secs(10));
    let sem_b = b.semaphore(&name, 3).unwrap();
    let waiter = tokio::spawn(async move { sem_b.acquire_with(&unfair).await });
    // Not an event to wait for: had it not begun waiting yet, it finds a
    // free permit all the same.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        a.backend()
            .waiting_for(&name, LockKind::Permit { permits: 3 })
            .await
            .unwrap(),
        0,
        "an unfair waiter takes no place in line"
    );
    for h in held {
        h.unlock().await.unwrap();
    }
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
}

/// Tasks of one owner re-enter and release one read hold while another
/// owner writes: the writer never overlaps a reader, every share comes
/// back, and nothing is left held.
async fn shared_readers_and_a_writer(url: String) {
    let (readers, writer) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("kinds_shared_readers");
    let reading = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicUsize::new(0));
    let tasks = (0..4).map(|_| {
        let (rw, reading, writing) = (readers.rw_lock(&name).unwrap(), reading.clone(), writing.clone());
        tokio::spawn(async move {
            for _ in 0..15 {
                let g = rw.read().await.unwrap();
                reading.fetch_add(1, Ordering::SeqCst);
                assert_eq!(writing.load(Ordering::SeqCst), 0, "a reader beside the writer");
                tokio::task::yield_now().await;
                reading.fetch_sub(1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
        })
    });
    let rw = writer.rw_lock(&name).unwrap();
    let writes = tokio::spawn({
        let (reading, writing) = (reading.clone(), writing.clone());
        async move {
            for _ in 0..5 {
                let g = rw.write().await.unwrap();
                writing.fetch_add(1, Ordering::SeqCst);
                assert_eq!(reading.load(Ordering::SeqCst), 0, "the writer beside a reader");
                tokio::time::sleep(Duration::from_millis(2)).await;
                writing.fetch_sub(1, Ordering::SeqCst);
                g.unlock().await.unwrap();
            }
        }
    });
    for t in futures_util::future::join_all(tasks).await {
        t.unwrap();
    }
    writes.await.unwrap();
    let rw = readers.rw_lock(&name).unwrap();
    assert!(rw.readers().await.unwrap().is_empty(), "every read share came back");
    assert!(rw.writer().await.unwrap().is_none());
}

/// A crowd of one owner's tasks re-enter and give back one read hold and
/// one mutex hold as fast as they can: every release goes through however
/// often the count of shares crosses between one and more under it, and
/// nothing is left held.
async fn shares_turn_over(url: String) {
    const TASKS: usize = 6;
    const ROUNDS: usize = 150;
    let client = lockkit::connect(&url).await.unwrap();
    let name = unique("kinds_shares_turn_over");
    let tasks = (0..TASKS).map(|i| {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move {
            for _ in 0..ROUNDS {
                if i % 2 == 0 {
                    let g = client.rw_lock(&name).unwrap().read().await.unwrap();
                    tokio::task::yield_now().await;
                    g.unlock().await.unwrap();
                } else {
                    let g = client.lock(&format!("{name}/mutex")).await.unwrap();
                    tokio::task::yield_now().await;
                    g.unlock().await.unwrap();
                }
            }
        })
    });
    for t in futures_util::future::join_all(tasks).await {
        t.unwrap();
    }
    let rw = client.rw_lock(&name).unwrap();
    assert!(rw.readers().await.unwrap().is_empty(), "every read share came back");
    let other = lockkit::connect(&url).await.unwrap();
    let g = other.try_lock(&format!("{name}/mutex")).await.unwrap();
    assert!(g.is_some(), "every mutex share came back");
    g.unwrap().unlock().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_kinds() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    waiters_leave(url.clone()).await;
    permit_counts(url.clone()).await;
    shared_readers_and_a_writer(url.clone()).await;
    shares_turn_over(url).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_kinds() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        waiters_leave(url.clone()).await;
        permit_counts(url.clone()).await;
        shared_readers_and_a_writer(url.clone()).await;
        shares_turn_over(url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_kinds() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        waiters_leave(url.clone()).await;
        permit_counts(url.clone()).await;
        shared_readers_and_a_writer(url.clone()).await;
        shares_turn_over(url).await;
    }
}
