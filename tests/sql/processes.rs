//! Several OS processes on one lock table (SQLite file, MariaDB, Postgres):
//!
//! - crash: a child holding a lock (auto-extended) is killed with SIGKILL;
//!   the name comes free once its lease ends and the sweeper deletes the row;
//! - stress: 4 processes × 8 tasks increment a counter kept in a plain file
//!   (read, yield, write) under one lock: the total is exact and the tokens
//!   logged in lock order strictly grow.
//!
//! The children are this test binary again (`child_process`, driven by
//! environment variables). Server-backed variants need `LOCKKIT_MYSQL_URL` /
//! `LOCKKIT_POSTGRES_URL` (skipped without, failed with
//! `LOCKKIT_REQUIRE_SERVICES=1`).

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{Reaper, spawn_child};
use crate::common::{unique, with_params};

#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

const ROLE: &str = "LOCKKIT_SQL_CHILD";
const URL: &str = "LOCKKIT_SQL_CHILD_URL";
const NAME: &str = "LOCKKIT_SQL_CHILD_NAME";
const DIR: &str = "LOCKKIT_SQL_CHILD_DIR";

const HOLD_TTL: Duration = Duration::from_secs(2);
const SWEEP: Duration = Duration::from_millis(300);
const PROCESSES: usize = 4;
const TASKS: usize = 8;
const ITERATIONS: usize = 25;

/// The entry point of the child processes the other tests start; without
/// `LOCKKIT_SQL_CHILD` in the environment it returns at once.
#[ignore = "a child process entry: the tests that need it start it"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL).expect("child url");
    let name = std::env::var(NAME).expect("child lock name");
    let locks = lockkit::connect(&url).await.expect("child connects");
    match role.as_str() {
        "hold" => {
            let opts = locks.options().ttl(HOLD_TTL).auto_extend(true);
            let guard = locks.lock_with(&name, &opts).await.expect("child locks");
            println!("HELD {} {}", guard.fencing_token(), locks.owner());
            // Hold (and keep extending) until killed.
            std::future::pending::<()>().await;
        }
        "stress" => {
            let dir = std::env::var(DIR).expect("child dir");
            let tasks = (0..TASKS).map(|_| {
                let (client, name, dir) = (locks.with_new_owner(), name.clone(), dir.clone());
                tokio::spawn(async move {
                    let opts = client
                        .options()
                        .ttl(Duration::from_secs(60))
                        .wait(Duration::from_secs(240));
                    for _ in 0..ITERATIONS {
                        let guard = client.lock_with(&name, &opts).await.expect("child locks");
                        let counter = Path::new(&dir).join("counter");
                        let seen: u64 = std::fs::read_to_string(&counter).unwrap().trim().parse().unwrap();
                        tokio::task::yield_now().await;
                        std::fs::write(&counter, format!("{}\n", seen + 1)).unwrap();
                        use std::io::Write;
                        let mut log = std::fs::OpenOptions::new()
                            .append(true)
                            .open(Path::new(&dir).join("tokens"))
                            .unwrap();
                        writeln!(log, "{}", guard.fencing_token()).unwrap();
                        guard.unlock().await.expect("child unlocks");
                    }
                })
            });
            for t in tasks.collect::<Vec<_>>() {
                t.await.expect("child task");
            }
        }
        other => panic!("unknown child role {other}"),
    }
}

fn spawn_role(role: &str, url: &str, name: &str, dir: &Path, stdout: Stdio) -> Reaper {
    let dir = dir.to_string_lossy();
    let env = [(ROLE, role), (URL, url), (NAME, name), (DIR, &*dir)];
    spawn_child(module_path!(), "child_process", &env, stdout)
}

