//! `wait_replicas=N` on private servers started by the test: a master and
//! its replica in single and sentinel mode, and a cluster of three masters
//! with a replica each. With the replica answering, a hold is on it as soon
//! as `lock` returns; with the replica frozen (SIGSTOP), acquisitions fail
//! with a retryable error and leave nothing on the master, extensions fail,
//! and the watchdog's lost signal fires.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockError, LockOptions};
use redis::{ClusterNode, Sentinel, Server, eventually, lock_key, parse_cluster_nodes, stored_hold};

/// Parameters of every URL here: a bound well above a healthy replica's
/// acknowledgement, even on a busy machine.
const WAIT_1: &str = "wait_replicas=1&wait_replicas_timeout=1s";

/// The hold count `name` has on `server` (0: none), read on one
/// connection after `READONLY`, so a cluster replica answers too.
fn count_on(server: &Server, name: &str) -> u32 {
    let out = server.cli_session(&format!("READONLY\nGET \"{}\"\n", lock_key(name)));
    out.lines().last().and_then(stored_hold).map_or(0, |(_, count)| count)
}

/// Asserts that `r` failed with the retryable error of a short
/// acknowledgement, `acked` of `asked` replicas.
fn assert_short_ack<T: std::fmt::Debug>(r: Result<T, LockError>, acked: u32, asked: u32, what: &str) {
    let e = r.expect_err(what);
    assert!(e.is_retryable(), "{what}: not retryable: {e:?}");
    let line = e.to_line();
    assert!(
        line.contains(&format!("{acked} of {asked} replicas acknowledged")),
        "{what}: {line}"
    );
}

