//! Redlock's restart guard, on three private nodes: a node that comes back
//! without its data (and so without its marker) takes no part in a quorum
//! until every lease it may have carried has ended — also when it rejoins
//! at once — while releases go on; without the guard, the same immediate
//! rejoin admits a second owner.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockClient, LockGuard, LockOptions};
use redis::Server;

const NAME: &str = "guarded";

fn three() -> Vec<Server> {
    (0..3).map(|_| Server::start()).collect()
}

async fn client(nodes: &[Server], query: &str) -> LockClient {
    let hosts: Vec<String> = nodes.iter().map(Server::addr).collect();
    lockkit::connect(&format!("redlock://{}{query}", hosts.join(",")))
        .await
        .expect("connect to the redlock nodes")
}

/// A lease of 4 s that is not extended: its end is known.
fn fixed() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(4))
        .auto_extend(false)
        .wait(Duration::from_secs(10))
}

/// The quarantine `node` has left, in ms (0: over; `None`: no marker).
fn quarantine_left(node: &Server) -> Option<i64> {
    let q = node.cli(&["HGET", "lockkit:node", "q"]);
    let q: i64 = q.trim().parse().ok()?;
    Some((q - node.time_ms() as i64).max(0))
}

/// Whether `client`'s `try_lock` of `NAME` is refused (busy): tried
/// again while it fails with a retryable error, as right after a node's
/// restart, before its client connection is back. A grant panics.
async fn refused(client: &LockClient) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match client.try_lock_with(NAME, &fixed()).await {
            Ok(None) => return true,
            Ok(Some(g)) => panic!("granted while another owner's lease runs: token {}", g.fencing_token()),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("try_lock: {e:?}"),
        }
    }
}

/// The first acquisition on new nodes gives each its marker, with no
/// quarantine (nothing was granted before); A then holds `NAME` on nodes
/// 0 and 1 only: node 2 refuses it (another owner's hold planted there by
/// hand, removed right after).
async fn held_on_nodes_0_and_1(nodes: &[Server], a: &LockClient) -> LockGuard {
    a.lock_with("warm-up", &fixed())
        .await
        .expect("a first lock on new nodes")
        .unlock()
        .await
        .expect("unlock");
    for (i, node) in nodes.iter().enumerate() {
        assert_eq!(quarantine_left(node), Some(0), "node {i} got its marker, free");
    }
    let key = redis::lock_key(NAME);
    nodes[2].cli(&["SET", &key, "2|1|1||0000000000000001:1,|someone", "PX", "60000"]);
    let ga = a.lock_with(NAME, &fixed()).await.expect("A on nodes 0 and 1");
    nodes[2].cli(&["DEL", &key]);
    for i in [0, 1] {
        let stored = nodes[i].cli(&["GET", &key]);
        assert!(
            redis::stored_hold(&stored).is_some(),
            "node {i} holds for A: {stored:?}"
        );
    }
    ga
}

/// The hazard the guard exists for: A's hold stands on exactly a quorum
/// (nodes 0 and 1), node 0 restarts empty and rejoins at once, and —
/// without the guard — node 0 and the free node 2 grant B: two owners.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_guard_an_emptied_node_admits_a_second_owner() {
    if !redis::available("without_the_guard_an_emptied_node_admits_a_second_owner") {
        return;
    }
    let mut nodes = three();
    let a = client(&nodes, "?restart_guard=off").await;
    let b = client(&nodes, "?restart_guard=off").await;
    nodes[2].cli(&[
        "SET",
        &redis::lock_key(NAME),
        "2|1|1||0000000000000001:1,|someone",
        "PX",
        "60000",
    ]);
    let long = fixed().ttl(Duration::from_secs(30));
    let ga = a.lock_with(NAME, &long).await.expect("A on nodes 0 and 1");
    nodes[2].cli(&["DEL", &redis::lock_key(NAME)]);
    nodes[0].restart();
    // Tried until node 0's connection is back.
    let deadline = Instant::now() + Duration::from_secs(10);
    let gb = loop {
        match b.try_lock_with(NAME, &long).await {
            Ok(Some(g)) => break g,
            Ok(None) | Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("B is granted on nodes 0 and 2 while A still holds: {other:?}"),
        }
    };
    assert!(!ga.is_lost() && ga.valid_until().is_some_and(|t| t > Instant::now()));
    drop(gb);
    drop(ga);
}

