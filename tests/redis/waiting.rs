//! Waiting without polling, on a private Redis server: a release hands the
//! lock to one waiter promptly, and the Redis commands spent per hand-off do
//! not grow with the number of waiters (counted with `INFO commandstats`).
#![cfg(feature = "redis")]

use crate::common::redis;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockGuard, LockOptions};
use redis::Server;

/// What the waiters of a hand-off chain ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Lock,
    /// A permit of a semaphore of 2 (the holder takes both).
    Permit,
    /// A read-write lock: every third waiter writes, the others read (the
    /// holder writes).
    ReadWrite,
}

impl Want {
    /// Takes what waiter `i` (`None`: the holder) asks for.
    async fn take(self, client: &LockClient, name: &str, i: Option<usize>, opts: &LockOptions) -> Vec<LockGuard> {
        let one = match self {
            Want::Lock => client.lock_with(name, opts).await,
            Want::Permit if i.is_none() => {
                let sem = client.semaphore(name, 2).unwrap();
                let first = sem.acquire_with(opts).await.expect("permit");
                let second = sem.acquire_with(opts).await.expect("permit");
                return vec![first, second];
            }
            Want::Permit => client.semaphore(name, 2).unwrap().acquire_with(opts).await,
            Want::ReadWrite => match i {
                Some(i) if i % 3 != 2 => client.rw_lock(name).unwrap().read_with(opts).await,
                _ => client.rw_lock(name).unwrap().write_with(opts).await,
            },
        };
        vec![one.expect("acquire")]
    }
}

/// What one run of hand-offs cost.
#[derive(Debug)]
struct Handoffs {
    /// Redis commands (scripts' inner calls included) per hand-off.
    commands: f64,
    /// Script calls (`EVALSHA`) per hand-off, the holder's releases not
    /// counted.
    scripts: f64,
    /// Release-to-acquire latencies, one per hand-off.
    latencies: Vec<Duration>,
}

fn total(calls: &BTreeMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(name, _)| !matches!(name.as_str(), "info" | "config|resetstat" | "ping"))
        .map(|(_, n)| n)
        .sum()
}

