//! Fencing end to end (Kleppmann's scenario), on every backend: holder A
//! acquires (token a) and is paused past its lease; B acquires (token b) and
//! writes; A resumes and writes with its old token; the fenced store refuses
//! A's write, and A's lost signal fires once it runs again.
//!
//! And the stalled holder, on every server backend: A's process does not run
//! (a one-thread runtime blocked on a read: no watchdog, no client library
//! task) until B holds the lock; A's first look when it runs again, before
//! anything else of it has run, must say lost — by its lease's deadline, or
//! on ZooKeeper its session's.
//!
//! A is a real child process (this test binary again, role `holder_process`)
//! frozen with SIGSTOP, so its watchdog cannot renew; for ZooKeeper the pause
//! outlasts the session timeout instead. The store
//! ([`FencedStore`](lockkit_core::testkit::FencedStore)) lives in the test
//! process: A reaches it through its stdin and stdout (`WRITE token` →
//! `ACCEPTED` / `REFUSED`), B directly. The in-process memory backend pauses
//! A in-process (no auto-extend, no activity past its lease).
//!
//! Servers come from `LOCKKIT_REDIS_URL`, `LOCKKIT_REDLOCK_URL`,
//! `LOCKKIT_MYSQL_URL`, `LOCKKIT_POSTGRES_URL`, `LOCKKIT_ZK_URL` (skipped
//! without, failed with `LOCKKIT_REQUIRE_SERVICES=1`).
// A build without any server backend runs the memory case only.
#![cfg_attr(not(feature = "sqlite"), allow(dead_code))]

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit::LockClient;
use lockkit_core::testkit::{FencedStore, StaleToken};
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::common::unique;

const ROLE: &str = "LOCKKIT_FENCING_CHILD";
const URL: &str = "LOCKKIT_FENCING_URL";
const NAME: &str = "LOCKKIT_FENCING_NAME";

/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(30);
/// A's lease on TTL backends (auto-extended until A is paused).
const TTL: Duration = Duration::from_secs(1);

/// A, when this binary runs as the child; without `LOCKKIT_FENCING_CHILD` in
/// the environment it returns at once.
///
/// Protocol on stdout / stdin, one line each: `HELD a` once locked; waits for
/// a line (the test sends it, then pauses and resumes A); `WRITE a lost=B`
/// (B: whether A knew it had lost the lock — it writes anyway, like a client
/// that was paused between its check and its write); reads the store's
/// answer; `ANSWER answer`; `LOST reason` once the lost signal fired.
#[ignore = "a child process entry: the tests that need it start it"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_process() {
    let Some(guard) = child_locks().await else {
        return;
    };
    let token = guard.fencing_token();
    let go = read_line().await;
    assert_eq!(go.trim(), "write", "child: unexpected {go:?}");
    println!("WRITE {token} lost={}", guard.is_lost());
    let answer = read_line().await;
    println!("ANSWER {}", answer.trim());
    timeout(BOUND, guard.lost())
        .await
        .expect("child: the lost signal fires after the pause");
    println!("LOST {:?}", guard.lost_reason());
    guard.abandon();
}

/// A stalled, when this binary runs as the child: the same holder on a
/// runtime of one thread, which it blocks reading its next line — nothing
/// of the process runs meanwhile (neither the watchdog nor the client
/// library's tasks), as in a process that is stopped, swapped out or
/// starved. Its first look after the stall, before any other task of it
/// has run, must say `lost=true` once another owner has the lock.
#[ignore = "a child process entry: the tests that need it start it"]
#[tokio::test]
async fn stalled_holder_process() {
    let Some(guard) = child_locks().await else {
        return;
    };
    let token = guard.fencing_token();
    // The stall: this blocks the runtime's only thread.
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).expect("child stdin");
    assert_eq!(go.trim(), "look", "child: unexpected {go:?}");
    println!("LOOK {token} lost={}", guard.is_lost());
    timeout(BOUND, guard.lost())
        .await
        .expect("child: the lost signal fires after the stall");
    println!("LOST {:?}", guard.lost_reason());
    guard.abandon();
}

/// The child's lock, announced with `HELD token`; `None` when this binary
/// is not running as the child.
async fn child_locks() -> Option<lockkit::LockGuard> {
    std::env::var(ROLE).ok()?;
    let url = std::env::var(URL).expect("child url");
    let name = std::env::var(NAME).expect("child lock name");
    let locks = lockkit::connect(&url).await.expect("child connects");
    let guard = locks
        .lock_with(&name, &locks.options().ttl(TTL).wait(BOUND))
        .await
        .expect("child locks");
    println!("HELD {}", guard.fencing_token());
    Some(guard)
}

async fn read_line() -> String {
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).expect("child stdin");
        line
    })
    .await
    .expect("stdin task")
}

