//! Issue 13's Redis scenarios — slow nodes, lost replies, re-sent commands —
//! on private servers started by the test: each broke mutual exclusion or
//! the token order before attempts were made idempotent (attempt ids) and
//! Redlock holds were made the quorum's.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::Duration;

use lockkit::{LockClient, LockGuard, LockOptions};
use lockkit_core::testkit::{Fault, FaultProxy};
use redis::Server;

fn redlock_url(nodes: &[Server], params: &str) -> String {
    let hosts: Vec<String> = nodes.iter().map(Server::addr).collect();
    format!("redlock://{}?{params}", hosts.join(","))
}

fn held(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl).wait(Duration::from_secs(10))
}

/// The lock key of `name` on `node` (any prefix tag), if the node has one.
fn key_of(node: &Server, name: &str) -> Option<String> {
    node.cli(&["--scan", "--pattern", &format!("*}}:{name}")])
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

/// The hold count `name` has on `node` (0: no hold).
fn count_on(node: &Server, name: &str) -> u32 {
    key_of(node, name)
        .and_then(|k| redis::stored_hold(&node.cli(&["GET", &k])))
        .map_or(0, |(_, count)| count)
}

/// The token of the hold `name` has on `node`, if any.
fn token_on(node: &Server, name: &str) -> Option<String> {
    key_of(node, name)
        .and_then(|k| redis::stored_hold(&node.cli(&["GET", &k])))
        .map(|(token, _)| token)
}

/// Waits until a `CLIENT PAUSE … WRITE` on `node` is over: a write blocks
/// until then.
fn pause_over(node: &Server) {
    node.cli(&["SET", "lockkit-test:pause-probe", "1"]);
}

/// Whether `other` can take `name` now; if it can, it must be because
/// every guard of the first owner on it is lost.
async fn excluded_unless_lost(other: &LockClient, name: &str, guards: &[&LockGuard], what: &str) {
    if let Some(g) = other.try_lock(name).await.expect("try_lock") {
        let lost: Vec<bool> = guards.iter().map(|g| g.is_lost()).collect();
        assert!(
            lost.iter().all(|l| *l),
            "{what}: another owner acquired {name:?} (token {}) while a guard of the holder was not lost ({lost:?})",
            g.fencing_token()
        );
        g.unlock().await.expect("unlock");
    }
}

/// Scenario 1: a re-entry while a node is slow used to take a fresh hold
/// on the node that missed the first acquisition, so per-node counts
/// drifted ([2, 1, 1]) and the inner unlock left the name on one node
/// only, while the outer guard was not lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_reentry_with_a_slow_node_stays_a_quorum() {
    if !redis::available("redlock_reentry_with_a_slow_node_stays_a_quorum") {
        return;
    }
    let nodes: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let url = redlock_url(&nodes, "node_timeout=100ms");
    let a = lockkit::connect(&url).await.expect("connect");
    let b = lockkit::connect(&url).await.expect("connect");
    let name = "scenario-1";
    let opts = held(Duration::from_secs(30));

    nodes[2].cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
    let outer = a.lock_with(name, &opts).await.expect("lock with node 2 slow");
    pause_over(&nodes[2]);
    // The straggling acquisition on node 2 was taken back.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count_on(&nodes[2], name) != 0 {
        assert!(std::time::Instant::now() < deadline, "node 2 keeps the undone hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    nodes[1].cli(&["CLIENT", "PAUSE", "700", "WRITE"]);
    let inner = a.lock_with(name, &opts).await.expect("re-enter with node 1 slow");
    assert_eq!(
        inner.fencing_token(),
        outer.fencing_token(),
        "a re-entry keeps the token"
    );
    pause_over(&nodes[1]);

    let unlocked = inner.unlock().await.expect("inner unlock");
    let counts: Vec<u32> = nodes.iter().map(|n| count_on(n, name)).collect();
    let holding = counts.iter().filter(|c| **c > 0).count();
    if unlocked.remaining_holds > 0 {
        assert!(
            holding >= 2,
            "the inner unlock reported {} holds left but only {holding} of 3 nodes hold: {counts:?}",
            unlocked.remaining_holds
        );
    }
    excluded_unless_lost(&b, name, &[&outer], "after the inner unlock").await;
    assert!(!outer.is_lost(), "the outer guard still holds a quorum: {counts:?}");
    assert!(outer.unlock().await.expect("outer unlock").is_free());
    assert!(
        b.try_lock(name).await.expect("try_lock").is_some(),
        "free after both unlocks"
    );
}

/// Scenario 2: a stale hold one node kept of the same owner turned a first
/// acquisition into a re-entry, and sealed the fresh nodes down to the old
/// token — the token went backwards past another owner's. Now the token
/// comes from the fresh nodes alone, and the stale node only loses the new
/// attempt's share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_stale_node_hold_cannot_lower_the_token() {
    if !redis::available("redlock_stale_node_hold_cannot_lower_the_token") {
        return;
    }
    let nodes: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let url = redlock_url(&nodes, "node_timeout=100ms");
    let a = lockkit::connect(&url).await.expect("connect");
    let b = lockkit::connect(&url).await.expect("connect");
    let name = "scenario-2";
    let first = a
        .lock_with(name, &held(Duration::from_secs(30)).auto_extend(false))
        .await
        .expect("lock");
    let ta = first.fencing_token();
    // Nodes 1 and 2 lose the key (a restart without persistence); node 0
    // keeps it for long.
    let key = key_of(&nodes[0], name).expect("node 0 holds");
    nodes[1].cli(&["DEL", &key]);
    nodes[2].cli(&["DEL", &key]);
    nodes[0].cli(&["PEXPIRE", &key, "600000"]);

    let gb = b
        .lock_with(name, &held(Duration::from_secs(30)))
        .await
        .expect("B locks on {1, 2}");
    let tb = gb.fencing_token();
    assert!(tb > ta, "B's token {tb} after A's {ta}");
    gb.unlock().await.expect("B unlocks");

    let again = a
        .lock_with(name, &held(Duration::from_secs(30)))
        .await
        .expect("A locks again");
    assert!(
        again.fencing_token() > tb,
        "A's new token {} must be above B's {tb} (A's old one was {ta})",
        again.fencing_token()
    );
    assert_eq!(
        again.hold_count(),
        1,
        "a first acquisition, not a re-entry of the stale hold"
    );
    // The new hold is on the fresh nodes; the stale node keeps only the old
    // hold (this attempt's share there is taken back in the background).
    let again_token = again.fencing_token().to_string();
    for node in &nodes[1..] {
        assert_eq!(
            (count_on(node, name), token_on(node, name)),
            (1, Some(again_token.clone())),
            "the fresh nodes hold the new hold once"
        );
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while count_on(&nodes[0], name) != 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "node 0 keeps the new attempt's share"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        token_on(&nodes[0], name),
        Some(ta.to_string()),
        "the stale hold is neither raised nor taken over"
    );
    first.abandon();
    assert!(again.unlock().await.expect("unlock").is_free());
}