/// The scenario every mode runs: `master`'s only replica is `replica`, and
/// `url` asks for one of them.
async fn one_replica_is_waited_for(url: &str, master: &Server, replica: &Server) {
    let a = lockkit::connect(url).await.expect("connect");
    let b = lockkit::connect(url).await.expect("connect");
    let name = "waited";
    let opts = LockOptions::new().ttl(Duration::from_secs(30));

    // The hold, and a re-entry, are on the replica once lock returns.
    let outer = a.lock_with(name, &opts).await.expect("lock");
    assert_eq!(count_on(replica, name), 1, "the replica has the hold when lock returns");
    let inner = a.lock_with(name, &opts).await.expect("re-enter");
    assert_eq!(
        count_on(replica, name),
        2,
        "the replica has the re-entry when lock returns"
    );
    inner.unlock().await.expect("unlock");
    outer.extend(Duration::from_secs(30)).await.expect("extend");

    replica.freeze();
    let other = "not-waited";
    assert_short_ack(b.try_lock(other).await, 0, 1, "try_lock with the replica frozen");
    assert_eq!(
        count_on(master, other),
        0,
        "the master keeps no hold of the failed try_lock"
    );
    assert!(a.inspect(other).await.expect("inspect").is_none());
    // A waiting lock tries again until its wait runs out, then fails the same way.
    let started = Instant::now();
    let waited = b
        .lock_with(other, &LockOptions::new().wait(Duration::from_millis(1500)))
        .await;
    assert_short_ack(waited, 0, 1, "lock with the replica frozen");
    assert!(
        started.elapsed() >= Duration::from_millis(1500),
        "lock gave up before its wait"
    );
    assert_eq!(
        count_on(master, other),
        0,
        "the master keeps no hold of the failed lock"
    );
    // A re-entry is taken back; the outer hold stands.
    assert_short_ack(a.try_lock(name).await, 0, 1, "re-entry with the replica frozen");
    assert_eq!(count_on(master, name), 1, "the re-entry was taken back");
    // An extension fails.
    assert_short_ack(
        outer.extend(Duration::from_secs(30)).await,
        0,
        1,
        "extend with the replica frozen",
    );
    assert!(
        b.try_lock(name).await.expect("try_lock").is_none(),
        "the outer hold stands"
    );
    assert!(!outer.is_lost(), "the outer guard's lease still runs");
    replica.thaw();

    // Back to normal once the replica answers again.
    let g = eventually("try_lock after the replica is back", || async {
        b.try_lock(other).await.ok().flatten()
    })
    .await;
    assert_eq!(count_on(replica, other), 1);
    g.unlock().await.expect("unlock");
    assert!(outer.unlock().await.expect("unlock").is_free());
    assert_eq!(count_on(master, name), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_master_waits_for_its_replica() {
    if !redis::available("single_master_waits_for_its_replica") {
        return;
    }
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let url = format!("{}?{WAIT_1}", master.url());
    one_replica_is_waited_for(&url, &master, &replica).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_master_waits_for_its_replica() {
    if !redis::available("sentinel_master_waits_for_its_replica") {
        return;
    }
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let sentinel = Sentinel::start(&master);
    eventually("the sentinel names the master", || async {
        (sentinel.master_port() == Some(master.port)).then_some(())
    })
    .await;
    let url = format!("redis+sentinel://127.0.0.1:{}/m?{WAIT_1}", sentinel.port);
    one_replica_is_waited_for(&url, &master, &replica).await;
}

/// Two replicas asked for, one there: every acquisition is taken back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_replicas_than_the_master_has_fail_every_acquisition() {
    if !redis::available("more_replicas_than_the_master_has_fail_every_acquisition") {
        return;
    }
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    let url = format!("{}?wait_replicas=2&wait_replicas_timeout=300ms", master.url());
    let a = lockkit::connect(&url).await.expect("connect");
    assert_short_ack(a.try_lock("two").await, 1, 2, "try_lock asking for 2 replicas");
    assert_eq!(count_on(&master, "two"), 0, "no hold left on the master");
    assert_short_ack(
        a.lock_with("two", &LockOptions::new().wait(Duration::from_millis(700)))
            .await,
        1,
        2,
        "lock asking for 2 replicas",
    );
    assert_eq!(count_on(&master, "two"), 0, "no hold left on the master");
    // The same URL without wait_replicas works.
    let plain = lockkit::connect(&master.url()).await.expect("connect");
    let g = plain.try_lock("two").await.expect("try_lock").expect("free");
    g.unlock().await.expect("unlock");
}

/// `WAIT` is sent once per acquisition and extension, never with a release,
/// and never without `wait_replicas`: the default path sends what it sent
/// before the option existed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_is_sent_only_when_asked() {
    if !redis::available("wait_is_sent_only_when_asked") {
        return;
    }
    let master = Server::start();
    let _replica = Server::replica_of(&master);
    let waits = || master.command_calls().get("wait").copied().unwrap_or(0);
    let opts = LockOptions::new().auto_extend(false);
    let plain = lockkit::connect(&master.url()).await.expect("connect");
    for _ in 0..3 {
        let g = plain.lock_with("counted", &opts).await.expect("lock");
        g.extend(Duration::from_secs(30)).await.expect("extend");
        g.unlock().await.expect("unlock");
    }
    assert_eq!(waits(), 0, "no WAIT without wait_replicas");
    let waiting = lockkit::connect(&format!("{}?{WAIT_1}", master.url()))
        .await
        .expect("connect");
    for _ in 0..3 {
        let g = waiting.lock_with("counted", &opts).await.expect("lock");
        g.extend(Duration::from_secs(30)).await.expect("extend");
        g.unlock().await.expect("unlock");
    }
    assert_eq!(
        waits(),
        6,
        "one WAIT per acquisition and per extension, none per release"
    );
}

/// The watchdog's extensions fail while the replica is frozen, so the lost
/// signal fires (at the validity deadline at the latest).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unacknowledged_extensions_end_in_the_lost_signal() {
    if !redis::available("unacknowledged_extensions_end_in_the_lost_signal") {
        return;
    }
    let master = Server::start();
    let replica = Server::replica_of(&master);
    let url = format!("{}?wait_replicas=1&wait_replicas_timeout=200ms", master.url());
    let a = lockkit::connect(&url).await.expect("connect");
    let guard = a
        .lock_with("watched", &LockOptions::new().ttl(Duration::from_secs(2)))
        .await
        .expect("lock");
    replica.freeze();
    tokio::time::timeout(Duration::from_secs(20), guard.lost())
        .await
        .expect("the lost signal fires while no extension is acknowledged");
    assert!(guard.is_lost());
    replica.thaw();
    guard.abandon();
}

