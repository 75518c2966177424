//! A waiter whose process is killed (SIGKILL: no clean-up runs, its
//! connections close) while it stands in line between a holder and a live
//! waiter, for a mutex, a semaphore and a read-write lock on each dialect:
//! the live waiter is served soon after the holder's release — the dead
//! place is passed over by its liveness key (MySQL/MariaDB: the `GET_LOCK`
//! its connection held; Postgres: its wait-list session's advisory lock;
//! SQLite: its `<table>_live` row, 400 ms lease), not after its place's
//! lease (5 s). Prints the delay from the release to the grant; asserts a
//! bound a loaded 2-core machine meets (the goal, 500 ms, is reported).
//!
//! And a live process whose liveness lapses (SQLite: its row not renewed
//! in time) is passed over while it does, but keeps its place and is
//! served once, before those who came after it, when it lives again.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::process::Stdio;
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockGuard, LockKind, LockOptions};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

use crate::common::spawn_child;
use crate::common::unique;
use crate::kinds::until_waiting;

pub(crate) const ROLE: &str = "LOCKKIT_SQL_DEAD_CHILD";
pub(crate) const URL: &str = "LOCKKIT_SQL_DEAD_CHILD_URL";
pub(crate) const NAME: &str = "LOCKKIT_SQL_DEAD_CHILD_NAME";

/// The release-to-grant delay asserted (the kit's `dead_waiter_bound`).
const BOUND: Duration = Duration::from_millis(1500);

/// The kinds tried, by the name a child is given.
const KINDS: [(&str, LockKind); 3] = [
    ("mutex", LockKind::Mutex),
    ("permit", LockKind::Permit { permits: 1 }),
    ("write", LockKind::Write),
];

async fn request(client: &LockClient, name: &str, kind: LockKind, opts: &LockOptions) -> Result<LockGuard, LockError> {
    match kind {
        LockKind::Mutex => client.lock_with(name, opts).await,
        LockKind::Permit { permits } => client.semaphore(name, permits)?.acquire_with(opts).await,
        _ => client.rw_lock(name)?.write_with(opts).await,
    }
}

/// The child: waits for the lock (forever) until it is killed — or, as
/// `slow`, takes the mutex, says so (`GOT`), holds it a moment and gives
/// it back (`RELEASED`).
#[ignore = "a child process entry: the tests that need it start it"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_child() {
    let Ok(kind) = std::env::var(ROLE) else {
        return;
    };
    let (url, name) = (std::env::var(URL).expect("url"), std::env::var(NAME).expect("name"));
    let client = lockkit::connect(&url).await.expect("child connects");
    let opts = client.options().wait_forever();
    if kind == "slow" {
        let guard = client.lock_with(&name, &opts).await.expect("the slow child's lock");
        println!("GOT {}", guard.fencing_token());
        tokio::time::sleep(Duration::from_millis(200)).await;
        guard.unlock().await.expect("the slow child's unlock");
        println!("RELEASED");
        return;
    }
    let kind = KINDS.iter().find(|(k, _)| *k == kind).expect("a known kind").1;
    let got = request(&client, &name, kind, &opts).await;
    panic!("the child was to be killed while it waited, but got {got:?}");
}

async fn killed_waiter(url: String, label: &str) {
    for (kind_name, kind) in KINDS {
        let name = unique("dead_waiter_killed");
        let (a, c) = (
            lockkit::connect(&url).await.unwrap(),
            lockkit::connect(&url).await.unwrap(),
        );
        let long = a.options().ttl(Duration::from_secs(60));
        let held = request(&a, &name, kind, &long).await.unwrap();
        let env = [(ROLE, kind_name), (URL, url.as_str()), (NAME, name.as_str())];
        let mut child = spawn_child(module_path!(), "dead_child", &env, Stdio::null());
        until_waiting(&a, &name, kind, 1).await;
        let waiter = {
            let (c, name) = (c.clone(), name.clone());
            let opts = c.options().ttl(Duration::from_secs(60)).wait(Duration::from_secs(60));
            tokio::spawn(async move { request(&c, &name, kind, &opts).await })
        };
        until_waiting(&a, &name, kind, 2).await;
        child.0.kill().expect("SIGKILL the waiter");
        child.0.wait().unwrap();
        let released = Instant::now();
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(30), waiter)
            .await
            .expect("the waiter behind the killed one is served")
            .unwrap()
            .expect("the live waiter's lock");
        let delay = released.elapsed();
        eprintln!("{label}: {kind_name}: served {delay:?} after the release, past a killed waiter");
        assert!(
            delay <= BOUND,
            "{label} {kind_name}: served {delay:?} after the release"
        );
        assert_eq!(
            a.backend().waiting_for(&name, kind).await.unwrap(),
            0,
            "the killed waiter's place is not counted"
        );
        guard.unlock().await.unwrap();
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_killed_waiter() {
    let dir = tempfile::tempdir().unwrap();
    killed_waiter(format!("sqlite://{}/locks.db", dir.path().display()), "sqlite").await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_killed_waiter() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        killed_waiter(url, "mysql").await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_killed_waiter() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        killed_waiter(url, "postgres").await;
    }
}

