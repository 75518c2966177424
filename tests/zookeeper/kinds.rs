//! Semaphores and read-write locks on ZooKeeper, beyond the kit: a writer
//! that comes first waits for a reader its predecessor's owner was granted
//! beside its write hold, and a permit's or a writer's wait that runs out
//! or is dropped leaves no node in the line.

use std::time::Duration;

use lockkit::{LockError, LockKind, LockOptions};
use tokio::time::Instant;

use crate::support::{BOUND, process, server};

fn unique(case: &str) -> String {
    format!("kinds-{case}-{}", lockkit_core::raw::new_attempt_id())
}

/// Waits (up to [`BOUND`]) until `check` holds.
async fn until<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let deadline = Instant::now() + BOUND;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reads beside its own write hold while C's writer waits behind it;
/// when A's write hold goes, C comes first but must wait for A's reader.
#[tokio::test]
async fn a_writer_waits_for_a_reader_granted_beside_its_owners_write() {
    let Some(server) = server() else { return };
    let name = unique("beside");
    let (_, a) = process(&server, None).await;
    let (c_backend, c) = process(&server, None).await;
    let (ra, rc) = (a.rw_lock(&name).unwrap(), c.rw_lock(&name).unwrap());
    let w = ra.write().await.expect("A writes");
    let writer = tokio::spawn(async move { rc.write().await.expect("C writes") });
    until("C's writer queued", async || {
        a.backend().waiting_for(&name, LockKind::Write).await.unwrap() == 1
    })
    .await;
    let r = ra.read().await.expect("A reads beside its write hold");
    let first = w.fencing_token();
    assert_eq!(r.fencing_token(), first, "a reader carries the write token");
    let watches = c_backend.stats().watches;
    w.unlock().await.expect("A's write hold goes");
    // C is first in line now: it wakes and must watch A's reader instead.
    until("C's writer watching A's reader", async || {
        c_backend.stats().watches > watches
    })
    .await;
    assert!(
        !writer.is_finished(),
        "a writer was granted beside another owner's reader"
    );
    let readers: Vec<String> = ra.readers().await.unwrap().into_iter().map(|i| i.owner).collect();
    assert_eq!(readers, [a.owner().to_owned()]);
    assert_eq!(ra.writer().await.unwrap(), None);
    r.unlock().await.expect("A's reader goes");
    let g = tokio::time::timeout(BOUND, writer).await.expect("C writes").unwrap();
    assert!(g.fencing_token() > first, "a writer orders after every earlier writer");
    g.unlock().await.unwrap();
}

/// A permit's wait that runs out, and one that is dropped, leave no node:
/// the next acquisition after the holder does not wait for them.
#[tokio::test]
async fn an_abandoned_permit_wait_leaves_no_node() {
    let Some(server) = server() else { return };
    let name = unique("permit-wait");
    let (_, a) = process(&server, None).await;
    let (_, b) = process(&server, None).await;
    let (sa, sb) = (a.semaphore(&name, 1).unwrap(), b.semaphore(&name, 1).unwrap());
    let held = sa.acquire().await.expect("A's permit");
    let short = LockOptions::new().wait(Duration::from_millis(300));
    match sb.acquire_with(&short).await {
        Err(LockError::WaitTimeout { .. }) => {}
        other => panic!("expected a wait timeout, got {other:?}"),
    }
    let kind = LockKind::Permit { permits: 1 };
    assert_eq!(
        b.backend().waiting_for(&name, kind).await.unwrap(),
        0,
        "left before it returned"
    );
    let dropped = tokio::spawn({
        let sb = sb.clone();
        async move { sb.acquire().await }
    });
    until("B's permit queued", async || {
        b.backend().waiting_for(&name, kind).await.unwrap() == 1
    })
    .await;
    dropped.abort();
    until("the dropped wait's node gone", async || {
        b.backend().waiting_for(&name, kind).await.unwrap() == 0
    })
    .await;
    held.unlock().await.unwrap();
    let next = sb.try_acquire().await.unwrap().expect("the permit is free");
    assert_eq!(sb.holders().await.unwrap().len(), 1);
    next.unlock().await.unwrap();
}

/// A writer's wait that is dropped leaves no node: readers that come
/// after it are not kept out by it.
#[tokio::test]
async fn a_dropped_write_wait_leaves_no_node() {
    let Some(server) = server() else { return };
    let name = unique("write-wait");
    let (_, a) = process(&server, None).await;
    let (_, b) = process(&server, None).await;
    let (ra, rb) = (a.rw_lock(&name).unwrap(), b.rw_lock(&name).unwrap());
    let reading = ra.read().await.expect("A reads");
    let dropped = tokio::spawn({
        let rb = rb.clone();
        async move { rb.write().await }
    });
    until("B's writer queued", async || {
        b.backend().waiting_for(&name, LockKind::Write).await.unwrap() == 1
    })
    .await;
    assert!(
        rb.try_read().await.unwrap().is_none(),
        "a waiting writer keeps readers out"
    );
    dropped.abort();
    until("the dropped writer's node gone", async || {
        b.backend().waiting_for(&name, LockKind::Read).await.unwrap() == 0
    })
    .await;
    let second = rb.try_read().await.unwrap().expect("readers share again");
    assert_eq!(ra.readers().await.unwrap().len(), 2);
    second.unlock().await.unwrap();
    reading.unlock().await.unwrap();
}
