//! Recovery after a Redis restart, on a private server: the same client
//! works again without being rebuilt (errors in between are typed and
//! retryable), and a waiter is not left waiting for a release that was lost
//! with the server.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockGuard, LockOptions};
use redis::Server;

async fn lock_until_ok(client: &LockClient, name: &str, opts: &LockOptions) -> (LockGuard, usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = 0;
    loop {
        match client.lock_with(name, opts).await {
            Ok(g) => return (g, errors),
            Err(e @ LockError::Backend { retryable: true, .. }) if Instant::now() < deadline => {
                errors += 1;
                let _ = e;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("after a restart: expected success or a retryable backend error, got {e:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_client_works_after_a_restart() {
    if !redis::available("the_same_client_works_after_a_restart") {
        return;
    }
    let mut server = Server::start();
    let a = lockkit::connect(&server.url()).await.expect("connect");
    let opts = LockOptions::new().ttl(Duration::from_secs(30));
    let g = a.lock_with("job", &opts).await.expect("lock");
    let token = g.fencing_token();
    g.unlock().await.expect("unlock");
    for _ in 0..3 {
        server.restart();
        let (g, _errors) = lock_until_ok(&a, "job", &opts).await;
        assert!(g.fencing_token() > token, "tokens keep growing across restarts");
        g.unlock().await.expect("unlock");
    }
    // While the server is down: typed, retryable errors, promptly.
    server.stop();
    let started = Instant::now();
    let e = a.try_lock("job").await.expect_err("server down");
    assert!(matches!(e, LockError::Backend { retryable: true, .. }), "{e:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    server.restart();
    let (g, _) = lock_until_ok(&a, "job", &opts).await;
    g.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_when_the_server_comes_back() {
    let Some((mut server, a, b)) = redis::two_clients("a_waiter_is_woken_when_the_server_comes_back").await else {
        return;
    };
    let held = LockOptions::new().ttl(Duration::from_secs(60)).auto_extend(false);
    let ga = a.lock_with("job", &held).await.expect("lock");
    let waiter = tokio::spawn(async move {
        b.lock_with(
            "job",
            &LockOptions::new()
                .ttl(Duration::from_secs(60))
                .wait(Duration::from_secs(50)),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The restart loses A's hold (no persistence) and no release is ever
    // published: B must notice without waiting out the 60 s lease.
    server.restart();
    let gb = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter acquires soon after the server is back")
        .expect("task")
        .expect("lock");
    assert!(gb.fencing_token() > ga.fencing_token());
    ga.abandon();
    gb.unlock().await.expect("unlock");
}