/// A running child holder: its pid, stdin, and its protocol lines.
struct Holder {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Holder {
    /// The child running the test function `role` (`holder_process` or
    /// `stalled_holder_process`).
    fn spawn(role: &str, url: &str, name: &str) -> Self {
        let mut child = Command::new(std::env::current_exe().expect("test binary"))
            .args([
                &crate::common::test_name(module_path!(), role),
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE, "holder")
            .env(URL, url)
            .env(NAME, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the holder");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::unbounded_channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                // The test harness prints its own lines too, and its
                // `test holder_process ... ` has no newline before ours.
                let found = ["HELD ", "WRITE ", "ANSWER ", "LOOK ", "LOST "]
                    .iter()
                    .filter_map(|p| line.find(p))
                    .min();
                if let Some(at) = found
                    && tx.send(line[at..].to_owned()).is_err()
                {
                    return;
                }
            }
        });
        Holder { child, stdin, lines }
    }

    /// The next protocol line, which must start with `prefix`; the rest.
    async fn expect(&mut self, prefix: &str) -> String {
        let line = timeout(BOUND, self.lines.recv())
            .await
            .unwrap_or_else(|_| panic!("the holder did not say {prefix} in time"))
            .unwrap_or_else(|| panic!("the holder exited before saying {prefix}"));
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("expected {prefix}…, the holder said {line:?}"))
            .trim()
            .to_owned()
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").expect("write to the holder");
        self.stdin.flush().expect("flush");
    }

    /// Waits (up to [`BOUND`]) for the holder to exit.
    async fn exit(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + BOUND;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(Instant::now() < deadline, "the holder does not exit");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} failed");
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scenario with A in a child process on the backend at `url`; B is
/// `other`, connected to the same backend.
async fn kleppmann(label: &str, url: &str, other: LockClient) {
    let name = unique("fencing");
    let store = FencedStore::new();
    let mut a = Holder::spawn("holder_process", url, &name);
    let token_a: u64 = a.expect("HELD ").await.parse().expect("token");
    assert!(
        other.try_lock(&name).await.expect("try_lock").is_none(),
        "{label}: A holds it"
    );

    // A is frozen between its lock and its write: its watchdog cannot renew.
    a.signal("-STOP");
    let paused = Instant::now();
    let b = other
        .lock_with(&name, &other.options().ttl(Duration::from_secs(60)).wait(BOUND))
        .await
        .unwrap_or_else(|e| panic!("{label}: B gets the lock once A's lease is over: {e}"));
    let token_b = b.fencing_token();
    let waited = paused.elapsed();
    assert!(
        token_b > token_a,
        "{label}: B's token {token_b} is not above A's {token_a}"
    );
    store.write(token_b, "B").expect("B's write is accepted");

    // A resumes and writes at once with its old token.
    a.send("write");
    a.signal("-CONT");
    let write = a.expect("WRITE ").await;
    let (token, knew) = write.split_once(' ').expect("WRITE token lost=…");
    let token: u64 = token.parse().expect("token");
    assert_eq!(token, token_a);
    let refused = store.write(token, "A");
    assert_eq!(
        refused,
        Err(StaleToken {
            token: token_a,
            highest: token_b
        }),
        "{label}: the store must refuse the paused holder's write"
    );
    a.send("REFUSED");
    assert_eq!(a.expect("ANSWER ").await, "REFUSED");
    let reason = a.expect("LOST ").await;
    let status = a.exit().await;
    assert!(status.success(), "{label}: the holder failed: {status:?}");

    let content = store.read();
    assert_eq!(
        content.value.as_deref(),
        Some("B"),
        "{label}: the store holds B's write"
    );
    assert_eq!((content.highest, content.accepted, content.refused), (token_b, 1, 1));
    b.unlock().await.expect("B unlocks");
    eprintln!(
        "{label}: a={token_a} b={token_b}; B acquired {waited:?} after A was paused; A's write refused ({knew}); A lost: {reason}"
    );
}

/// A stalls (its process does not run) right after it locked; B gets the
/// lock once A's lease (or session) is over; A's first look after the
/// stall says it lost the lock — before its watchdog or its client
/// library has run, by its deadline alone.
async fn stalled(label: &str, url: &str, other: LockClient) {
    let name = unique("fencing");
    let mut a = Holder::spawn("stalled_holder_process", url, &name);
    let token_a: u64 = a.expect("HELD ").await.parse().expect("token");
    assert!(
        other.try_lock(&name).await.expect("try_lock").is_none(),
        "{label}: A holds it"
    );
    let b = other
        .lock_with(&name, &other.options().ttl(Duration::from_secs(60)).wait(BOUND))
        .await
        .unwrap_or_else(|e| panic!("{label}: B gets the lock once A's lease is over: {e}"));
    assert!(b.fencing_token() > token_a, "{label}: B's token is above A's");
    a.send("look");
    assert_eq!(
        a.expect("LOOK ").await,
        format!("{token_a} lost=true"),
        "{label}: A's first look after its stall must say it lost the lock (B holds it)"
    );
    let reason = a.expect("LOST ").await;
    let status = a.exit().await;
    assert!(status.success(), "{label}: the holder failed: {status:?}");
    b.unlock().await.expect("B unlocks");
    eprintln!("{label}: the stalled holder knew at its first look ({reason})");
}