/// Three masters with one replica each: `WAIT` goes to the lock key's own
/// master (a replica of another master being frozen does not matter), and
/// that master's replica has the hold when `lock` returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_waits_for_the_replica_of_the_keys_master() {
    if !redis::available("cluster_waits_for_the_replica_of_the_keys_master") {
        return;
    }
    let nodes: Vec<Server> = (0..6)
        .map(|_| Server::start_with(&["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
        .collect();
    let addrs: Vec<String> = nodes.iter().map(Server::addr).collect();
    let mut create = vec!["--cluster", "create"];
    create.extend(addrs.iter().map(String::as_str));
    create.extend(["--cluster-replicas", "1", "--cluster-yes"]);
    nodes[0].cli(&create);
    let name = "clustered";
    let (master, replica) = eventually("the cluster with a synchronised replica per master", || async {
        let all_ok = nodes.iter().all(|n| {
            n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok")
                && (n.cli(&["ROLE"]).starts_with("master")
                    || n.cli(&["INFO", "replication"]).contains("master_link_status:up"))
        });
        if !all_ok {
            return None;
        }
        let slot: u16 = nodes[0]
            .cli(&["CLUSTER", "KEYSLOT", &lock_key(name)])
            .trim()
            .parse()
            .ok()?;
        let (master_id, master_port) = cluster_nodes(&nodes[0]).into_iter().find_map(|n| {
            (n.flags.contains("master") && n.slots.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot)))
                .then_some((n.id, n.port))
        })?;
        let replica_port = cluster_nodes(&nodes[0])
            .into_iter()
            .find(|n| n.flags.contains("slave") && n.master == master_id)?
            .port;
        let master = nodes.iter().position(|n| n.port == master_port)?;
        let replica = nodes.iter().position(|n| n.port == replica_port)?;
        Some((master, replica))
    })
    .await;
    let (master, replica) = (&nodes[master], &nodes[replica]);
    // A replica of another master.
    let elsewhere = nodes
        .iter()
        .find(|n| n.port != replica.port && n.cli(&["ROLE"]).starts_with("slave"))
        .expect("another replica");

    let url = format!("redis+cluster://{}?{WAIT_1}", master.addr());
    let a = lockkit::connect(&url).await.expect("connect");
    elsewhere.freeze();
    let g = a
        .lock(name)
        .await
        .expect("lock while another master's replica is frozen");
    assert_eq!(
        count_on(replica, name),
        1,
        "the key's replica has the hold when lock returns"
    );
    g.unlock().await.expect("unlock");
    elsewhere.thaw();

    replica.freeze();
    assert_short_ack(a.try_lock(name).await, 0, 1, "try_lock with the key's replica frozen");
    assert_eq!(
        count_on(master, name),
        0,
        "the master keeps no hold of the failed try_lock"
    );
    replica.thaw();
    let g = eventually("try_lock after the replica is back", || async {
        a.try_lock(name).await.ok().flatten()
    })
    .await;
    assert_eq!(count_on(replica, name), 1);
    assert!(g.unlock().await.expect("unlock").is_free());
}

fn cluster_nodes(node: &Server) -> Vec<ClusterNode> {
    parse_cluster_nodes(&node.cli(&["CLUSTER", "NODES"]))
}

/// Redlock has no replicas to wait for: the URL is refused before any
/// connection is tried.
#[tokio::test]
async fn redlock_refuses_wait_replicas() {
    let e = lockkit::connect("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?wait_replicas=1")
        .await
        .expect_err("refused");
    match e {
        LockError::InvalidConfig { part, reason } => {
            assert_eq!(part, "query parameter wait_replicas");
            assert!(reason.contains("redlock"), "{reason}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let e = lockkit::connect("redis://127.0.0.1:1?wait_replicas=x")
        .await
        .expect_err("refused");
    assert!(
        matches!(e, LockError::InvalidConfig { ref part, .. } if part == "query parameter wait_replicas"),
        "{e:?}"
    );
    let e = lockkit::connect("redis://127.0.0.1:1?wait_replicas=1&wait_replicas_timeout=10s")
        .await
        .expect_err("refused");
    assert!(
        matches!(e, LockError::InvalidConfig { ref part, .. } if part == "query parameter wait_replicas_timeout"),
        "{e:?}"
    );
}
