//! Crash release on ZooKeeper: a holder process killed with SIGKILL (no
//! chance to close its session) blocks the name until the server expires
//! its session, and not much longer. The holder is this test binary itself,
//! re-executed with [`CHILD_VAR`] set.
#![cfg(feature = "zookeeper")]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use lockkit_core::testkit::services_required;

/// Set in the child: `URL\nNAME` of the lock to take and hold until killed.
const CHILD_VAR: &str = "LOCKKIT_ZK_CRASH_CHILD";
/// The child's session timeout.
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);
/// ZooKeeper checks for expired sessions once per tick (2 s here).
const TICK: Duration = Duration::from_secs(2);
/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(15);
const TEST_NAME: &str = "a_killed_holder_process_frees_the_lock_when_its_session_expires";

/// Kills the child however the test ends.
struct Holder(Child);

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_the_lock_when_its_session_expires() {
    if let Ok(spec) = std::env::var(CHILD_VAR) {
        return hold_until_killed(&spec).await;
    }
    let url = match std::env::var("LOCKKIT_ZK_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if services_required() => panic!("LOCKKIT_ZK_URL is not set and LOCKKIT_REQUIRE_SERVICES=1"),
        _ => return eprintln!("skipped: LOCKKIT_ZK_URL is not set (run scripts/services up zookeeper)"),
    };
    let name = format!("lockkit-test/crash/{}", lockkit_core::raw::random_owner());
    let child_url = format!("{url}?session_timeout={}s", SESSION_TIMEOUT.as_secs());
    let mut child = Holder(
        Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                &crate::common::test_name(module_path!(), TEST_NAME),
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_VAR, format!("{child_url}\n{name}"))
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the holder process"),
    );
    let (tx, rx) = mpsc::channel();
    let stdout = child.0.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness prints "test NAME ... " on the same line first.
            if let Some((_, held)) = line.split_once("HELD ") {
                let _ = tx.send(held.to_owned());
            }
        }
    });
    let held = rx.recv_timeout(BOUND).expect("the holder process reports its lock");
    let (owner, token) = held.split_once(' ').expect("HELD OWNER TOKEN");
    let token: u64 = token.parse().expect("token");

    let other = lockkit::connect(&url).await.expect("connect");
    let info = other.inspect(&name).await.unwrap().expect("held by the child");
    assert_eq!((info.owner.as_str(), info.token), (owner, token));
    assert!(other.try_lock(&name).await.unwrap().is_none());

    child.0.kill().expect("SIGKILL the holder");
    child.0.wait().expect("reap it");
    let killed_at = Instant::now();
    let g = other
        .lock_with(&name, &other.options().wait(BOUND))
        .await
        .expect("the lock comes free when the dead holder's session expires");
    let after = killed_at.elapsed();
    eprintln!("holder killed: lock taken over after {after:?} (session timeout {SESSION_TIMEOUT:?})");
    assert!(g.fencing_token() > token);
    assert!(
        after <= SESSION_TIMEOUT + TICK + Duration::from_secs(1),
        "the lock stayed blocked {after:?}, longer than the session timeout allows"
    );
    assert!(
        after >= SESSION_TIMEOUT / 2,
        "freed after {after:?}: a killed process cannot close its session"
    );
    g.unlock().await.unwrap();
}

/// The child: takes the lock, reports it, and waits to be killed.
async fn hold_until_killed(spec: &str) {
    let (url, name) = spec.split_once('\n').expect("URL\\nNAME");
    let client = lockkit::connect(url).await.expect("connect");
    let guard = client.lock(name).await.expect("lock");
    println!("HELD {} {}", guard.owner(), guard.fencing_token());
    std::io::stdout().flush().unwrap();
    std::future::pending::<()>().await;
}
