//! A waiter whose process is killed (SIGKILL: no clean-up runs, its
//! connections close) while it stands in line between a holder and a live
//! waiter, for a mutex, a semaphore and a read-write lock on each dialect:
//! the live waiter is served soon after the holder's release — the dead
//! place is passed over by its liveness key (MySQL/MariaDB: the `GET_LOCK`
//! its connection held; Postgres: its wait-list session's advisory lock;
//! SQLite: its `<table>_live` row, 400 ms lease), not after its place's
//! lease (5 s). Prints the delay from the release to the grant; asserts a
//! bound a loaded 2-core machine meets (the goal, 500 ms, is reported).

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::process::Stdio;
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockGuard, LockKind, LockOptions};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

use crate::children;
use crate::common::unique;
use crate::kinds::until_waiting;

const ROLE: &str = "LOCKKIT_SQL_DEAD_CHILD";
const URL: &str = "LOCKKIT_SQL_DEAD_CHILD_URL";
const NAME: &str = "LOCKKIT_SQL_DEAD_CHILD_NAME";

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

/// The child: waits for the lock (forever) until it is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_child() {
    let Ok(kind) = std::env::var(ROLE) else {
        return;
    };
    let (url, name) = (std::env::var(URL).expect("url"), std::env::var(NAME).expect("name"));
    let kind = KINDS.iter().find(|(k, _)| *k == kind).expect("a known kind").1;
    let client = lockkit::connect(&url).await.expect("child connects");
    let opts = client.options().wait_forever();
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
        let mut child = children::spawn(module_path!(), "dead_child", &env, Stdio::null());
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
