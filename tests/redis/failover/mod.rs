//! Failover measured (docs/failover.md): a sentinel group and a cluster on
//! private servers, under a load of lockers writing to a fenced store,
//! lose their master again and again (SIGKILL; the killed node comes back
//! as a replica). Each run counts double grants — what a failover may
//! cost, with and without `wait_replicas=1` — and asserts what must hold
//! whatever the failover did: fencing stopped every stale write, and the
//! store accepted no write out of token order.
//!
//! The suite runs [`DEFAULT_RUNS`] failovers per configuration;
//! `LOCKKIT_FAILOVER_RUNS=100` makes it the measurement of record
//! (`LOCKKIT_FAILOVER_LAG_MS`, `LOCKKIT_FAILOVER_SEED`: see
//! docs/failover.md).
#![cfg(feature = "redis")]

mod cluster_group;
mod load;
mod probe;
mod rng;
mod sentinel_group;
mod store;
mod tally;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::common::redis;
use cluster_group::ClusterGroup;
use load::{Load, SHAPE};
use rand::RngExt;
use sentinel_group::SentinelGroup;
use tally::Tally;

/// Failovers per configuration in the normal suite.
const DEFAULT_RUNS: usize = 2;

/// The sentinel replica's lag when `LOCKKIT_FAILOVER_LAG_MS` is not set.
const DEFAULT_LAG_MS: u64 = 20;

/// Locks the load takes between two failovers before the next kill: the
/// load is running again, on the new master.
const GRANTS_BETWEEN: u64 = 8;

const WAIT_1: &str = "?wait_replicas=1&wait_replicas_timeout=1s";

fn env_number(var: &str, default: u64) -> u64 {
    std::env::var(var).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn runs() -> usize {
    env_number("LOCKKIT_FAILOVER_RUNS", DEFAULT_RUNS as u64) as usize
}

fn lag() -> Duration {
    Duration::from_millis(env_number("LOCKKIT_FAILOVER_LAG_MS", DEFAULT_LAG_MS))
}

enum Group {
    Sentinel(Box<SentinelGroup>),
    Cluster(ClusterGroup),
}

impl Group {
    fn url(&self, params: &str) -> String {
        match self {
            Group::Sentinel(g) => g.url(params),
            Group::Cluster(g) => g.url(params),
        }
    }

    fn names(&self) -> Vec<String> {
        match self {
            Group::Sentinel(_) => (0..SHAPE.names).map(|i| format!("fo-{i}")).collect(),
            Group::Cluster(g) => g.names(),
        }
    }

    fn crash_primary(&mut self) {
        match self {
            Group::Sentinel(g) => g.crash_primary(),
            Group::Cluster(g) => g.crash_primary(),
        }
    }

    async fn await_promotion(&mut self) {
        match self {
            Group::Sentinel(g) => g.await_promotion().await,
            Group::Cluster(g) => g.await_promotion().await,
        }
    }

    async fn rejoin(&mut self) {
        match self {
            Group::Sentinel(g) => g.rejoin().await,
            Group::Cluster(g) => g.rejoin().await,
        }
    }
}

/// Waits until the load has taken [`GRANTS_BETWEEN`] more locks.
async fn load_running(load: &Load) {
    let from = load.grants.load(Ordering::Relaxed);
    probe::within("the load takes locks again", || {
        (load.grants.load(Ordering::Relaxed) >= from + GRANTS_BETWEEN).then_some(())
    })
    .await;
}

/// Runs the load on `group` (URL parameters `params`) through
/// [`runs`] failovers.
async fn measure(mut group: Group, params: &str, config: &str) -> Tally {
    let seed = rng::seed();
    println!("failover {config}: seed={seed} runs={}", runs());
    let load = Load::new(group.names());
    let started = Instant::now();
    let tasks = load.start(&group.url(params), SHAPE, seed).await;
    let mut rng = rng::seeded(seed);
    let mut outages = Vec::new();
    for _ in 0..runs() {
        load_running(&load).await;
        // Not a wait for a state: the kill lands at a random point of the
        // holds' cycle, not right after the load resumed.
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..=1000))).await;
        load.epoch.fetch_add(1, Ordering::SeqCst);
        let killed = Instant::now();
        group.crash_primary();
        group.await_promotion().await;
        outages.push(killed.elapsed());
        group.rejoin().await;
        println!(
            "failover {config}: failover {} done {:?} after the kill",
            outages.len(),
            killed.elapsed()
        );
    }
    load_running(&load).await;
    load.stop(tasks).await;
    println!("failover {config}: load stopped after {:?}", started.elapsed());
    let holds = load.holds.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let log = load.store.log();
    let fencing = store::check(&log);
    let tally = Tally::of(&holds, fencing, outages, load.lock_errors.load(Ordering::Relaxed));
    println!("{}", tally.line(config));
    for e in &tally.examples {
        println!("failover {config}: double grant: {e}");
    }
    describe_stale_writes(&log, &holds, config);
    let failures = load.lock_failures.lock().unwrap_or_else(|e| e.into_inner()).clone();
    for f in &failures {
        println!("failover {config}: lock failed for good: {f}");
    }
    assert!(
        failures.is_empty(),
        "{config}: lock failed with errors not retryable: {failures:?}"
    );
    tally
}