/// The two scenarios with A in a child process.
#[derive(Clone, Copy)]
enum Scenario {
    /// [`kleppmann`]: A frozen with SIGSTOP, then writing with its token.
    Paused,
    /// [`stalled`]: A's runtime blocked, then looking at its guard.
    Stalled,
}

impl Scenario {
    async fn run(self, label: &str, url: &str, other: LockClient) {
        match self {
            Scenario::Paused => kleppmann(label, url, other).await,
            Scenario::Stalled => stalled(label, url, other).await,
        }
    }
}

#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres", feature = "zookeeper"))]
/// `scenario` on the server in `var`, A connecting with `params` added.
async fn on_server(var: &str, params: &str, scenario: Scenario) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    let other = lockkit::connect(&url).await.expect("connect");
    scenario
        .run(var, &crate::common::with_params(&url, params), other)
        .await;
}

/// `scenario` on an SQLite file both processes open.
#[cfg(feature = "sqlite")]
async fn on_sqlite(scenario: Scenario) {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!(
        "sqlite://{}?sweep_interval=200ms",
        dir.path().join("fencing.db").display()
    );
    let other = lockkit::connect(&url).await.expect("connect");
    scenario.run("sqlite", &url, other).await;
}

/// Both scenarios as tests: `feature, paused test, stalled test, server
/// URL variable, A's extra URL parameters`.
macro_rules! on_servers {
    ($($feature:literal, $paused:ident, $stalled:ident, $var:literal, $params:literal;)*) => {$(
        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $paused() {
            on_server($var, $params, Scenario::Paused).await;
        }

        #[cfg(feature = $feature)]
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $stalled() {
            on_server($var, $params, Scenario::Stalled).await;
        }
    )*};
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_paused_holder_is_fenced_off() {
    // In-process: A simply does nothing past its lease (no auto-extend).
    let locks = lockkit::connect("memory://fencing").await.expect("connect");
    let (a, other) = (locks.with_new_owner(), locks.with_new_owner());
    let name = unique("fencing");
    let store = FencedStore::new();
    let held = a
        .lock_with(&name, &a.options().ttl(Duration::from_millis(300)).auto_extend(false))
        .await
        .expect("A locks");
    let b = other
        .lock_with(&name, &other.options().ttl(Duration::from_secs(60)).wait(BOUND))
        .await
        .expect("B gets the lock once A's lease is over");
    assert!(b.fencing_token() > held.fencing_token());
    store.write(b.fencing_token(), "B").expect("B's write is accepted");
    assert!(held.is_lost(), "A's lease ran out before B got the lock");
    assert_eq!(
        store.write(held.fencing_token(), "A"),
        Err(StaleToken {
            token: held.fencing_token(),
            highest: b.fencing_token()
        })
    );
    timeout(BOUND, held.lost()).await.expect("A's lost signal fires");
    let content = store.read();
    assert_eq!(content.value.as_deref(), Some("B"));
    assert_eq!(content.highest, b.fencing_token());
    assert!(held.unlock().await.is_err(), "A's stale guard releases nothing");
    b.unlock().await.expect("B unlocks");
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_paused_holder_is_fenced_off() {
    on_sqlite(Scenario::Paused).await;
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_stalled_holder_knows_at_once() {
    on_sqlite(Scenario::Stalled).await;
}

// ZooKeeper: the lease is the session; A's pause (or stall) outlasts its
// session timeout, and the stalled A's first look — before the client
// library has noticed anything — must say lost by the session's deadline.
on_servers! {
    "redis", redis_paused_holder_is_fenced_off, redis_stalled_holder_knows_at_once,
        "LOCKKIT_REDIS_URL", "response_timeout=500ms";
    "redis", redlock_paused_holder_is_fenced_off, redlock_stalled_holder_knows_at_once,
        "LOCKKIT_REDLOCK_URL", "node_timeout=100ms";
    "mysql", mysql_paused_holder_is_fenced_off, mysql_stalled_holder_knows_at_once,
        "LOCKKIT_MYSQL_URL", "sweep_interval=200ms";
    "postgres", postgres_paused_holder_is_fenced_off, postgres_stalled_holder_knows_at_once,
        "LOCKKIT_POSTGRES_URL", "sweep_interval=200ms";
    "zookeeper", zookeeper_paused_holder_is_fenced_off, zookeeper_stalled_holder_knows_at_once,
        "LOCKKIT_ZK_URL", "session_timeout=3s";
}
