//! Sentinel mode across a failover, on private processes: a master, its
//! replica and one sentinel. After `SENTINEL FAILOVER` the same client
//! finds the new master, keeps its hold, and its waiters still hear
//! releases.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::Duration;

use lockkit::{LockClient, LockGuard, LockOptions};
use redis::{Sentinel, Server, eventually};

async fn lock_retrying(client: &LockClient, name: &str, opts: &LockOptions) -> LockGuard {
    eventually(&format!("lock {name}"), || async {
        match client.lock_with(name, opts).await {
            Ok(g) => Some(g),
            Err(e) if e.is_retryable() => None,
            Err(e) => panic!("lock {name}: {e:?}"),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_failover() {
    if !redis::available("the_client_follows_a_failover") {
        return;
    }
    follows_a_failover("").await;
}

/// The same with `wait_replicas=1`: every acquisition is a pipeline whose
/// errors are replies, and the demoted master's READONLY among them still
/// sends the client to the sentinels. The old master becomes the new one's
/// replica, so acquisitions are acknowledged again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_follows_a_failover_waiting_for_replicas() {
    if !redis::available("the_client_follows_a_failover_waiting_for_replicas") {
        return;
    }
    follows_a_failover("?wait_replicas=1").await;
}

async fn follows_a_failover(params: &str) {
    let master = Server::start();
    let replica_of = master.port.to_string();
    let replica = Server::start_with(&["--replicaof", "127.0.0.1", &replica_of]);
    let sentinel = Sentinel::start(&master);
    eventually("the sentinel sees the master and its replica", || async {
        (sentinel.master_port() == Some(master.port) && sentinel.cli(&["SENTINEL", "REPLICAS", "m"]).contains("slave"))
            .then_some(())
    })
    .await;
    let url = format!("redis+sentinel://127.0.0.1:{}/m{params}", sentinel.port);
    let (a, b) = (
        lockkit::connect(&url).await.expect("connect"),
        lockkit::connect(&url).await.expect("connect"),
    );
    let opts = LockOptions::new().ttl(Duration::from_secs(30));
    let held = a.lock_with("kept", &opts).await.expect("lock");
    let g = a.lock_with("before", &opts).await.expect("lock");
    let before = g.fencing_token();
    g.unlock().await.expect("unlock");
    eventually("the replica has the hold", || async {
        (replica.cli(&["EXISTS", &redis::lock_key("kept")]).trim() == "1").then_some(())
    })
    .await;

    sentinel.cli(&["SENTINEL", "FAILOVER", "m"]);
    eventually("the sentinel names the replica as master", || async {
        (sentinel.master_port() == Some(replica.port)).then_some(())
    })
    .await;

    // The same clients work on the new master.
    let g = lock_retrying(&a, "after", &opts).await;
    assert!(g.fencing_token() > before, "tokens keep growing across the failover");
    // The hold taken before the failover is still there, and still A's.
    let info = eventually("inspect on the new master", || async {
        b.inspect("kept").await.ok().flatten()
    })
    .await;
    assert_eq!((info.owner.as_str(), info.token), (a.owner(), held.fencing_token()));
    eventually("the hold extends on the new master", || async {
        match held.extend(Duration::from_secs(30)).await {
            Ok(()) => Some(()),
            Err(e) if e.is_retryable() => None,
            Err(e) => panic!("extend: {e:?}"),
        }
    })
    .await;
    // A waiter on the new master is woken by the release.
    let waiter = tokio::spawn({
        let (b, opts) = (b.clone(), opts.clone());
        async move { b.lock_with("after", &opts).await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    g.unlock().await.expect("unlock");
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release on the new master")
        .expect("task")
        .expect("lock");
    gb.unlock().await.expect("unlock");
    held.unlock().await.expect("unlock");
    assert_eq!(replica.cli(&["ROLE"]).lines().next(), Some("master"));
}