/// Two processes configured with one owner id share one hold (contract
/// point 2). When they acquire a name at the same moment and reach the
/// nodes in different orders — one first on nodes 0–2, the other first on
/// nodes 3–4 — each re-enters the other's new hold on the remaining nodes.
/// One first acquisition used to take its token from the re-entered nodes'
/// counters and seal the other nodes to it with its own share alone,
/// erasing the co-owner's shares: the two guards carried different tokens,
/// and after the first one's unlock another owner took the name while the
/// second guard was neither released nor lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_co_owners_acquiring_at_once_share_one_hold() {
    if !redis::available("redlock_co_owners_acquiring_at_once_share_one_hold") {
        return;
    }
    let nodes: Vec<Server> = (0..5).map(|_| Server::start()).collect();
    // Each co-owner reaches some nodes directly and the others through a
    // proxy that delays every chunk: A is first on nodes 0–2, B on 3–4.
    let mut proxies = Vec::new();
    for n in &nodes {
        let proxy = FaultProxy::start(n.addr().parse().expect("addr")).await.expect("proxy");
        proxy.set(Fault::Latency(Duration::from_millis(15)));
        proxies.push(proxy);
    }
    let url = |hosts: Vec<String>| format!("redlock://{}?owner=shared-owner", hosts.join(","));
    let a_hosts: Vec<String> = (0..5)
        .map(|i| {
            if i < 3 {
                nodes[i].addr()
            } else {
                proxies[i].addr().to_string()
            }
        })
        .collect();
    let b_hosts: Vec<String> = (0..5)
        .map(|i| {
            if i < 3 {
                proxies[i].addr().to_string()
            } else {
                nodes[i].addr()
            }
        })
        .collect();
    let a = lockkit::connect(&url(a_hosts)).await.expect("connect");
    let b = lockkit::connect(&url(b_hosts)).await.expect("connect");
    assert_eq!(a.owner(), b.owner(), "one owner id");
    let direct: Vec<String> = nodes.iter().map(Server::addr).collect();
    let c = lockkit::connect(&format!("redlock://{}", direct.join(",")))
        .await
        .expect("connect");
    let name = "co-owners";
    let opts = held(Duration::from_secs(30));
    for round in 0..50 {
        let (ga, gb) = tokio::join!(a.lock_with(name, &opts), b.lock_with(name, &opts));
        let (ga, gb) = (ga.expect("A locks"), gb.expect("B locks"));
        assert_eq!(
            ga.fencing_token(),
            gb.fencing_token(),
            "round {round}: one hold, one token (hold counts {} and {})",
            ga.hold_count(),
            gb.hold_count()
        );
        assert!(
            c.try_lock(name).await.expect("try_lock").is_none(),
            "round {round}: another owner acquired while both co-owners hold"
        );
        // The first acquisition's guard (count 1) unlocks first.
        let (first, second) = if ga.hold_count() <= gb.hold_count() {
            (ga, gb)
        } else {
            (gb, ga)
        };
        first.unlock().await.expect("first unlock");
        excluded_unless_lost(&c, name, &[&second], &format!("round {round}, after the first unlock")).await;
        assert!(
            !second.is_lost(),
            "round {round}: the second guard still has its quorum"
        );
        assert!(
            second.unlock().await.expect("second unlock").is_free(),
            "round {round}: free after both unlocks"
        );
    }
    drop(proxies);
}