/// One node of three restarts empty and rejoins at once while A's hold
/// stands on it and one other node: the node is quarantined for as long
/// as the other nodes' leases may run, B is refused meanwhile, A's release
/// still works, and once the quarantine is over the node grants again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_emptied_node_sits_out_until_the_leases_it_carried_end() {
    if !redis::available("an_emptied_node_sits_out_until_the_leases_it_carried_end") {
        return;
    }
    let mut nodes = three();
    let (a, b) = (client(&nodes, "").await, client(&nodes, "").await);
    let ga = held_on_nodes_0_and_1(&nodes, &a).await;
    nodes[0].restart();
    assert_eq!(quarantine_left(&nodes[0]), None, "node 0 lost its marker");
    for _ in 0..3 {
        assert!(refused(&b).await, "B must not hold while A's lease runs");
    }
    let left = quarantine_left(&nodes[0]).expect("node 0 got a quarantine");
    assert!(left > 0, "node 0 is quarantined");
    assert!(
        left as u128
            >= ga
                .valid_until()
                .expect("a lease")
                .saturating_duration_since(Instant::now())
                .as_millis(),
        "the quarantine ({left} ms) lasts at least A's lease"
    );
    // The release goes to every node, the quarantined one too.
    let token = ga.fencing_token();
    ga.unlock().await.expect("A's release works during the quarantine");
    let gb = b.lock_with(NAME, &fixed()).await.expect("B on nodes 1 and 2");
    assert!(gb.fencing_token() > token);
    let key = redis::lock_key(NAME);
    assert_eq!(
        redis::stored_hold(&nodes[0].cli(&["GET", &key])),
        None,
        "the quarantined node granted nothing"
    );
    gb.unlock().await.expect("unlock");
    redis::eventually("node 0's quarantine ends", || async {
        (quarantine_left(&nodes[0]) == Some(0)).then_some(())
    })
    .await;
    let gc = b.lock_with(NAME, &fixed()).await.expect("lock after the quarantine");
    assert!(
        redis::stored_hold(&nodes[0].cli(&["GET", &key])).is_some(),
        "node 0 grants again"
    );
    gc.unlock().await.expect("unlock");
}

/// Two nodes of three (a majority) restart empty while A holds on all
/// three: the one node left reports its lease bound, which alone does not
/// bound every lease, so the two are quarantined for at least a lease of
/// the attempt that found them too. B is refused (busy) meanwhile, and
/// granted only after A's lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_nodes_emptied_while_a_hold_stands() {
    if !redis::available("two_of_three_nodes_emptied_while_a_hold_stands") {
        return;
    }
    let mut nodes = three();
    let (a, b) = (client(&nodes, "").await, client(&nodes, "").await);
    let ga = a.lock_with(NAME, &fixed()).await.expect("A on all three");
    let a_ends = ga.valid_until().expect("a lease");
    nodes[0].restart();
    nodes[1].restart();
    // A quarantined node's answer is a refusal: busy, not an error.
    assert!(refused(&b).await, "B must not hold while A's lease runs");
    for i in [0, 1] {
        assert!(
            quarantine_left(&nodes[i]).is_some_and(|q| q > 0),
            "node {i} is quarantined"
        );
    }
    let gb = b
        .lock_with(NAME, &fixed().wait(Duration::from_secs(30)))
        .await
        .expect("B once the quarantine is over");
    assert!(Instant::now() >= a_ends, "B was granted before A's lease ended");
    assert!(gb.fencing_token() > ga.fencing_token());
    gb.unlock().await.expect("unlock");
    drop(ga);
}
