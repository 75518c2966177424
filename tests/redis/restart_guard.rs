//! The restart guard on one server (`?restart_guard=on`), a private
//! `redis-server` without persistence: after a restart that lost the data,
//! the server grants nothing for the quarantine (a lease of the client that
//! finds it) — `try_lock` fails with a retryable [`Quarantined`] error, a
//! waiting `lock` waits it out — so a hold taken before the restart is
//! never granted again while its lease may run. Without the guard the
//! server grants it at once.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockOptions};
use lockkit_redis::Quarantined;
use redis::{Server, quarantine_of};

const NAME: &str = "guarded";

async fn client(server: &Server, query: &str) -> LockClient {
    lockkit::connect(&format!("{}{query}", server.url()))
        .await
        .expect("connect")
}

/// A lease of 4 s that is not extended: its end is known.
fn fixed() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(4))
        .auto_extend(false)
        .wait(Duration::from_secs(30))
}

/// `client`'s `try_lock` of `NAME`, tried again while it fails for want of
/// a connection (right after a restart), not for a quarantine.
async fn try_answered(client: &LockClient) -> Result<Option<lockkit::LockGuard>, LockError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = client.try_lock_with(NAME, &fixed()).await;
        match &r {
            Err(e)
                if e.is_retryable()
                    && std::error::Error::source(e).is_some_and(|s| !s.is::<Quarantined>())
                    && Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            _ => return r,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_restarts_empty_grants_nothing_for_the_quarantine() {
    if !redis::available("a_server_that_restarts_empty_grants_nothing_for_the_quarantine") {
        return;
    }
    let mut server = Server::start();
    let (a, b) = (
        client(&server, "?restart_guard=on").await,
        client(&server, "?restart_guard=on").await,
    );
    // A new server has no marker either: the first use waits too.
    let first = a
        .try_lock_with(NAME, &fixed())
        .await
        .expect_err("quarantined on first use");
    assert!(quarantine_of(&first) <= Duration::from_secs(4), "{first}");
    let ga = a
        .lock_with(NAME, &fixed())
        .await
        .expect("lock waits the quarantine out");
    let a_ends = ga.valid_until().expect("a lease");
    server.restart();
    let e = try_answered(&b).await.expect_err("B is refused");
    let left = quarantine_of(&e);
    assert!(
        Instant::now() + left >= a_ends,
        "the quarantine ({left:?}) outlasts A's lease"
    );
    assert!(lockkit::one_line(&e).contains("lost its data"), "{e}");
    // A's release is not refused (its hold went with the data).
    match ga.unlock().await {
        Ok(_) | Err(LockError::NotHeld { .. }) => {}
        Err(e) => panic!("A's release during the quarantine: {e:?}"),
    }
    let gb = b
        .lock_with(NAME, &fixed())
        .await
        .expect("B once the quarantine is over");
    assert!(Instant::now() >= a_ends, "B was granted before A's lease ended");
    gb.unlock().await.expect("unlock");
    // Released and taken again at once: the quarantine is over.
    let gc = a.try_lock_with(NAME, &fixed()).await.expect("try_lock").expect("free");
    gc.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_a_server_that_restarts_empty_grants_at_once() {
    if !redis::available("without_the_guard_a_server_that_restarts_empty_grants_at_once") {
        return;
    }
    let mut server = Server::start();
    let (a, b) = (client(&server, "").await, client(&server, "").await);
    let ga = a.lock_with(NAME, &fixed()).await.expect("lock");
    server.restart();
    let gb = try_answered(&b)
        .await
        .expect("try_lock")
        .expect("granted while A's lease runs: the hazard the guard closes");
    assert!(ga.valid_until().is_some_and(|t| t > Instant::now()));
    drop((ga, gb));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_guard_is_refused_on_a_cluster_and_reads_its_floor() {
    let e = lockkit::connect("redis+cluster://127.0.0.1:1?restart_guard=on")
        .await
        .expect_err("no guard on a cluster");
    assert!(
        matches!(&e, LockError::InvalidConfig { part, .. } if part.contains("restart_guard")),
        "{e:?}"
    );
    let e = lockkit::connect("redis://127.0.0.1:1?restart_guard=soon")
        .await
        .expect_err("not a duration");
    assert!(matches!(&e, LockError::InvalidConfig { .. }), "{e:?}");
}