/// Whether the lock table has a row for `name`, expired or not, by a plain
/// query on a connection of its own (not through the backend).
async fn row_exists(url: &str, name: &str) -> bool {
    let name = name.as_bytes();
    let base = url.split('?').next().unwrap_or(url);
    let count: i64 = match base.split(':').next() {
        #[cfg(feature = "sqlite")]
        Some("sqlite") => {
            let path = base.trim_start_matches("sqlite:").trim_start_matches("//");
            let opts = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
            let pool = sqlx::SqlitePool::connect_with(opts).await.expect("sqlite");
            let c = sqlx::query_scalar("SELECT COUNT(*) FROM lockkit_locks WHERE name = ?1")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("count");
            pool.close().await;
            c
        }
        #[cfg(feature = "mysql")]
        Some("mysql") => {
            let pool = sqlx::MySqlPool::connect(base).await.expect("mysql");
            let c = sqlx::query_scalar("SELECT COUNT(*) FROM lockkit_locks WHERE name = ?")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("count");
            pool.close().await;
            c
        }
        #[cfg(feature = "postgres")]
        Some("postgres") => {
            let pool = sqlx::PgPool::connect(base).await.expect("postgres");
            let c = sqlx::query_scalar("SELECT COUNT(*) FROM lockkit_locks WHERE name = $1")
                .bind(name)
                .fetch_one(&pool)
                .await
                .expect("count");
            pool.close().await;
            c
        }
        other => panic!("no raw access for {other:?}"),
    };
    count > 0
}

async fn crash(url: String) {
    let url = with_params(&url, &format!("sweep_interval={}ms", SWEEP.as_millis()));
    let name = unique("crash");
    let dir = tempfile::tempdir().unwrap();
    let mut child = spawn_role("hold", &url, &name, dir.path(), Stdio::piped());
    let stdout = child.0.stdout.take().unwrap();
    let held = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find_map(|l| l.split_once("HELD ").map(|(_, held)| held.to_owned()))
    });
    let held = tokio::time::timeout(Duration::from_secs(60), held)
        .await
        .expect("the child reports its hold")
        .unwrap()
        .expect("child printed HELD");
    let (token, owner) = held.split_once(' ').unwrap();
    let token: u64 = token.parse().unwrap();

    let parent = lockkit::connect(&url).await.expect("parent connects");
    let info = parent.inspect(&name).await.unwrap().expect("the child holds it");
    assert_eq!((info.owner.as_str(), info.token), (owner, token));
    // The child's watchdog keeps the lease alive past its ttl.
    tokio::time::sleep(HOLD_TTL + HOLD_TTL / 2).await;
    assert!(
        parent.try_lock(&name).await.unwrap().is_none(),
        "a live holder keeps its lock past one ttl"
    );

    child.0.kill().expect("SIGKILL the holder");
    child.0.wait().unwrap();
    let killed = Instant::now();
    let bound = HOLD_TTL + SWEEP + Duration::from_secs(15);
    while row_exists(&url, &name).await {
        assert!(
            killed.elapsed() < bound,
            "the crashed holder's row must be swept within ttl + sweep interval"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let guard = parent
        .try_lock(&name)
        .await
        .unwrap()
        .expect("free after the holder crashed");
    assert!(guard.fencing_token() > token, "a new hold gets a greater token");
    guard.unlock().await.unwrap();
    assert!(!row_exists(&url, &name).await, "released rows are deleted");
}

async fn processes(url: String) {
    let name = unique("processes");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("counter"), "0\n").unwrap();
    std::fs::write(dir.path().join("tokens"), "").unwrap();
    let children: Vec<Reaper> = (0..PROCESSES)
        .map(|_| spawn_role("stress", &url, &name, dir.path(), Stdio::null()))
        .collect();
    let waited = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|mut c| c.0.wait().expect("wait child"))
            .collect::<Vec<_>>()
    });
    let statuses = tokio::time::timeout(Duration::from_secs(600), waited)
        .await
        .expect("the children finish")
        .unwrap();
    for s in statuses {
        assert!(s.success(), "a child failed: {s}");
    }
    let total = (PROCESSES * TASKS * ITERATIONS) as u64;
    let counter: u64 = std::fs::read_to_string(dir.path().join("counter"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(
        counter, total,
        "lost updates: the lock did not exclude across processes"
    );
    let tokens: Vec<u64> = std::fs::read_to_string(dir.path().join("tokens"))
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(tokens.len() as u64, total);
    for w in tokens.windows(2) {
        assert!(w[1] > w[0], "tokens must grow in lock order: {} then {}", w[0], w[1]);
    }
}

#[cfg(feature = "sqlite")]
fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}/locks.db", dir.path().display())
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_crash() {
    let dir = tempfile::tempdir().unwrap();
    crash(sqlite_url(&dir)).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_processes() {
    let dir = tempfile::tempdir().unwrap();
    processes(sqlite_url(&dir)).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_crash() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        crash(url).await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_processes() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        processes(url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_crash() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        crash(url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_processes() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        processes(url).await;
    }
}