/// A first acquisition counts only where a quorum of fresh nodes issued one
/// token. Two nodes whose counters are ahead of the proposal (by different
/// amounts) make all three issue different tokens: the attempt is undone
/// and made again above the highest, and then every node agrees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_fresh_nodes_that_disagree_are_asked_again_above() {
    if !redis::available("redlock_fresh_nodes_that_disagree_are_asked_again_above") {
        return;
    }
    let nodes: Vec<Server> = (0..3).map(|_| Server::start()).collect();
    let a = lockkit::connect(&redlock_url(&nodes, "node_timeout=100ms"))
        .await
        .expect("connect");
    let name = "disagree";
    let opts = held(Duration::from_secs(30));
    let first = a.lock_with(name, &opts).await.expect("lock");
    let t0 = first.fencing_token();
    assert!(first.unlock().await.expect("unlock").is_free());
    // Nodes 1 and 2 have counters 10 s and 20 s ahead of that token.
    let mut ahead = Vec::new();
    for (node, lead) in nodes[1..].iter().zip([10_000_000u64, 20_000_000]) {
        let counter = node
            .cli(&["--scan", "--pattern", "*fence"])
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .expect("a counter")
            .to_owned();
        node.cli(&["SET", &counter, &(t0 + lead).to_string()]);
        ahead.push(t0 + lead);
    }
    let g = a.lock_with(name, &opts).await.expect("lock");
    let t = g.fencing_token();
    assert!(t > ahead[1], "token {t} above every counter ({ahead:?})");
    assert_eq!(g.hold_count(), 1);
    for node in &nodes {
        assert_eq!(
            (count_on(node, name), token_on(node, name)),
            (1, Some(t.to_string())),
            "every node holds the token the quorum agreed on"
        );
    }
    assert!(g.unlock().await.expect("unlock").is_free());
}