/// Prints the first stale writes: whose, and whether the writer's hold
/// was a re-entry into a hold of its own left on the server by a failed
/// `unlock` (two holds of one owner with one token).
fn describe_stale_writes(log: &[store::Write], holds: &[load::Hold], config: &str) {
    let mut stale = store::stale_writes(log);
    stale.dedup_by_key(|(w, _)| (w.name, w.owner, w.token));
    for (w, highest) in stale.iter().take(5) {
        let same = holds
            .iter()
            .filter(|h| (h.name, h.owner, h.token) == (w.name, w.owner, w.token))
            .count();
        println!(
            "failover {config}: stale write: name {} owner {} token {} after token {highest} (holds of that owner under that token: {same})",
            w.name, w.owner, w.token
        );
    }
}

/// What holds whatever the failovers did.
fn assert_fenced(t: &Tally, config: &str) {
    let f = &t.fencing;
    assert_eq!(t.failovers, runs(), "{config}: every failover happened");
    assert!(f.writes > 0, "{config}: the load wrote");
    assert_eq!(f.stale_stopped, f.stale, "{config}: fencing stops every stale write");
    assert_eq!(f.out_of_order, 0, "{config}: no accepted write out of token order");
    assert_eq!(f.fresh_refused, 0, "{config}: the newest holder's writes land");
    assert_eq!(
        t.double_grants_without_failover, 0,
        "{config}: no double grant before the first failover"
    );
}

async fn run(group: Group, params: &str, config: &str) {
    let tally = measure(group, params, config).await;
    assert_fenced(&tally, config);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failovers_are_fenced() {
    if !redis::available("sentinel_failovers_are_fenced") {
        return;
    }
    let group = Group::Sentinel(Box::new(SentinelGroup::start(lag()).await));
    run(group, "", &format!("sentinel lag={:?} wait_replicas=0", lag())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failovers_waiting_for_a_replica_are_fenced() {
    if !redis::available("sentinel_failovers_waiting_for_a_replica_are_fenced") {
        return;
    }
    let group = Group::Sentinel(Box::new(SentinelGroup::start(lag()).await));
    run(group, WAIT_1, &format!("sentinel lag={:?} wait_replicas=1", lag())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_failovers_are_fenced() {
    if !redis::available("cluster_failovers_are_fenced") {
        return;
    }
    let group = Group::Cluster(ClusterGroup::start(SHAPE.names).await);
    run(group, "", "cluster wait_replicas=0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_failovers_waiting_for_a_replica_are_fenced() {
    if !redis::available("cluster_failovers_waiting_for_a_replica_are_fenced") {
        return;
    }
    let group = Group::Cluster(ClusterGroup::start(SHAPE.names).await);
    run(group, WAIT_1, "cluster wait_replicas=1").await;
}
