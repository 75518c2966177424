//! Redlock on five private Redis masters started by the test (the shared
//! services are left alone): node faults, token growth, round trips.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockOptions};
use redis::Server;

/// Five new nodes that carry lockkit's restart-guard marker with no
/// quarantine, as nodes in service do (a node without one looks like a
/// node that lost its data: see `restart_guard`).
fn five() -> Vec<Server> {
    let nodes: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    for node in &nodes {
        node.cli(&["HSET", "lockkit:node", "q", "0", "e", "0"]);
    }
    nodes
}

fn url(nodes: &[Server]) -> String {
    let hosts: Vec<String> = nodes.iter().map(Server::addr).collect();
    format!("redlock://{}", hosts.join(","))
}

async fn client(nodes: &[Server]) -> LockClient {
    lockkit::connect(&url(nodes))
        .await
        .expect("connect to the redlock nodes")
}

/// A client without the restart guard: for the cases where a node that
/// lost its data takes part again at once.
async fn unguarded(nodes: &[Server]) -> LockClient {
    lockkit::connect(&format!("{}?restart_guard=off", url(nodes)))
        .await
        .expect("connect to the redlock nodes")
}

fn long() -> LockOptions {
    LockOptions::new()
        .ttl(Duration::from_secs(60))
        .wait(Duration::from_secs(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_five_down_still_works() {
    if !redis::available("two_of_five_down_still_works") {
        return;
    }
    let mut nodes = five();
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    nodes[1].stop();
    nodes[3].stop();
    let mut last = 0;
    for _ in 0..5 {
        let g = a
            .lock_with("job", &long())
            .await
            .expect("a quorum of 3 grants the lock");
        assert!(g.fencing_token() > last, "tokens keep growing");
        last = g.fencing_token();
        assert!(
            b.try_lock_with("job", &long()).await.expect("try_lock").is_none(),
            "another owner is excluded with two nodes down"
        );
        let info = b.inspect("job").await.expect("inspect").expect("held");
        assert_eq!((info.owner.as_str(), info.token), (a.owner(), last));
        g.extend(Duration::from_secs(30)).await.expect("extend by a quorum");
        assert!(g.unlock().await.expect("unlock").is_free());
    }
    // A waiter is handed the lock on release with two nodes down.
    let g = a.lock_with("job", &long()).await.expect("lock");
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.lock_with("job", &long()).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    g.unlock().await.expect("unlock");
    let gb = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("handed over promptly")
        .expect("task")
        .expect("lock");
    assert!(gb.fencing_token() > last);
    gb.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_of_five_down_fails_cleanly_within_the_wait() {
    if !redis::available("three_of_five_down_fails_cleanly_within_the_wait") {
        return;
    }
    let mut nodes = five();
    // The three nodes come back empty: with the restart guard they would
    // sit out a quarantine first (see `restart_guard`).
    let a = unguarded(&nodes).await;
    for i in [0, 2, 4] {
        nodes[i].stop();
    }
    let wait = Duration::from_secs(2);
    let started = Instant::now();
    let e = a
        .lock_with("job", &long().wait(wait))
        .await
        .expect_err("no quorum: the lock cannot be granted");
    assert!(
        matches!(e, LockError::Backend { retryable: true, .. }),
        "a typed, retryable backend error, got {e:?}"
    );
    assert!(
        started.elapsed() < wait + Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let message = format!(
        "{e}: {}",
        std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default()
    );
    assert!(message.contains("redlock") && message.contains("3 needed"), "{message}");
    let e = a.try_lock("job").await.expect_err("try_lock without a quorum");
    assert!(matches!(e, LockError::Backend { retryable: true, .. }), "{e:?}");
    // Nothing was left behind on the two live nodes.
    for i in [1, 3] {
        let keys = nodes[i].cli(&["--scan", "--pattern", "lockkit:*:job"]);
        assert!(keys.trim().is_empty(), "node {i} kept {keys:?}");
    }
    // With the nodes back the same client works again.
    for i in [0, 2, 4] {
        nodes[i].restart();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match a.lock_with("job", &long()).await {
            Ok(g) => {
                g.unlock().await.expect("unlock");
                break;
            }
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("redlock did not recover after the nodes came back: {e:?}"),
        }
    }
}

/// A `lock` whose first attempt finds no quorum (three of five nodes
/// stopped for a moment) waits for one within its bound, as it rides out
/// any retryable failure: a crowd whose first attempts time out on a busy
/// machine is served, not failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_rides_out_a_quorum_lost_for_a_moment() {
    if !redis::available("a_lock_rides_out_a_quorum_lost_for_a_moment") {
        return;
    }
    let nodes = five();
    let a = client(&nodes).await;
    nodes[..3].iter().for_each(Server::freeze);
    let waiter = tokio::spawn({
        let a = a.clone();
        async move { a.lock_with("job", &long()).await }
    });
    // Past the node timeout (1 s): the first attempt has failed.
    tokio::time::sleep(Duration::from_secs(2)).await;
    nodes[..3].iter().for_each(Server::thaw);
    let g = waiter
        .await
        .expect("task")
        .expect("granted once the nodes answer again, within the wait");
    g.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_loses_its_keys_does_not_admit_a_second_owner() {
    if !redis::available("a_node_that_loses_its_keys_does_not_admit_a_second_owner") {
        return;
    }
    let mut nodes = five();
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    let ga = a.lock_with("job", &long()).await.expect("lock on all five");
    // Two nodes restart without persistence: the hold is gone from them.
    nodes[0].restart();
    nodes[4].restart();
    for i in [0, 4] {
        assert_eq!(nodes[i].cli(&["DBSIZE"]).trim(), "0", "node {i} lost its keys");
    }
    for _ in 0..5 {
        assert!(
            b.try_lock_with("job", &long()).await.expect("try_lock").is_none(),
            "B must not hold while A still has a quorum (3 of 5)"
        );
    }
    let e = b
        .lock_with("job", &long().wait(Duration::from_millis(300)))
        .await
        .expect_err("B waits in vain");
    assert!(matches!(e, LockError::WaitTimeout { .. }), "{e:?}");
    // B's failed attempts were undone on the restarted nodes (where B
    // still stands in line, the name is left free for it).
    for i in [0, 4] {
        let stored = nodes[i].cli(&["GET", &redis::lock_key("job")]);
        assert_eq!(
            redis::stored_hold(&stored),
            None,
            "node {i} kept B's partial hold: {stored:?}"
        );
    }
    let info = b.inspect("job").await.expect("inspect").expect("held");
    assert_eq!((info.owner.as_str(), info.token), (a.owner(), ga.fencing_token()));
    ga.extend(Duration::from_secs(60))
        .await
        .expect("A still extends with a quorum");
    assert!(!ga.is_lost());
    let token = ga.fencing_token();
    ga.unlock().await.expect("unlock");
    let gb = b.lock_with("job", &long()).await.expect("free after A's release");
    assert!(gb.fencing_token() > token);
    gb.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_keep_growing_when_every_node_loses_its_counters() {
    if !redis::available("tokens_keep_growing_when_every_node_loses_its_counters") {
        return;
    }
    let mut nodes = five();
    let a = client(&nodes).await;
    let mut last = 0;
    for _ in 0..3 {
        let g = a.lock_with("job", &long()).await.expect("lock");
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.unlock().await.expect("unlock");
    }
    for n in &mut nodes {
        n.restart();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let g = loop {
        match a.lock_with("job", &long()).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("lock after the restarts: {e:?}"),
        }
    };
    assert!(
        g.fencing_token() > last,
        "token {} after {last}: counters restart from the nodes' clocks",
        g.fencing_token()
    );
    g.unlock().await.expect("unlock");
}

/// When the nodes issue different tokens (their counters differ), the
/// attempt proposes again just above the highest they issued. It used to
/// propose a proposal lead (1 s) above it: each disagreement left the
/// counters of the nodes that took part a second ahead of the clock, the
/// next attempts' proposals (the clock + 1 s) fell below them, each node
/// issued its own counter + 1, and the nodes disagreed again — in a
/// semaphore crowd of 16 a third of the attempts were such rounds, and
/// one in twenty ended in a split vote (p99 wait 0.9 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_disagreement_proposes_just_above_the_highest() {
    if !redis::available("a_token_disagreement_proposes_just_above_the_highest") {
        return;
    }
    let nodes = five();
    let a = client(&nodes).await;
    let name = "counters-apart";
    let counter = redis::counter_key(name);
    // Three nodes' counters 5 s ahead of the clock, each its own.
    let ahead = nodes[0].time_ms() * 1000 + 5_000_000;
    for (i, node) in nodes[..3].iter().enumerate() {
        node.cli(&["SET", &counter, &(ahead + 10 * i as u64).to_string()]);
    }
    let g = a.lock_with(name, &long()).await.expect("lock");
    assert_eq!(
        g.fencing_token(),
        ahead + 22,
        "one above the highest token issued ({}), not a second above it",
        ahead + 21
    );
    g.unlock().await.expect("unlock");
    // Every counter is there now: the next token is agreed at once.
    let g = a.lock_with(name, &long()).await.expect("lock");
    assert_eq!(g.fencing_token(), ahead + 23);
    g.unlock().await.expect("unlock");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_acquisition_takes_one_round_trip() {
    if !redis::available("a_first_acquisition_takes_one_round_trip") {
        return;
    }
    let nodes = five();
    let (a, b) = (client(&nodes).await, client(&nodes).await);
    // Warm up: every node loads the scripts once.
    a.lock("warm-up").await.expect("lock").unlock().await.expect("unlock");
    let before: Vec<_> = nodes.iter().map(Server::command_calls).collect();
    let cycles = 10;
    let mut last = 0;
    for i in 0..cycles {
        let c = if i % 2 == 0 { &a } else { &b };
        let g = c.lock_with("job", &long()).await.expect("lock");
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.unlock().await.expect("unlock");
    }
    for (node, before) in nodes.iter().zip(before) {
        let after = node.command_calls();
        let ran = |command: &str| after.get(command).copied().unwrap_or(0) - before.get(command).copied().unwrap_or(0);
        let calls = ran("evalsha");
        // One acquire and one release script per cycle; an undo and a
        // second acquire round only when fresh nodes disagree on the token.
        assert!(
            calls <= 2 * cycles + 2,
            "{calls} script calls on {} for {cycles} lock/unlock cycles",
            node.addr()
        );
        // Nobody waited: no release looked at the line or announced.
        for command in ["zrange", "publish"] {
            assert_eq!(ran(command), 0, "{command} on {} with nobody waiting", node.addr());
        }
    }
}

/// A write that no quorum granted leaves no trace in the read tokens: the
/// nodes that granted it take it back, last write token included, so a
/// reader still carries the last write that stood.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_a_quorum_leaves_the_read_token_alone() {
    if !redis::available("a_write_without_a_quorum_leaves_the_read_token_alone") {
        return;
    }
    let mut nodes = five();
    // Three of five nodes restart empty: with the guard they would sit out
    // a quarantine; this case is about the tokens they carry.
    let a = unguarded(&nodes).await;
    let rw = a.rw_lock("doc").expect("rw lock");
    let written = rw.write_with(&long()).await.expect("write");
    let token = written.fencing_token();
    assert!(written.unlock().await.expect("unlock").is_free());
    for i in [0, 2, 4] {
        nodes[i].stop();
    }
    let e = rw.try_write().await.expect_err("no quorum for a write");
    assert!(e.is_retryable(), "{e:?}");
    for i in [0, 2, 4] {
        nodes[i].restart();
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    let read = loop {
        match rw.read_with(&long()).await {
            Ok(g) => break g,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no read once the nodes came back: {e:?}"),
        }
    };
    assert_eq!(
        read.fencing_token(),
        token,
        "the reader carries the last write that stood"
    );
    read.unlock().await.expect("unlock");
}

/// The holders of semaphore `name` on one node alone, as a client of that
/// node sees them (owners).
async fn node_permits(node: &Server, name: &str) -> Vec<String> {
    let one = lockkit::connect(&format!("redis://{}", node.addr()))
        .await
        .expect("connect to one node");
    let holders = one.semaphore(name, 2).expect("semaphore").holders().await;
    holders.expect("holders").into_iter().map(|h| h.owner).collect()
}

/// Waits until `node` shows exactly `owners` holding `name`'s permits:
/// a frozen node runs the commands queued for it (an attempt's share, and
/// the undo of it) once thawed.
async fn until_node_permits(node: &Server, name: &str, owners: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = node_permits(node, name).await;
        if seen == owners {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {} holds {seen:?}, expected {owners:?}",
            node.addr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A permit of semaphore `name` (of 2) taken while `frozen` do not answer
/// (they run what was sent them, the attempt's share and its undo, once
/// thawed).
async fn permit_without(client: &LockClient, name: &str, frozen: &[Server]) -> lockkit::LockGuard {
    frozen.iter().for_each(Server::freeze);
    let permit = client.semaphore(name, 2).unwrap().acquire_with(&long()).await;
    frozen.iter().for_each(Server::thaw);
    permit.expect("a permit on the other nodes")
}

/// Two permits of a semaphore of 2 that stand on different quorums leave
/// a third owner a quorum of nodes with a permit free on each (A on nodes
/// 0–2, B on 2–4: nodes 0, 1, 3 and 4 hold one each). Counted per node it
/// would be admitted; held as slots, each slot is taken on a quorum, so it
/// is not — and takes A's slot once A lets it go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_permits_on_different_quorums_still_bound_the_holders() {
    if !redis::available("semaphore_permits_on_different_quorums_still_bound_the_holders") {
        return;
    }
    let nodes = five();
    let (a, b, c) = (client(&nodes).await, client(&nodes).await, client(&nodes).await);
    let name = "pool";
    // A's permit on nodes 0, 1 and 2 only; B's on nodes 2, 3 and 4 only.
    let pa = permit_without(&a, name, &nodes[3..]).await;
    for node in &nodes[3..] {
        until_node_permits(node, name, &[]).await;
    }
    let pb = permit_without(&b, name, &nodes[..2]).await;
    for node in &nodes[..2] {
        until_node_permits(node, name, &[a.owner()]).await;
    }
    until_node_permits(&nodes[2], name, &[a.owner(), b.owner()]).await;
    for node in &nodes[3..] {
        until_node_permits(node, name, &[b.owner()]).await;
    }

    let sc = c.semaphore(name, 2).unwrap();
    for _ in 0..5 {
        assert!(
            sc.try_acquire().await.expect("try_acquire").is_none(),
            "a third permit of two: nodes 0, 1, 3 and 4 each have one free, but no slot is free on a quorum"
        );
    }
    let e = sc
        .acquire_with(&long().wait(Duration::from_millis(300)))
        .await
        .expect_err("C waits in vain");
    assert!(matches!(e, LockError::WaitTimeout { .. }), "{e:?}");
    let holders: Vec<(String, u64)> = sc
        .holders()
        .await
        .expect("holders")
        .into_iter()
        .map(|h| (h.owner, h.token))
        .collect();
    assert_eq!(
        holders,
        [
            (a.owner().to_owned(), pa.fencing_token()),
            (b.owner().to_owned(), pb.fencing_token())
        ]
    );
    let token = pb.fencing_token().max(pa.fencing_token());
    pa.unlock().await.expect("unlock A");
    let pc = sc.acquire_with(&long()).await.expect("A's slot, once free");
    assert!(pc.fencing_token() > token);
    assert!(
        sc.try_acquire().await.expect("try_acquire").is_none(),
        "B and C hold both permits"
    );
    pb.unlock().await.expect("unlock B");
    pc.unlock().await.expect("unlock C");
}

/// The holds and lease-end keys of semaphore `name` (default prefix).
fn semaphore_keys(name: &str) -> (String, String) {
    let holds = redis::lock_key(name).replacen("}:", "}s:", 1);
    let ends = holds.replacen("}s:", "}es:", 1);
    (holds, ends)
}

/// Writes on `node` a permit of semaphore `name` as the kinds' scripts
/// store one: owner `someone`, token 7, standing in `slot`, for a minute.
fn plant_permit(node: &Server, name: &str, slot: &str) {
    let (holds, ends) = semaphore_keys(name);
    let until = node.time_ms() + 60_000;
    node.cli(&["HSET", &holds, &format!("s|{slot}"), "7", "o|7", "someone", "t|7", "7"]);
    node.cli(&["HSET", &holds, "a|7", "0123456789abcdef", "g|7", "1", "k|7", slot]);
    node.cli(&["ZADD", &ends, &until.to_string(), "7"]);
}

/// Nodes whose holds differ assign a permit different slots: it stands in
/// the slot most of them gave it, and its shares in other slots are taken
/// back. Here "someone" holds slot 0 on nodes 0 and 1 (set by hand), which
/// assign slot 1; nodes 2-4 assign slot 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_stands_in_the_slot_most_nodes_assigned() {
    if !redis::available("a_permit_stands_in_the_slot_most_nodes_assigned") {
        return;
    }
    let nodes = five();
    let a = client(&nodes).await;
    let name = "assigned";
    let (holds, ends) = semaphore_keys(name);
    for node in &nodes[..2] {
        node.cli(&["HSET", &holds, "n", "3"]);
        plant_permit(node, name, "0");
    }
    let permit = a
        .semaphore(name, 3)
        .unwrap()
        .acquire_with(&long())
        .await
        .expect("permit");
    let id = permit.fencing_token().to_string();
    for node in &nodes[2..] {
        assert_eq!(
            node.cli(&["HGET", &holds, "s|0"]).trim(),
            id,
            "slot 0 on {}",
            node.addr()
        );
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    for node in &nodes[..2] {
        while !node.cli(&["ZSCORE", &ends, &id]).trim().is_empty() {
            assert!(
                Instant::now() < deadline,
                "the share in slot 1 on {} is taken back",
                node.addr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(node.cli(&["HGET", &holds, "s|0"]).trim(), "7", "someone keeps slot 0");
    }
    permit.unlock().await.expect("unlock");
    for node in &nodes[2..] {
        assert_eq!(node.cli(&["ZCARD", &ends]).trim(), "0", "released on {}", node.addr());
    }
}

/// A permit counts as held only where a quorum stands it in one slot: an
/// attempt in flight that three nodes granted in two different slots (so
/// a quorum of none) is no holder, even though three nodes carry its
/// token. The listing once counted it, and a crowd of processes saw four
/// permits of a semaphore of three listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_split_across_slots_is_not_listed() {
    if !redis::available("a_permit_split_across_slots_is_not_listed") {
        return;
    }
    let nodes = five();
    let a = client(&nodes).await;
    let name = "split-listing";
    let permit = a
        .semaphore(name, 3)
        .unwrap()
        .acquire_with(&long())
        .await
        .expect("permit");
    for (node, slot) in nodes[..3].iter().zip(["1", "1", "2"]) {
        plant_permit(node, name, slot);
    }
    let listed = a.semaphore(name, 3).unwrap().holders().await.expect("holders");
    let tokens: Vec<u64> = listed.iter().map(|h| h.token).collect();
    assert_eq!(
        tokens,
        [permit.fencing_token()],
        "only the permit a quorum holds in one slot"
    );
    permit.unlock().await.expect("unlock");
}

/// The owners holding `name` for reading on one node alone.
async fn node_readers(node: &Server, name: &str) -> Vec<String> {
    let one = lockkit::connect(&format!("redis://{}", node.addr()))
        .await
        .expect("connect to one node");
    let readers = one.rw_lock(name).expect("rw lock").readers().await;
    readers.expect("readers").into_iter().map(|h| h.owner).collect()
}

/// A writer whose quorum left out two nodes leaves them with an older
/// last write: a reader then holds on every node, under the newest token
/// on three of them and the older one on the other two. Releasing and
/// extending the read hold must work on all five — a reader's hold is its
/// owner's, whatever token each node carries. (Before, the two nodes kept
/// the read hold until its lease ran out: a writer found only three free
/// nodes, and a crowd of them stalled for the lease's length.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_nodes_with_different_last_writes_releases_everywhere() {
    if !redis::available("a_reader_on_nodes_with_different_last_writes_releases_everywhere") {
        return;
    }
    let nodes = five();
    let (w, r) = (client(&nodes).await, client(&nodes).await);
    let name = "differing";
    let older = w.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    older.unlock().await.expect("unlock");
    nodes[3..].iter().for_each(Server::freeze);
    let newer = w.rw_lock(name).unwrap().write_with(&long()).await;
    nodes[3..].iter().for_each(Server::thaw);
    let newer = newer.expect("a write on nodes 0-2");
    let token = newer.fencing_token();
    newer.unlock().await.expect("unlock");
    let read = r.rw_lock(name).unwrap().read_with(&long()).await.expect("read");
    assert_eq!(read.fencing_token(), token, "the reader carries the last write");
    for node in &nodes {
        redis::eventually("the reader holds on every node", || async {
            (node_readers(node, name).await == [r.owner()]).then_some(())
        })
        .await;
    }
    assert!(
        matches!(
            r.backend().extend(&read_hold(&read), Duration::from_secs(60)).await,
            Ok(lockkit::raw::ExtendOutcome::Extended { .. })
        ),
        "the read hold extends"
    );
    read.unlock().await.expect("unlock");
    for (i, node) in nodes.iter().enumerate() {
        assert!(
            node_readers(node, name).await.is_empty(),
            "node {i} still holds the released read"
        );
    }
    let write = w
        .rw_lock(name)
        .unwrap()
        .write_with(&long().wait(Duration::from_secs(5)))
        .await
        .expect("a writer after the reader");
    write.unlock().await.expect("unlock");
}

/// A reader's token is the greatest last write any answering node has,
/// also the nodes that refuse it. Here the last write stands on nodes 0-2
/// (3 and 4 keep the older one, set by hand), node 1 then loses its keys,
/// and nodes 0 and 2 refuse the reader (a writer holds there, set by
/// hand): the reader holds on nodes 1, 3 and 4, none of which keeps the
/// last write. Before, it carried the older write's token — the token
/// order the Redlock read-write crowd torture broke after a node wipe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_carries_the_last_write_that_only_refusing_nodes_keep() {
    if !redis::available("a_reader_carries_the_last_write_that_only_refusing_nodes_keep") {
        return;
    }
    let nodes = five();
    // Node 1 takes part at once after losing its keys: no restart guard.
    let (w, r) = (unguarded(&nodes).await, unguarded(&nodes).await);
    let name = "kept-by-refusers";
    let older = w.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    let older_token = older.fencing_token();
    older.unlock().await.expect("unlock");
    let newer = w.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    let token = newer.fencing_token();
    assert!(token > older_token);
    newer.unlock().await.expect("unlock");
    // Nodes 3 and 4 were outside the newer write's quorum; node 1 loses
    // its keys.
    let holds = redis::lock_key(name).replacen("}:", "}r:", 1);
    let ends = holds.replacen("}r:", "}er:", 1);
    for node in &nodes[3..] {
        node.cli(&["HSET", &holds, "lw", &older_token.to_string()]);
    }
    nodes[1].cli(&["FLUSHALL"]);
    // A writer of another owner holds on nodes 0 and 2 for a minute.
    for node in [&nodes[0], &nodes[2]] {
        let until = node.time_ms() + 60_000;
        node.cli(&["HSET", &holds, "o|w", "someone", "t|w", "1", "a|w", "0123456789abcdef"]);
        node.cli(&["ZADD", &ends, &until.to_string(), "w"]);
    }
    let read = r
        .rw_lock(name)
        .unwrap()
        .read_with(&long())
        .await
        .expect("read on nodes 1, 3, 4");
    assert_eq!(
        read.fencing_token(),
        token,
        "the reader carries the last write (the older one: {older_token})"
    );
    read.unlock().await.expect("unlock");
}

fn read_hold(g: &lockkit::LockGuard) -> lockkit::raw::Hold {
    lockkit::raw::Hold {
        name: g.name().to_owned(),
        owner: g.owner().to_owned(),
        token: g.fencing_token(),
        kind: lockkit::LockKind::Read,
    }
}

/// The clients in `name`'s mutex line on one node, first to last.
fn node_line(node: &Server, name: &str) -> Vec<String> {
    let queue = redis::lock_key(name).replacen("}:", "}q:", 1);
    node.cli(&["ZRANGE", &queue, "0", "-1"])
        .lines()
        .map(str::to_owned)
        .collect()
}

/// The places (µs) of `name`'s mutex line on one node, first to last.
fn node_places(node: &Server, name: &str) -> Vec<String> {
    let queue = redis::lock_key(name).replacen("}:", "}q:", 1);
    let line = node.cli(&["ZRANGE", &queue, "0", "-1", "WITHSCORES"]);
    line.lines().skip(1).step_by(2).map(str::to_owned).collect()
}

/// Waits until `node`'s line of `name` shows `n` clients.
async fn until_node_line(node: &Server, name: &str, n: usize) {
    redis::eventually("the waiters in the node's line", || async {
        (node_line(node, name).len() == n).then_some(())
    })
    .await;
}

/// A waiter granted on a quorum moves in the line of every node, not only
/// of the nodes that granted it, and to the same place on each: to the
/// back, when more of its client's waiters wait. Here two nodes put the
/// client behind it ahead of it and answer "its turn". Before, they kept
/// the granted one where it stood, ahead of the third client (the other
/// nodes have it behind), until one of its waiters came again, and each
/// node sent it to the back at its own time: lines that disagree on who
/// comes next, the split hand-offs of a Redlock crowd across processes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_moves_the_waiter_in_every_nodes_line() {
    if !redis::available("a_grant_moves_the_waiter_in_every_nodes_line") {
        return;
    }
    let nodes = five();
    let (h, a, c, d) = (
        client(&nodes).await,
        client(&nodes).await,
        client(&nodes).await,
        client(&nodes).await,
    );
    let name = "line";
    let held = h.lock_with(name, &long()).await.expect("lock");
    // Client A waits twice (two owners); clients C and D once, behind A.
    let wait = |client: LockClient| tokio::spawn(async move { client.lock_with(name, &long()).await });
    let a_first = wait(a.clone());
    for node in &nodes {
        until_node_line(node, name, 1).await;
    }
    let a_second = wait(a.with_new_owner());
    let c_waits = wait(c.clone());
    for node in &nodes {
        until_node_line(node, name, 2).await;
    }
    let d_waits = wait(d.clone());
    for node in &nodes {
        until_node_line(node, name, 3).await;
    }
    let (a_id, c_id, d_id) = {
        let line = node_line(&nodes[0], name);
        (line[0].clone(), line[1].clone(), line[2].clone())
    };
    // Nodes 3 and 4 see C ahead of A.
    let queue = redis::lock_key(name).replacen("}:", "}q:", 1);
    for node in &nodes[3..] {
        let a_at: i64 = node.cli(&["ZSCORE", &queue, &a_id]).trim().parse().unwrap();
        node.cli(&["ZADD", &queue, "XX", &(a_at - 1).to_string(), &c_id]);
        assert_eq!(node_line(node, name), [c_id.clone(), a_id.clone(), d_id.clone()]);
    }
    held.unlock().await.expect("unlock");
    // A, first on three nodes, is served, and goes to the back on every
    // node.
    let mut a_waits = vec![a_first, a_second];
    let (ga, _, rest) = futures_util::future::select_all(a_waits.drain(..)).await;
    let ga = ga.expect("task").expect("A is served");
    // (C's place differs on nodes 3 and 4: set by hand above.)
    let a_place = |node: &Server| node_places(node, name).get(2).cloned();
    let back = a_place(&nodes[0]);
    for (i, node) in nodes.iter().enumerate() {
        let deadline = Instant::now() + Duration::from_secs(20);
        while node_line(node, name) != [c_id.clone(), d_id.clone(), a_id.clone()] || a_place(node) != back {
            assert!(
                Instant::now() < deadline,
                "node {i}'s line is {:?} at {:?} after A's grant, A at {back:?} on node 0 (A {a_id}, C {c_id}, D {d_id})",
                node_line(node, name),
                node_places(node, name)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    ga.unlock().await.expect("unlock");
    let gc = tokio::time::timeout(Duration::from_secs(10), c_waits)
        .await
        .expect("C is served next")
        .expect("task")
        .expect("lock");
    gc.unlock().await.expect("unlock");
    let gd = d_waits.await.expect("task").expect("D is served after C");
    gd.unlock().await.expect("unlock");
    for a_waits in rest {
        let g = a_waits.await.expect("task").expect("A's other waiter is served");
        g.unlock().await.expect("unlock");
    }
}

/// Waits until `name`'s read-write line has `n` entries (a quorum's view).
async fn until_rw_line(client: &LockClient, name: &str, n: usize) {
    redis::eventually("the waiters in the read-write line", || async {
        let waiting = client.backend().waiting_for(name, lockkit::LockKind::Write).await;
        (waiting.expect("waiting") == n).then_some(())
    })
    .await;
}

/// A client that waits to read and to write stands in line twice, each
/// entry at the place its first waiter of that kind came: a grant to its
/// readers sends its reader entry to the back, not its writer entry.
/// (Before, both took the one place the client kept, which every grant to
/// its readers moved back: a client whose readers kept coming never let
/// its writer reach the front — writers starved in a Redlock crowd.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clients_reads_do_not_send_its_writer_to_the_back() {
    if !redis::available("a_clients_reads_do_not_send_its_writer_to_the_back") {
        return;
    }
    let nodes = five();
    let (h, a, b) = (client(&nodes).await, client(&nodes).await, client(&nodes).await);
    let name = "writer-place";
    let held = h.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    let read = |c: LockClient| tokio::spawn(async move { c.rw_lock(name).unwrap().read_with(&long()).await });
    let write = |c: LockClient| tokio::spawn(async move { c.rw_lock(name).unwrap().write_with(&long()).await });
    // A's two readers, then A's writer, then B's writer.
    let readers = [read(a.with_new_owner()), read(a.with_new_owner())];
    until_rw_line(&h, name, 1).await;
    let a_writes = write(a.with_new_owner());
    until_rw_line(&h, name, 2).await;
    let b_writes = write(b.clone());
    until_rw_line(&h, name, 3).await;
    held.unlock().await.expect("unlock");
    // Each holder gives the lock back at once; whoever wrote first has the
    // lower token.
    let took = |w: tokio::task::JoinHandle<Result<lockkit::LockGuard, LockError>>| async move {
        let g = w.await.expect("task").expect("served");
        let token = g.fencing_token();
        g.unlock().await.expect("unlock");
        token
    };
    let [r1, r2] = readers;
    let (_, _, a_token, b_token) = tokio::join!(took(r1), took(r2), took(a_writes), took(b_writes));
    assert!(
        a_token < b_token,
        "A's writer, in line before B's, writes first ({a_token} < {b_token})"
    );
}

/// A waiter whose entry moves back in line when it comes (its client's
/// place is later than the entry a node kept) lets in those it stood
/// before, and they are told. Here a reader stands before a waiting writer
/// on every node (put there by hand: the nodes kept the reader's entry
/// from before its client's place moved back). The release lets the reader
/// in; the reader comes with its later place, which puts it behind the
/// writer, and the writer is let in. (Before, nobody told the writer: it
/// came only when the fallback timer it armed on hearing the reader's
/// turn fired, 200-400 ms later — a wait a Redlock crowd's writers kept
/// paying, and this test does not time.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_that_moves_back_lets_the_writer_behind_it_in() {
    if !redis::available("an_entry_that_moves_back_lets_the_writer_behind_it_in") {
        return;
    }
    let nodes = five();
    let (h, w, r) = (client(&nodes).await, client(&nodes).await, client(&nodes).await);
    let name = "moved-back";
    let held = h.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    let writer = tokio::spawn({
        let w = w.clone();
        async move { w.rw_lock(name).unwrap().write_with(&long()).await }
    });
    until_rw_line(&h, name, 1).await;
    let reader = tokio::spawn({
        let r = r.clone();
        async move { r.rw_lock(name).unwrap().read_with(&long()).await }
    });
    until_rw_line(&h, name, 2).await;
    let queue = redis::lock_key(name).replacen("}:", "}qr:", 1);
    for node in &nodes {
        let line = node.cli(&["ZRANGE", &queue, "0", "-1", "WITHSCORES"]);
        let line: Vec<&str> = line.lines().collect();
        assert!(line[0].ends_with(":w"), "the writer first: {line:?}");
        let before: i64 = line[1].parse().unwrap();
        node.cli(&["ZADD", &queue, "XX", &(before - 1).to_string(), line[2]]);
    }
    held.unlock().await.expect("unlock");
    let g = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer is told its turn once the reader moved behind it")
        .expect("task")
        .expect("write");
    let token = g.fencing_token();
    g.unlock().await.expect("unlock");
    let read = reader.await.expect("task").expect("the reader reads after the writer");
    assert_eq!(read.fencing_token(), token, "the reader carries the writer's token");
    read.unlock().await.expect("unlock");
}

/// A write attempt that missed its quorum leaves its share, and its token
/// as the last write, on the nodes it reached until its undo lands there.
/// Those nodes refuse a reader in the meantime; the last write they tell it
/// must be the one before the stray share, or the reader carries the token
/// of a write that never stood (above the last writer's, which a crowd of
/// child processes once saw). The stray share is a write taken by a client
/// of nodes 0 and 1 alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_does_not_carry_the_token_of_a_stray_write_share() {
    if !redis::available("a_reader_does_not_carry_the_token_of_a_stray_write_share") {
        return;
    }
    let nodes = five();
    let all = client(&nodes).await;
    let name = "stray-write";
    let written = all.rw_lock(name).unwrap().write_with(&long()).await.expect("write");
    let token = written.fencing_token();
    written.unlock().await.expect("unlock");
    let two = client(&nodes[..2]).await;
    let stray = two
        .rw_lock(name)
        .unwrap()
        .write_with(&long())
        .await
        .expect("write on two nodes");
    assert!(stray.fencing_token() > token);
    let read = all
        .rw_lock(name)
        .unwrap()
        .read_with(&long())
        .await
        .expect("read on nodes 2, 3, 4");
    assert_eq!(
        read.fencing_token(),
        token,
        "the reader carries the last write that stood, not the stray's {}",
        stray.fencing_token()
    );
    read.unlock().await.expect("unlock");
    stray.unlock().await.expect("unlock");
}

/// Contenders that race `try_lock` for a free name can split the nodes so
/// that none has a quorum; each then undoes its shares, and with nothing
/// more `try_lock` answered busy to all of them, for a name nobody held.
/// Sixteen clients race for a free name, many times over: exactly one
/// wins every race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_of_many_racing_try_locks_wins_a_free_name() {
    if !redis::available("one_of_many_racing_try_locks_wins_a_free_name") {
        return;
    }
    let nodes = five();
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(client(&nodes).await);
    }
    let opts = long();
    for race in 0..40 {
        let name = format!("race-{race}");
        let tries = clients.iter().map(|c| c.try_lock_with(&name, &opts));
        let won: Vec<lockkit::LockGuard> = futures_util::future::join_all(tries)
            .await
            .into_iter()
            .filter_map(|r| r.expect("try_lock"))
            .collect();
        assert_eq!(won.len(), 1, "race {race}: one of 16 wins a free name");
        for g in won {
            g.unlock().await.expect("unlock");
        }
    }
}