/// Scenario 3: while writes were paused, every timed-out try of one `lock`
/// call ran later on the server and counted as a re-entry (hold count 6);
/// one unlock left the name held for the whole ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_retried_acquisition_counts_once() {
    if !redis::available("redis_retried_acquisition_counts_once") {
        return;
    }
    let server = Server::start();
    let url = format!("{}?response_timeout=200ms", server.url());
    let (a, h) = (
        lockkit::connect(&url).await.expect("connect"),
        lockkit::connect(&url).await.expect("connect"),
    );
    let name = "scenario-3";
    // The scripts are in the server's cache (a paused server cannot answer
    // NOSCRIPT in time for the client to load them).
    let warm = a.lock("warm-up").await.expect("lock");
    warm.unlock().await.expect("unlock");
    // Another owner holds the name for 1 s (its lease runs out).
    h.lock_with(name, &held(Duration::from_secs(1)).auto_extend(false))
        .await
        .expect("lock")
        .abandon();
    let waiter = tokio::spawn({
        let a = a.clone();
        async move {
            a.lock_with(
                name,
                &LockOptions::new()
                    .ttl(Duration::from_secs(30))
                    .wait(Duration::from_secs(6)),
            )
            .await
        }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Writes stop for 2 s: A's tries time out on the client and all run
    // on the server when the pause ends.
    server.cli(&["CLIENT", "PAUSE", "2000", "WRITE"]);
    let guard = waiter.await.expect("task").expect("A gets the lock within its wait");
    pause_over(&server);
    assert_eq!(guard.hold_count(), 1, "one lock call is one share");
    let info = a.inspect(name).await.expect("inspect").expect("held");
    assert_eq!(
        (info.owner.as_str(), info.hold_count),
        (a.owner(), 1),
        "the server agrees"
    );
    assert!(guard.unlock().await.expect("unlock").is_free(), "one unlock frees it");
    assert!(a.inspect(name).await.expect("inspect").is_none());
}

/// A private three-master cluster whose nodes announce the addresses of
/// fault proxies in front of them, so every cluster connection of a client
/// goes through a proxy.
struct ProxiedCluster {
    nodes: Vec<Server>,
    proxies: Vec<FaultProxy>,
}

impl ProxiedCluster {
    async fn start() -> Self {
        let nodes: Vec<Server> = (0..3)
            .map(|_| Server::start_with(&["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"]))
            .collect();
        let mut proxies = Vec::new();
        for n in &nodes {
            let proxy = FaultProxy::start(n.addr().parse().expect("addr")).await.expect("proxy");
            n.cli(&[
                "CONFIG",
                "SET",
                "cluster-announce-port",
                &proxy.addr().port().to_string(),
            ]);
            proxies.push(proxy);
        }
        let addrs: Vec<String> = nodes.iter().map(Server::addr).collect();
        let mut create = vec!["--cluster", "create"];
        create.extend(addrs.iter().map(String::as_str));
        create.extend(["--cluster-replicas", "0", "--cluster-yes"]);
        nodes[0].cli(&create);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let ports: Vec<String> = proxies.iter().map(|p| p.addr().port().to_string()).collect();
        loop {
            let ok = nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok") && {
                    let slots = n.cli(&["CLUSTER", "SLOTS"]);
                    ports.iter().all(|p| slots.lines().any(|l| l.trim() == p))
                }
            });
            if ok {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the cluster did not form");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ProxiedCluster { nodes, proxies }
    }

    fn url(&self, params: &str) -> String {
        let hosts: Vec<String> = self.proxies.iter().map(|p| p.addr().to_string()).collect();
        format!("redis+cluster://{}?{params}", hosts.join(","))
    }

    fn set(&self, fault: Fault) {
        for p in &self.proxies {
            p.set(fault);
        }
    }
}