/// `waiters` owners wait on a name held with a 60 s lease — all in one
/// client (`shared`), or each in its own client (its own connections, like
/// separate processes); once all are waiting, the holder releases and each
/// waiter, when it gets the lock, releases it at once: `waiters` hand-offs
/// in a chain.
async fn handoffs(server: &Server, waiters: usize, shared: bool, want: Want) -> Handoffs {
    let locks = lockkit::connect(&server.url()).await.expect("connect");
    let name = format!("handoff-{waiters}-{shared}-{want:?}");
    let mut clients = Vec::new();
    for _ in 0..waiters {
        clients.push(if shared {
            locks.with_new_owner()
        } else {
            lockkit::connect(&server.url()).await.expect("connect")
        });
    }
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(60))
        .wait(Duration::from_secs(60));
    let holder = locks.with_new_owner();
    // Warm up: the server loads each script on its first use.
    let warm = holder.lock_with("warm-up", &opts).await.expect("lock");
    let _ = holder.with_new_owner().try_lock("warm-up").await.expect("try_lock");
    warm.unlock().await.expect("unlock");
    for g in want.take(&holder, "warm-up-kind", None, &opts).await {
        g.unlock().await.expect("unlock");
    }
    let guards = want.take(&holder, &name, None, &opts).await;
    let holds = guards.len() as u64;

    let before_waiting = server.command_calls();
    let released_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let acquired_at = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let tasks: Vec<_> = clients
        .into_iter()
        .enumerate()
        .map(|(i, client)| {
            let (client, name, opts): (LockClient, _, _) = (client, name.clone(), opts.clone());
            let (released_at, acquired_at) = (released_at.clone(), acquired_at.clone());
            tokio::spawn(async move {
                let g = want.take(&client, &name, Some(i), &opts).await;
                acquired_at.lock().unwrap().push(Instant::now());
                released_at.lock().unwrap().push(Instant::now());
                for g in g {
                    g.unlock().await.expect("waiter unlocks");
                }
            })
        })
        .collect();
    // Every waiter tries once or twice before it sleeps (a plain try first
    // unless its client already listens on the name, then once in line).
    // Wait (on the server's own count) until all have tried and the count
    // has settled.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut settled = (0, Instant::now());
    loop {
        let calls = server.command_calls();
        let evalsha = calls.get("evalsha").copied().unwrap_or(0) - before_waiting.get("evalsha").copied().unwrap_or(0);
        if evalsha != settled.0 {
            settled = (evalsha, Instant::now());
        } else if evalsha >= waiters as u64 && settled.1.elapsed() >= Duration::from_millis(300) {
            break;
        }
        assert!(Instant::now() < deadline, "waiters did not all start waiting");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = server.command_calls();
    released_at.lock().unwrap().push(Instant::now());
    for g in guards {
        assert!(g.unlock().await.expect("holder unlocks").is_free());
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("every waiter gets the lock promptly, not at the 60 s expiry")
            .expect("waiter task");
    }
    let after = server.command_calls();
    if std::env::var("LOCKKIT_DEBUG_HANDOFF").is_ok() {
        for (k, v) in &after {
            let b = before.get(k).copied().unwrap_or(0);
            if *v != b {
                eprintln!("  {k}: {}", v - b);
            }
        }
    }
    let n = waiters as f64;
    let released = released_at.lock().unwrap().clone();
    let mut acquired = acquired_at.lock().unwrap().clone();
    acquired.sort();
    let mut released = released;
    released.sort();
    let latencies = acquired.iter().zip(&released).map(|(a, r)| *a - *r).collect();
    let evalsha = |m: &BTreeMap<String, u64>| m.get("evalsha").copied().unwrap_or(0);
    Handoffs {
        commands: (total(&after) - total(&before)) as f64 / n,
        scripts: (evalsha(&after) - evalsha(&before) - holds) as f64 / n,
        latencies,
    }
}

fn describe(waiters: usize, h: &Handoffs) -> String {
    let mut l = h.latencies.clone();
    l.sort();
    let median = l[l.len() / 2];
    let max = *l.last().unwrap();
    format!(
        "{waiters:>2} waiters: {:.2} commands ({:.2} scripts) per hand-off; hand-off latency median {median:?}, max {max:?}",
        h.commands, h.scripts
    )
}

