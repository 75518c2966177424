//! How SQL waiters wake: never later than the holder's lease end, and on
//! Postgres at the release itself (LISTEN/NOTIFY), even with a backoff that
//! would otherwise sleep for many seconds (`max_backoff=30s`).

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::{Duration, Instant};

#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

use crate::common::{unique, with_params};

/// A waiter whose backoff could sleep 30 s still tries again right after
/// the holder's lease ends: its sleeps are bounded by the remaining lease.
async fn lease_end_bounds_the_wait(url: String) {
    let url = with_params(&url, "max_backoff=30s");
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("lease_end");
    let ttl = Duration::from_millis(1500);
    let held = a
        .lock_with(&name, &a.options().ttl(ttl).auto_extend(false))
        .await
        .unwrap();
    let lease_end = held.valid_until().expect("ttl lease");
    let waiter = b
        .lock_with(&name, &b.options().wait(Duration::from_secs(60)))
        .await
        .unwrap();
    let acquired = Instant::now();
    assert!(acquired >= lease_end, "acquired before the holder's lease ended");
    assert!(
        acquired < lease_end + Duration::from_secs(2),
        "the waiter slept {:?} past the lease end",
        acquired - lease_end
    );
    assert!(held.is_lost());
    assert!(waiter.fencing_token() > held.fencing_token());
    waiter.unlock().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lease_end_bounds_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    lease_end_bounds_the_wait(format!("sqlite://{}/locks.db", dir.path().display())).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_lease_end_bounds_the_wait() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        lease_end_bounds_the_wait(url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_end_bounds_the_wait() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        lease_end_bounds_the_wait(url).await;
    }
}

/// A release in one client wakes a waiter in another at once. The waiter's
/// backoff has grown to seconds by then, so without the notification it would
/// usually sleep on; three rounds make a pass by luck unlikely.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_release_notifies_waiters() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let url = with_params(&url, "max_backoff=30s");
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let mut fast = 0;
    for _ in 0..3 {
        let name = unique("notify");
        let held = a
            .lock_with(&name, &a.options().ttl(Duration::from_secs(60)))
            .await
            .unwrap();
        let (b2, n2) = (b.clone(), name.clone());
        let waiter = tokio::spawn(async move { b2.lock_with(&n2, &b2.options().wait(Duration::from_secs(60))).await });
        // Let the waiter's backoff grow to seconds.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!waiter.is_finished());
        held.unlock().await.unwrap();
        let released = Instant::now();
        let g = tokio::time::timeout(Duration::from_secs(60), waiter)
            .await
            .expect("the waiter gets the lock")
            .unwrap()
            .unwrap();
        if released.elapsed() < Duration::from_millis(300) {
            fast += 1;
        }
        g.unlock().await.unwrap();
    }
    assert_eq!(fast, 3, "every release woke the waiter within 300 ms");
}

/// Postgres releases `NOTIFY` only when somebody waits (a NOTIFY serializes
/// commits): an uncontended lock + unlock sends nothing on the table's
/// channel, a release with a waiter in another client sends the name.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_notifies_only_when_somebody_waits() {
    let Some(base) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let url = with_params(&base, "table=lockkit_notify_check&max_backoff=30s");
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let mut heard = sqlx::postgres::PgListener::connect(&base).await.unwrap();
    heard.listen("lockkit_lockkit_notify_check").await.unwrap();

    let name = unique("quiet");
    for _ in 0..3 {
        a.lock(&name).await.unwrap().unlock().await.unwrap();
    }
    assert_eq!(quiet(&mut heard).await, None, "uncontended releases notify nobody");

    let held = a.lock(&name).await.unwrap();
    let (b2, n2) = (b.clone(), name.clone());
    let waiter = tokio::spawn(async move { b2.lock_with(&n2, &b2.options().wait(Duration::from_secs(60))).await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "b waits");
    let token = held.fencing_token();
    held.unlock().await.unwrap();
    let payload = tokio::time::timeout(Duration::from_secs(30), heard.recv())
        .await
        .expect("the release with a waiter notifies")
        .unwrap()
        .payload()
        .to_owned();
    // The name (hex) and the released hold's token, by which the releasing
    // process knows its own notification.
    let hex: String = name.bytes().map(|b| format!("{b:02x}")).collect();
    assert_eq!(payload, format!("{hex} {token}"));
    let g = tokio::time::timeout(Duration::from_secs(60), waiter)
        .await
        .expect("b gets the lock")
        .unwrap()
        .unwrap();
    g.unlock().await.unwrap();
    // b leaves the wait list (its connection keeps the place a quarter of
    // a second after its last waiter left, then gives it up in the
    // background): from then on an uncontended release notifies nobody.
    let mut heard_after = Vec::new();
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while tokio::time::Instant::now() < until {
        a.lock(&name).await.unwrap().unlock().await.unwrap();
        match quiet(&mut heard).await {
            None => return,
            Some(payload) => heard_after.push(payload),
        }
    }
    panic!("releases kept notifying after the waiter was served: {heard_after:?}");
}

/// A notification heard within half a second, if any.
#[cfg(feature = "postgres")]
async fn quiet(listener: &mut sqlx::postgres::PgListener) -> Option<String> {
    tokio::time::timeout(Duration::from_millis(500), listener.recv())
        .await
        .ok()
        .map(|n| n.unwrap().payload().to_owned())
}