/// Scenario 4: the cluster client retries on its own; a release that ran on
/// the server but whose reply was lost with its connection was sent again
/// and decremented twice — the inner unlock of a count-2 hold freed the
/// name under the outer guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_resent_release_decrements_once() {
    if !redis::available("cluster_resent_release_decrements_once") {
        return;
    }
    let cluster = ProxiedCluster::start().await;
    let url = cluster.url("response_timeout=300ms");
    let a = lockkit::connect(&url).await.expect("connect");
    let b = lockkit::connect(&url).await.expect("connect");
    let name = "scenario-4";
    let opts = held(Duration::from_secs(30));
    // The scripts are in the node's cache: a NOSCRIPT answer lost with its
    // reply would keep the release from ever running.
    a.lock_with(name, &opts)
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");
    let outer = a.lock_with(name, &opts).await.expect("lock");
    let inner = a.lock_with(name, &opts).await.expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    // The release runs on the server and its reply is lost past the
    // response timeout: the client library sends it again (it retries
    // timed-out commands at once), and the connection ends when the fault
    // heals.
    cluster.set(Fault::LoseReplies);
    let unlock = tokio::spawn(inner.unlock());
    tokio::time::sleep(Duration::from_millis(700)).await;
    cluster.set(Fault::Pass);
    let unlocked = unlock.await.expect("task");
    let info = b.inspect(name).await.expect("inspect");
    assert_eq!(
        info.as_ref().map(|i| (i.owner.as_str(), i.hold_count)),
        Some((a.owner(), 1)),
        "one share left after the inner unlock ({unlocked:?})"
    );
    if let Ok(u) = &unlocked {
        assert_eq!(u.remaining_holds, 1, "the inner unlock reports the outer hold");
    }
    excluded_unless_lost(&b, name, &[&outer], "after a re-sent release").await;
    assert!(outer.unlock().await.expect("outer unlock").is_free());
    drop(cluster.nodes);
}

/// Scenario 4, the mechanism itself: what a client library's re-send does —
/// the same release script call twice — on the shared cluster. Before
/// attempt ids the second call decremented again and freed a count-2 hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_release_sent_twice_takes_one_share() {
    use lockkit::raw::{AcquireRequest, Hold, ReleaseOutcome, TryAcquire};
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_REDIS_CLUSTER_URL") else {
        return;
    };
    let a = lockkit::connect(&url).await.expect("connect");
    let b = lockkit::connect(&url).await.expect("connect");
    let name = format!("scenario-4-twice-{}", lockkit_core::raw::new_attempt_id());
    let (outer, inner) = (lockkit_core::raw::new_attempt_id(), lockkit_core::raw::new_attempt_id());
    let mut token = 0;
    for attempt in [&outer, &inner] {
        let req = AcquireRequest {
            name: &name,
            owner: a.owner(),
            ttl: Duration::from_secs(30),
            attempt,
            fair: true,
            kind: lockkit_core::LockKind::Mutex,
        };
        match a.backend().try_acquire(&req).await.expect("acquire") {
            TryAcquire::Acquired(lease) => token = lease.token,
            TryAcquire::Busy { .. } => panic!("busy"),
        }
    }
    let hold = Hold {
        name: name.clone(),
        owner: a.owner().to_owned(),
        token,
        kind: lockkit_core::LockKind::Mutex,
    };
    for send in ["sent", "re-sent"] {
        assert_eq!(
            a.backend().release(&hold, &inner).await.expect("release"),
            ReleaseOutcome::Released { remaining: 1 },
            "the inner release {send}"
        );
    }
    assert!(
        b.try_lock(&name).await.expect("try_lock").is_none(),
        "the outer hold stands"
    );
    assert_eq!(
        a.backend().release(&hold, &outer).await.expect("release"),
        ReleaseOutcome::Released { remaining: 0 }
    );
}