/// SQLite: a process whose liveness row lapsed (set expired by hand here;
/// in life, renewals stalled longer than `live_lease`) is passed over — a
/// waiter behind it is served — but keeps its place: living again, it is
/// served before a waiter that came after it, and once.
#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_lapsed_waiter_keeps_its_place() {
    use std::io::{BufRead, BufReader};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    let name = unique("lapsed_waiter");
    let (a, c, d) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let long = a.options().ttl(Duration::from_secs(60)).wait(Duration::from_secs(60));
    let held = a.lock_with(&name, &long).await.unwrap();
    // The slow process renews its liveness row every 15 s: a lapse set by
    // hand lasts.
    let slow_url = crate::common::with_params(&url, "live_lease=60s");
    let env = [(ROLE, "slow"), (URL, slow_url.as_str()), (NAME, name.as_str())];
    let mut slow = spawn_child(module_path!(), "dead_child", &env, Stdio::piped());
    let said = BufReader::new(slow.0.stdout.take().unwrap()).lines();
    until_waiting(&a, &name, LockKind::Mutex, 1).await;
    // Only the slow process has waited so far: the one row is its.
    let live = |expires: &str| format!("UPDATE lockkit_locks_live SET expires_at = {expires}");
    crate::fair::raw(&url, live("0")).await;
    until_waiting(&a, &name, LockKind::Mutex, 0).await;
    let c_waits = {
        let (c, name, opts) = (c.clone(), name.clone(), long.clone());
        tokio::spawn(async move { c.lock_with(&name, &opts).await })
    };
    until_waiting(&a, &name, LockKind::Mutex, 1).await;
    held.unlock().await.unwrap();
    let gc = tokio::time::timeout(Duration::from_secs(10), c_waits)
        .await
        .expect("the waiter behind the lapsed one is served")
        .unwrap()
        .unwrap();
    // Alive again (its next renewal would do the same), with a newcomer
    // behind it.
    crate::fair::raw(&url, live("9000000000000000")).await;
    let d_waits = {
        let (d, name, opts) = (d.clone(), name.clone(), long.clone());
        tokio::spawn(async move { d.lock_with(&name, &opts).await })
    };
    until_waiting(&a, &name, LockKind::Mutex, 2).await;
    let c_token = gc.fencing_token();
    gc.unlock().await.unwrap();
    // Its own lines, among libtest's (read to the end: a closed pipe
    // would fail the child).
    let said = tokio::task::spawn_blocking(move || {
        said.map_while(Result::ok)
            .filter(|l| l.contains("GOT ") || l == "RELEASED")
            .collect::<Vec<_>>()
    });
    let gd = tokio::time::timeout(Duration::from_secs(20), d_waits)
        .await
        .expect("the newcomer is served")
        .unwrap()
        .unwrap();
    let said = tokio::time::timeout(Duration::from_secs(20), said)
        .await
        .unwrap()
        .unwrap();
    let slow_token: u64 = match said.as_slice() {
        [got, released] if released == "RELEASED" => got.rsplit(' ').next().unwrap().parse().unwrap(),
        other => panic!("the lapsed waiter takes its lock once, and gives it back: {other:?}"),
    };
    // Tokens grow in grant order.
    assert!(
        c_token < slow_token && slow_token < gd.fencing_token(),
        "passed over while lapsed, then served before the newcomer: {c_token} < {slow_token} < {}",
        gd.fencing_token()
    );
    gd.unlock().await.unwrap();
    assert!(slow.0.wait().unwrap().success(), "the slow child took its lock once");
}
