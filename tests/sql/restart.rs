//! Fencing tokens and clients across database restarts, on a private MariaDB
//! and a private Postgres (their own data directories under `target/` and
//! their own ports, started and stopped with `scripts/services`), so no other
//! test's server is touched.
//!
//! Each runs where its database is available: when `LOCKKIT_MYSQL_URL` /
//! `LOCKKIT_POSTGRES_URL` is set (the shared server is up, so the packages
//! are installed) or `LOCKKIT_REQUIRE_SERVICES=1`; skipped otherwise. Ports:
//! 13317 and 15442 unless `LOCKKIT_RESTART_MYSQL_PORT` /
//! `LOCKKIT_RESTART_POSTGRES_PORT` say otherwise.

#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use lockkit::{LockClient, LockError};

// Names take a `tag()`, a suffix no earlier run used: the private servers
// keep their data.
use crate::common::tag;
use crate::private_server::{PrivateServer, available};

async fn cycle(client: &LockClient, name: &str, last: &mut u64) {
    let guard = client
        .lock_with(name, &client.options().wait(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("lock after a restart: {e:?}"));
    assert!(
        guard.fencing_token() > *last,
        "token {} after {last}: tokens must grow across restarts",
        guard.fencing_token()
    );
    *last = guard.fencing_token();
    guard.unlock().await.unwrap();
    assert!(
        client.inspect(name).await.unwrap().is_none(),
        "released rows are deleted"
    );
}

async fn tokens_grow_across_restarts(server: &PrivateServer) {
    let url = format!("{}?connect_timeout=2s&sweep_interval=200ms", server.up());
    let client = lockkit::connect(&url).await.expect("connect to the private server");
    let names = ["restart/a", "restart/b", "restart/锁 'quoted'"];
    let mut last = [0u64; 3];
    for _ in 0..3 {
        for (name, last) in names.iter().zip(&mut last) {
            cycle(&client, name, last).await;
        }
    }

    for how in ["clean shutdown", "crash"] {
        // Held across the restart, released after it: the pooled connections
        // the release draws first died with the server (four held at once
        // leave four of them in the pool).
        let warm = futures_util::future::join_all((0..4).map(|i| {
            let client = &client;
            async move { client.lock(&format!("restart/warm/{i}")).await }
        }))
        .await;
        for g in warm {
            g.expect("lock").unlock().await.expect("unlock");
        }
        let kept_name = format!("restart/kept/{}", tag());
        let kept = client
            .lock_with(&kept_name, &client.options().ttl(Duration::from_secs(120)))
            .await
            .expect("lock before the restart");
        match how {
            "clean shutdown" => server.down(),
            _ => server.crash(),
        }
        // While the server is down: a typed, retryable error, not a panic.
        let started = std::time::Instant::now();
        let e = client.try_lock(names[0]).await.expect_err("the server is down");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "try_lock gives up promptly while the server is down (connect_timeout=2s), took {:?}",
            started.elapsed()
        );
        assert!(
            matches!(e, LockError::Backend { retryable: true, .. }),
            "while down ({how}): {e:?}"
        );
        server.up();
        let unlocked = kept
            .unlock()
            .await
            .unwrap_or_else(|e| panic!("unlock after a restart ({how}): {e:?}"));
        assert!(unlocked.is_free());
        assert!(
            client.inspect(&kept_name).await.unwrap().is_none(),
            "the hold kept across the restart ({how}) is released, not left to its 120 s lease"
        );
        // The same client, not rebuilt, works again, and tokens keep growing.
        for (name, last) in names.iter().zip(&mut last) {
            cycle(&client, name, last).await;
        }
        // So does a new one.
        let fresh = lockkit::connect(&url).await.expect("reconnect");
        cycle(&fresh, names[0], &mut last[0]).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_across_mariadb_restarts() {
    if available("LOCKKIT_MYSQL_URL") {
        tokens_grow_across_restarts(&PrivateServer::new("mysql", "13317")).await;
    }
}

/// Also: after the restart, the Postgres listener is back, so a release in
/// one client wakes a waiter in another at once (its backoff could sleep 30 s),
/// also a waiter that joined the name's wait list before the restart.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_and_notifications_resume_across_postgres_restarts() {
    if !available("LOCKKIT_POSTGRES_URL") {
        return;
    }
    let server = PrivateServer::new("postgres", "15442");
    tokens_grow_across_restarts(&server).await;
    let url = format!("{}?max_backoff=30s", server.up());
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    server.down();
    server.up();
    // Both listeners reconnect on their own; give them a moment to LISTEN.
    let held = a
        .lock_with("restart/notify", &a.options().wait(Duration::from_secs(60)))
        .await
        .expect("lock after the restart");
    let b2 = b.clone();
    let waiter = tokio::spawn(async move {
        b2.lock_with("restart/notify", &b2.options().wait(Duration::from_secs(60)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(3000)).await;
    release_wakes(
        held,
        waiter,
        Duration::from_secs(60),
        "through the reconnected listener",
    )
    .await;

    // A waiter that joined the wait list before a restart: its place is
    // retaken on the new server, so a release after the restart notifies.
    let name = format!("restart/waitlist/{}", tag());
    let held = a
        .lock_with(&name, &a.options().ttl(Duration::from_secs(60)))
        .await
        .unwrap();
    let (b2, n2) = (b.clone(), name.clone());
    let waiter = tokio::spawn(async move { b2.lock_with(&n2, &b2.options().wait(Duration::from_secs(90))).await });
    tokio::time::sleep(Duration::from_millis(1500)).await;
    server.down();
    server.up();
    // The wait list checks its connection every second; the listener
    // reconnects and wakes the waiter once, which finds the name still held.
    // Past 10 s idle, a's pooled connections (dead since the restart) are
    // pinged and replaced on checkout, so its unlock gets through.
    tokio::time::sleep(Duration::from_secs(11)).await;
    assert!(!waiter.is_finished(), "a still holds the name");
    release_wakes(held, waiter, Duration::from_secs(90), "a waiter of before the restart").await;
}

/// Releases `held`; the `waiter` must get the lock (within `bound`) less than
/// 500 ms after the release — woken by it, not by its backoff.
#[cfg(feature = "postgres")]
async fn release_wakes(
    held: lockkit::LockGuard,
    waiter: tokio::task::JoinHandle<Result<lockkit::LockGuard, lockkit::LockError>>,
    bound: Duration,
    what: &str,
) {
    held.unlock().await.unwrap();
    let released = std::time::Instant::now();
    let g = tokio::time::timeout(bound, waiter)
        .await
        .expect("the waiter gets the lock")
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_millis(500),
        "the release woke the waiter {what} ({:?})",
        released.elapsed()
    );
    g.unlock().await.unwrap();
}