fn check_handoffs(what: &str, two: &Handoffs, sixteen: &Handoffs) {
    eprintln!("{what}, {}", describe(2, two));
    eprintln!("{what}, {}", describe(16, sixteen));
    // One release and one acquisition per hand-off: a woken herd would show
    // up as one attempt per waiter.
    for (n, h) in [(2, two), (16, sixteen)] {
        assert!(
            h.scripts <= 2.5,
            "{what}, {n} waiters: {:.2} scripts per hand-off",
            h.scripts
        );
    }
    assert!(
        sixteen.commands <= two.commands * 1.25 + 1.0,
        "{what}: commands per hand-off grew with the waiters: {:.2} with 2, {:.2} with 16",
        two.commands,
        sixteen.commands
    );
    // Nobody waited for the holder's 60 s expiry.
    for l in sixteen.latencies.iter().chain(&two.latencies) {
        assert!(*l < Duration::from_secs(10), "{what}: a hand-off took {l:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_cost_does_not_grow_with_waiters() {
    if !redis::available("handoff_cost_does_not_grow_with_waiters") {
        return;
    }
    let server = Server::start();
    let two = handoffs(&server, 2, true, Want::Lock).await;
    let sixteen = handoffs(&server, 16, true, Want::Lock).await;
    check_handoffs("one client", &two, &sixteen);
    let two = handoffs(&server, 2, false, Want::Lock).await;
    let sixteen = handoffs(&server, 16, false, Want::Lock).await;
    check_handoffs("a client each", &two, &sixteen);
    // The last waiter leaving unsubscribed and left the queue.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.cli(&["PUBSUB", "CHANNELS"]).trim().is_empty() {
        assert!(Instant::now() < deadline, "subscriptions left behind");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let queues = server.cli(&["--scan", "--pattern", "lockkit:*q:*"]);
    assert!(queues.trim().is_empty(), "waiter queues left behind: {queues}");
}

/// Contract point 14 for semaphores and read-write locks: a change wakes
/// only the clients it lets in, so a hand-off costs the same scripts and
/// commands with 16 waiting clients as with 2 (a woken herd shows as one
/// attempt per waiting client and release).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_handoff_cost_does_not_grow_with_waiters() {
    if !redis::available("kinds_handoff_cost_does_not_grow_with_waiters") {
        return;
    }
    let server = Server::start();
    for want in [Want::Permit, Want::ReadWrite] {
        let two = handoffs(&server, 2, false, want).await;
        let sixteen = handoffs(&server, 16, false, want).await;
        check_handoffs(&format!("{want:?}, a client each"), &two, &sixteen);
        let two = handoffs(&server, 2, true, want).await;
        let sixteen = handoffs(&server, 16, true, want).await;
        check_handoffs(&format!("{want:?}, one client"), &two, &sixteen);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_waiters_leave_no_subscription() {
    if !redis::available("dropped_waiters_leave_no_subscription") {
        return;
    }
    let server = Server::start();
    let locks = lockkit::connect(&server.url()).await.expect("connect");
    let opts = LockOptions::new().ttl(Duration::from_secs(60));
    let guard = locks.lock_with("held", &opts).await.expect("lock");
    let other = locks.with_new_owner();
    for give_up in [5u64, 20, 50, 100] {
        let r = tokio::time::timeout(Duration::from_millis(give_up), other.lock_with("held", &opts)).await;
        assert!(r.is_err(), "the lock is held: the waiter must still be waiting");
    }
    // Unsubscribing runs in the background right after the drop.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !server.cli(&["PUBSUB", "CHANNELS"]).trim().is_empty() {
        assert!(Instant::now() < deadline, "a dropped waiter left its subscription");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // And a later waiter subscribes again and is woken by the release.
    let waiter = tokio::spawn(async move { other.lock_with("held", &opts).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.unlock().await.expect("unlock");
    let g = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("woken by the release")
        .expect("task")
        .expect("lock");
    g.unlock().await.expect("unlock");
}

/// The key of `name`'s waiter queue, once a waiter has queued (within 10 s).
async fn queue_key(server: &Server, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let keys = server.cli(&["--scan", "--pattern", &format!("lockkit:*q:{name}")]);
        if let Some(k) = keys.lines().next().filter(|k| !k.is_empty()) {
            return k.to_owned();
        }
        assert!(Instant::now() < deadline, "the waiter on {name:?} did not queue");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A holder with `lease` on `name` and a live waiter in another client;
/// once the waiter queued, clients that died while queued (`dead`: ids,
/// never answering) are put ahead of it, and the holder releases. Returns
/// how long the live waiter took to get the name from the release, after
/// checking that the dead were dropped from the queue.
async fn handoff_past_dead(server: &Server, name: &str, lease: Duration, dead: &[&str]) -> Duration {
    let (holder, waiter) = (
        lockkit::connect(&server.url()).await.expect("connect"),
        lockkit::connect(&server.url()).await.expect("connect"),
    );
    let opts = LockOptions::new().ttl(lease).wait(Duration::from_secs(30));
    let g = holder.lock_with(name, &opts).await.expect("lock");
    let task = tokio::spawn({
        let (waiter, opts, name) = (waiter.clone(), opts.clone(), name.to_owned());
        async move { waiter.lock_with(&name, &opts).await }
    });
    let queue = queue_key(server, name).await;
    let mut zadd = vec!["ZADD".to_owned(), queue.clone()];
    for (place, id) in dead.iter().enumerate() {
        zadd.extend([(place + 1).to_string(), (*id).to_owned()]);
    }
    server.cli(&zadd.iter().map(String::as_str).collect::<Vec<_>>());
    let released = Instant::now();
    g.unlock().await.expect("unlock");
    let gw = tokio::time::timeout(Duration::from_secs(30), task)
        .await
        .expect("the live waiter takes over")
        .expect("task")
        .expect("lock");
    let took = released.elapsed();
    let members = server.cli(&["ZRANGE", &queue, "0", "-1"]);
    for id in dead {
        assert!(
            !members.contains(id),
            "the dead client {id} was dropped from the queue: {members}"
        );
    }
    gw.unlock().await.expect("unlock");
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_queued_client_only_delays_one_handoff() {
    if !redis::available("a_crashed_queued_client_only_delays_one_handoff") {
        return;
    }
    let server = Server::start();
    let took = handoff_past_dead(&server, "crashed", Duration::from_secs(60), &["dead0000dead0000"]).await;
    assert!(
        took < Duration::from_secs(5),
        "hand-off past a dead client took {took:?}: the live waiter takes over after the fallback delay"
    );
    eprintln!("hand-off past a dead queued client: {took:?}");
}

/// A release tells only the head of the queue and the next in line; a
/// client that died while queued has no listener left on its channel, so
/// the release drops it at once and tells the one after it instead —
/// however many died in a row. (Before, two dead clients in a row were
/// skipped only when the lease the live one last saw ran out.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_queued_clients_are_dropped_by_the_release() {
    if !redis::available("crashed_queued_clients_are_dropped_by_the_release") {
        return;
    }
    let server = Server::start();
    let lease = Duration::from_secs(3);
    let dead = ["dead0000dead0001", "dead0000dead0002", "dead0000dead0003"];
    let took = handoff_past_dead(&server, "crashed3", lease, &dead).await;
    eprintln!("hand-off past three dead queued clients: {took:?}");
    assert!(
        took < Duration::from_millis(1500),
        "hand-off past three dead clients took {took:?}: the release drops them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_releases_somebody_waits_for_publish() {
    let Some((server, a, b)) = redis::two_clients("only_releases_somebody_waits_for_publish").await else {
        return;
    };
    let opts = LockOptions::new()
        .ttl(Duration::from_secs(60))
        .wait(Duration::from_secs(30));
    let publishes = |s: &Server| s.command_calls().get("publish").copied().unwrap_or(0);
    // Uncontended (a refused try_lock does not queue either): silent.
    let before = publishes(&server);
    for _ in 0..10 {
        let g = a.lock_with("quiet", &opts).await.expect("lock");
        assert!(b.try_lock("quiet").await.expect("try_lock").is_none());
        g.unlock().await.expect("unlock");
    }
    assert_eq!(publishes(&server) - before, 0, "uncontended releases published");
    // A waiter in another client: the release is published and wakes it.
    let g = a.lock_with("quiet", &opts).await.expect("lock");
    let waiter = tokio::spawn({
        let (b, opts) = (b.clone(), opts.clone());
        async move { b.lock_with("quiet", &opts).await }
    });
    queue_key(&server, "quiet").await;
    let before = publishes(&server);
    g.unlock().await.expect("unlock");
    assert!(
        publishes(&server) > before,
        "a release somebody waited for was not published"
    );
    let gb = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("woken by the release, not the 60 s lease")
        .expect("task")
        .expect("lock");
    gb.unlock().await.expect("unlock");
}

/// The mutex's acquire script as `lockkit-redis` builds it.
const ACQUIRE_SCRIPT: &str = concat!(
    include_str!("../../lockkit-redis/src/lua/clock.lua"),
    include_str!("../../lockkit-redis/src/lua/waiter_channel.lua"),
    include_str!("../../lockkit-redis/src/lua/announce.lua"),
    include_str!("../../lockkit-redis/src/lua/token.lua"),
    include_str!("../../lockkit-redis/src/lua/hold.lua"),
    include_str!("../../lockkit-redis/src/lua/guard.lua"),
    include_str!("../../lockkit-redis/src/lua/one_name.lua"),
    include_str!("../../lockkit-redis/src/lua/acquire.lua")
);

/// A fair attempt by waiting client `waiter` on the free name `name` that
/// names `stale` as a head that let its turn pass; the script's reply.
fn attempt_dropping(server: &Server, name: &str, waiter: &str, stale: &str) -> String {
    let lock = redis::lock_key(name);
    let (counter, queue, turn) = (
        redis::counter_key(name),
        lock.replacen("}:", "}q:", 1),
        lock.replacen("}:", "}t:", 1),
    );
    server.cli(&[
        "EVAL",
        ACQUIRE_SCRIPT,
        "6",
        &lock,
        &counter,
        &queue,
        &turn,
        // One name, one lock: the semaphore's and read-write lock's lease
        // ends.
        &lock.replacen("}:", "}es:", 1),
        &lock.replacen("}:", "}er:", 1),
        "owner-w",
        "60000",
        "a0a0a0a0a0a0a0a0",
        "",
        waiter,
        "wf",
        stale,
        "PUBLISH",
        "",
        redis::WAITER_MARK,
        "",
        "200",
    ])
}

/// A head is dropped as one that let its turn pass only once it was told
/// its turn on this server at least the fallback delay ago. A waiter's
/// record of a head's turn may be older than the turn that head has now:
/// on Redlock a client told "C's turn" by one node (then moved behind C
/// there by its own grant) released the name on another node, which told C
/// its turn; the client's next attempt, its fallback delay after the old
/// message, dropped C there 14 ms after C was told — a live head overtaken,
/// and in `a_grant_moves_the_waiter_in_every_nodes_line` C never served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_told_its_turn_just_now_is_not_dropped() {
    if !redis::available("a_head_told_its_turn_just_now_is_not_dropped") {
        return;
    }
    let server = Server::start();
    let lock = redis::lock_key("turn");
    let (queue, turn) = (lock.replacen("}:", "}q:", 1), lock.replacen("}:", "}t:", 1));
    let (head, waiter) = ("c0c0c0c0c0c0c0c0", "a0a0a0a0a0a0a0a0");
    server.cli(&["ZADD", &queue, "1", head, "2", waiter]);
    // The head is told its turn now (a release's announcement).
    let now_ms = server.time_ms();
    server.cli(&["SET", &turn, &format!("{head}|{now_ms}"), "PX", "10000"]);
    let reply = attempt_dropping(&server, "turn", waiter, head);
    assert_eq!(
        reply.lines().next().map(str::trim),
        Some("0"),
        "not taken past a head told just now: {reply}"
    );
    assert_eq!(
        server.cli(&["ZRANGE", &queue, "0", "-1"]).lines().collect::<Vec<_>>(),
        [head, waiter],
        "the head stays in line"
    );
    // Told a second ago, and not come: dropped, and the waiter takes it.
    server.cli(&["SET", &turn, &format!("{head}|{}", now_ms - 1000), "PX", "10000"]);
    let reply = attempt_dropping(&server, "turn", waiter, head);
    assert_eq!(reply.lines().next().map(str::trim), Some("1"), "taken: {reply}");
    assert_eq!(
        server.cli(&["ZRANGE", &queue, "0", "-1"]).trim(),
        "",
        "the head was dropped"
    );
    assert_eq!(
        server.cli(&["EXISTS", &turn]).trim(),
        "0",
        "the turn is over once taken"
    );
}
