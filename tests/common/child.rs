//! Worker processes on one lock, for the binaries whose backends are
//! shared between processes through a server (Redis, Redlock, ZooKeeper):
//! a waiter killed with SIGKILL while it waits, and crowds of waiters in
//! several processes on one semaphore or read-write lock.
//!
//! The children are the test binary again: each binary has a test
//! `child_process` that calls [`child_main`] (which returns at once
//! without [`ROLE`] in the environment), and the tests start it with
//! [`Worker::spawn`].

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkit::{LockClient, LockGuard, LockKind, LockOptions};

use crate::common::{Reaper, spawn_child, unique};

/// What a child does: `wait:KIND` (wait for the name until killed),
/// `serve:KIND` (wait for the name as long as it takes, print `GOT TOKEN`
/// once served, release it, print `DONE`) or `crowd:KIND` (run
/// [`PER_CHILD`] waiters that take the name once each).
pub const ROLE: &str = "LOCKKIT_CHILD_ROLE";
const URL: &str = "LOCKKIT_CHILD_URL";
const NAME: &str = "LOCKKIT_CHILD_NAME";
const DIR: &str = "LOCKKIT_CHILD_DIR";
const INDEX: &str = "LOCKKIT_CHILD_INDEX";

/// Processes of a crowd, and waiters in each.
pub const CHILDREN: usize = 4;
pub const PER_CHILD: usize = 50;

/// A crowd's semaphore has this many permits.
const PERMITS: u32 = 3;

/// How long a crowd's waiter may wait: far above a healthy crowd's
/// seconds, so that a waiter never served fails the test.
const CROWD_WAIT: Duration = Duration::from_secs(120);

/// How long a holder keeps its hold waiting for company (N permits, two
/// readers) until its process has seen holders together: an event, not a
/// tuned sleep.
const JOIN_WAIT: Duration = Duration::from_millis(250);

/// What the waiters ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Mutex,
    /// A semaphore: of 1 for a dead waiter, of [`PERMITS`] for a crowd.
    Semaphore,
    /// A read-write lock: a dead writer; a crowd of readers with a writer
    /// in every ten.
    RwLock,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::Semaphore => "semaphore",
            Kind::RwLock => "rwlock",
        }
    }

    fn parse(s: &str) -> Kind {
        match s {
            "mutex" => Kind::Mutex,
            "semaphore" => Kind::Semaphore,
            "rwlock" => Kind::RwLock,
            other => panic!("unknown kind {other}"),
        }
    }
}

/// One request: a lock, a permit of `permits`, a read or the write hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Lock,
    Permit(u32),
    Read,
    Write,
}

impl Want {
    async fn take(self, client: &LockClient, name: &str, opts: &LockOptions) -> Result<LockGuard, lockkit::LockError> {
        match self {
            Want::Lock => client.lock_with(name, opts).await,
            Want::Permit(n) => client.semaphore(name, n)?.acquire_with(opts).await,
            Want::Read => client.rw_lock(name)?.read_with(opts).await,
            Want::Write => client.rw_lock(name)?.write_with(opts).await,
        }
    }

    fn kind(self) -> LockKind {
        match self {
            Want::Lock => LockKind::Mutex,
            Want::Permit(permits) => LockKind::Permit { permits },
            Want::Read => LockKind::Read,
            Want::Write => LockKind::Write,
        }
    }

    fn letter(self) -> char {
        match self {
            Want::Lock => 'M',
            Want::Permit(_) => 'P',
            Want::Read => 'R',
            Want::Write => 'W',
        }
    }
}

/// What crowd waiter `i` (over all children) asks for.
fn crowd_want(kind: Kind, i: usize) -> Want {
    match kind {
        Kind::Mutex => Want::Lock,
        Kind::Semaphore => Want::Permit(PERMITS),
        Kind::RwLock if i % 10 == 9 => Want::Write,
        Kind::RwLock => Want::Read,
    }
}

/// What a dead waiter, and the live one behind it, ask for.
fn dead_want(kind: Kind) -> Want {
    match kind {
        Kind::Mutex => Want::Lock,
        Kind::Semaphore => Want::Permit(1),
        Kind::RwLock => Want::Write,
    }
}

fn now_us() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros()
}

/// The child's side; returns at once when this process is not a child.
pub async fn child_main() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let url = std::env::var(URL).expect("child url");
    let name = std::env::var(NAME).expect("child lock name");
    let locks = lockkit::connect(&url).await.expect("child connects");
    let (role, kind) = role.split_once(':').expect("ROLE:KIND");
    let kind = Kind::parse(kind);
    match role {
        "wait" => {
            println!("ASKING");
            let opts = locks.options().ttl(Duration::from_secs(60)).wait_forever();
            let _never = dead_want(kind).take(&locks, &name, &opts).await;
            panic!("the dead waiter was served before it was killed");
        }
        "serve" => {
            println!("ASKING");
            let opts = locks.options().wait_forever();
            let g = dead_want(kind)
                .take(&locks, &name, &opts)
                .await
                .expect("the waiter is served");
            println!("GOT {}", g.fencing_token());
            g.unlock().await.expect("unlock");
            println!("DONE");
        }
        "crowd" => crowd_child(&locks, &name, kind).await,
        other => panic!("unknown child role {other}"),
    }
}

/// [`PER_CHILD`] waiters, each its own owner, take the name once; each
/// grant goes to `DIR/child-INDEX.log` as `LETTER TOKEN ENTER LEAVE`
/// (wall-clock µs, taken inside the hold).
async fn crowd_child(locks: &LockClient, name: &str, kind: Kind) {
    let index: usize = std::env::var(INDEX).expect("child index").parse().unwrap();
    let dir = std::env::var(DIR).expect("child dir");
    // Whether this process has seen holders together (N permits, two
    // readers): until then a holder waits for company.
    let seen = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..PER_CHILD)
        .map(|j| {
            let client = locks.with_new_owner();
            let (name, seen) = (name.to_owned(), seen.clone());
            let want = crowd_want(kind, index * PER_CHILD + j);
            tokio::spawn(async move {
                let opts = client.options().ttl(Duration::from_secs(60)).wait(CROWD_WAIT);
                let g = match want.take(&client, &name, &opts).await {
                    Ok(g) => g,
                    Err(e) => panic!("waiter {j} ({want:?}): {e}"),
                };
                let enter = now_us();
                let company = match want {
                    Want::Permit(n) => n as usize,
                    Want::Read => 2,
                    _ => 0,
                };
                let until = Instant::now() + JOIN_WAIT;
                // The most holders of its kind the server listed while this
                // one held: proof of company that does not depend on the
                // others' processes logging their enter in time.
                let mut listed = 0;
                // A listing that timed out on a starved machine (a
                // retryable error: Redlock's nodes answer within 1 s or
                // not at all) is asked again; any other error fails.
                while company > 0 && !seen.load(Ordering::Acquire) && Instant::now() < until {
                    let holders = match client.backend().holders(&name, want.kind()).await {
                        Ok(holders) => holders,
                        Err(e) if e.is_retryable() => Vec::new(),
                        Err(e) => panic!("holders: {e}"),
                    };
                    listed = listed.max(holders.len());
                    if holders.len() >= company {
                        seen.store(true, Ordering::Release);
                    } else {
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
                tokio::task::yield_now().await;
                let line = format!("{} {} {enter} {} {listed}", want.letter(), g.fencing_token(), now_us());
                match g.unlock().await {
                    Ok(_) => {}
                    // Released in the background or at the lease's end.
                    Err(e) if e.is_retryable() => eprintln!("unlock: {e}"),
                    Err(e) => panic!("unlock: {e}"),
                }
                line
            })
        })
        .collect();
    println!("STARTED");
    let mut lines = Vec::with_capacity(PER_CHILD);
    for t in tasks {
        lines.push(t.await.expect("a waiter failed"));
    }
    let mut log = std::fs::File::create(Path::new(&dir).join(format!("child-{index}.log"))).unwrap();
    for l in &lines {
        writeln!(log, "{l}").unwrap();
    }
    println!("DONE {}", lines.len());
}

/// The words a child's lines start with (libtest may print `test NAME
/// ... ` before the first on its line).
const WORDS: [&str; 4] = ["ASKING", "STARTED", "GOT ", "DONE"];

/// A child process and the lines it prints, from the first of [`WORDS`]
/// on each.
pub struct Worker {
    pub process: Reaper,
    lines: mpsc::Receiver<String>,
}

impl Worker {
    /// Starts this test binary again as a child with `role` on `name`; its
    /// `child_process` test is at `module_path` (the caller's
    /// `module_path!()`).
    pub fn spawn(module_path: &str, role: &str, url: &str, name: &str, dir: &Path, index: usize) -> Worker {
        let (dir, index) = (dir.to_string_lossy(), index.to_string());
        let env = [(ROLE, role), (URL, url), (NAME, name), (DIR, &*dir), (INDEX, &*index)];
        let mut process = spawn_child(module_path, "child_process", &env, Stdio::piped());
        let stdout = process.0.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(at) = WORDS.iter().filter_map(|w| line.find(w)).min() {
                    let _ = tx.send(line[at..].trim().to_owned());
                }
            }
        });
        Worker { process, lines }
    }

    /// The next line the child prints, within `within`; `None` when it
    /// printed none (or ended).
    pub fn next_line(&self, within: Duration) -> Option<String> {
        tokio::task::block_in_place(|| self.lines.recv_timeout(within).ok())
    }

    /// Waits (up to `within`) until the child prints a line starting with
    /// `what`, and returns that line.
    pub fn expect(&self, what: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next_line(left) {
                Some(line) if line.starts_with(what) => return line,
                Some(_) => {}
                None => panic!("the child printed no {what} within {within:?}"),
            }
        }
    }

    /// A line the child has printed and nobody read yet.
    pub fn printed(&self) -> Option<String> {
        self.lines.try_recv().ok()
    }
}

/// Waits until `kind`'s line of `name` has `n` clients (within 30 s).
pub async fn until_waiting(client: &LockClient, name: &str, kind: LockKind, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting = client.backend().waiting_for(name, kind).await.expect("waiting");
        if waiting >= n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} clients did not queue for {name} ({waiting})"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// How long a child may take to print that it asks, or that it started.
const STARTUP: Duration = Duration::from_secs(30);

/// What a dead waiter, and the live one behind it, ask for: `kind`'s
/// request (a semaphore of one).
pub fn dead_kind(kind: Kind) -> LockKind {
    dead_want(kind).kind()
}

/// A waiter in a child process, queued behind a holder, is killed with
/// SIGKILL while a live waiter (of `live`) queues behind it; the holder
/// releases once `ready` (awaited once the live waiter is in line) is
/// done. Returns how long after the release the live waiter got the name
/// (printed by the caller).
pub async fn dead_waiter_killed(
    module_path: &str,
    url: &str,
    kind: Kind,
    live: LockClient,
    ready: impl Future<Output = ()>,
) -> Duration {
    let name = unique(&format!("dead_waiter_killed_{}", kind.as_str()));
    let dir = tempfile::tempdir().unwrap();
    let want = dead_want(kind);
    let holder = lockkit::connect(url).await.expect("connect");
    let opts = holder
        .options()
        .ttl(Duration::from_secs(60))
        .wait(Duration::from_secs(30));
    let held = want.take(&holder, &name, &opts).await.expect("the holder takes it");
    let mut child = Worker::spawn(
        module_path,
        &format!("wait:{}", kind.as_str()),
        url,
        &name,
        dir.path(),
        0,
    );
    child.expect("ASKING", STARTUP);
    until_waiting(&holder, &name, want.kind(), 1).await;
    let waiter = tokio::spawn({
        let (live, name, opts) = (live.clone(), name.clone(), opts.clone());
        async move { want.take(&live, &name, &opts).await }
    });
    until_waiting(&holder, &name, want.kind(), 2).await;
    ready.await;
    child.process.0.kill().expect("SIGKILL the waiting child");
    child.process.0.wait().expect("reap the child");
    let released = Instant::now();
    held.unlock().await.expect("the holder releases");
    let got = tokio::time::timeout(Duration::from_secs(15), waiter)
        .await
        .expect("the waiter behind a killed one is served")
        .expect("waiter task")
        .expect("the live waiter takes it");
    let delay = released.elapsed();
    assert_eq!(got.owner(), live.owner());
    got.unlock().await.expect("unlock");
    delay
}

/// One grant of a crowd, from a child's log.
#[derive(Debug, Clone, Copy)]
struct Grant {
    letter: char,
    token: u64,
    enter: u128,
    leave: u128,
    /// The most holders of its kind the server listed during the hold.
    listed: usize,
}

/// What a crowd's holds looked like: the most held at once, the most
/// readers at once.
#[derive(Debug, Default)]
pub struct CrowdSeen {
    pub served: usize,
    pub took: Duration,
    pub most_holders: usize,
    pub most_readers: usize,
}

/// [`CHILDREN`] processes × [`PER_CHILD`] waiters on one name of `kind`
/// behind a gate hold (every permit, or the write hold) kept until every
/// child stands in line; each waiter takes its hold once. Checks every
/// waiter served, the kind's bound (no more than the permits, a writer
/// alone, readers with the last writer's token), and that holders were in
/// together; returns what it saw for the caller to print.
pub async fn crowd(module_path: &str, url: &str, kind: Kind) -> CrowdSeen {
    let name = unique(&format!("crowd_processes_{}", kind.as_str()));
    let dir = tempfile::tempdir().unwrap();
    let gate = lockkit::connect(url).await.expect("connect");
    let opts = gate
        .options()
        .ttl(Duration::from_secs(120))
        .wait(Duration::from_secs(30));
    let (gate_want, gate_holds) = match kind {
        Kind::Mutex => (Want::Lock, 1),
        Kind::Semaphore => (Want::Permit(PERMITS), PERMITS),
        Kind::RwLock => (Want::Write, 1),
    };
    let mut held = Vec::new();
    for _ in 0..gate_holds {
        held.push(gate_want.take(&gate, &name, &opts).await.expect("the gate takes it"));
    }
    let gate_token = held[0].fencing_token();
    let mut children: Vec<Worker> = (0..CHILDREN)
        .map(|i| {
            let role = format!("crowd:{}", kind.as_str());
            Worker::spawn(module_path, &role, url, &name, dir.path(), i)
        })
        .collect();
    for child in &children {
        child.expect("STARTED", STARTUP);
    }
    until_waiting(&gate, &name, gate_want.kind(), CHILDREN).await;
    let opened = Instant::now();
    for g in held {
        g.unlock().await.expect("the gate opens");
    }
    for child in &children {
        let done = child.expect("DONE", CROWD_WAIT + Duration::from_secs(30));
        assert_eq!(
            done,
            format!("DONE {PER_CHILD}"),
            "the children's waiters are all served"
        );
    }
    let took = opened.elapsed();
    for child in &mut children {
        assert!(child.process.0.wait().expect("reap").success(), "a child failed");
    }
    assert_eq!(
        gate.backend()
            .waiting_for(&name, gate_want.kind())
            .await
            .expect("waiting"),
        0,
        "nobody left in line"
    );
    let mut grants = Vec::new();
    for i in 0..CHILDREN {
        let log = std::fs::read_to_string(dir.path().join(format!("child-{i}.log"))).expect("a child's log");
        for l in log.lines() {
            let f: Vec<&str> = l.split(' ').collect();
            grants.push(Grant {
                letter: f[0].chars().next().unwrap(),
                token: f[1].parse().unwrap(),
                enter: f[2].parse().unwrap(),
                leave: f[3].parse().unwrap(),
                listed: f[4].parse().unwrap(),
            });
        }
    }
    assert_eq!(grants.len(), CHILDREN * PER_CHILD, "every waiter served once");
    check_crowd(kind, gate_token, &mut grants, took)
}

/// The longest a crowd may go without a grant while waiters wait. Its
/// holds are taken for 60 s, so a waiter that nobody tells its turn (or
/// that sleeps on a lease it saw) shows as a gap of about a minute;
/// a healthy hand-off takes milliseconds, and a machine under load a few
/// hundred.
const GRANT_GAP: Duration = Duration::from_secs(10);

/// The checks of [`crowd`] on its grants (each logged inside its hold, so
/// logged intervals that overlap were holds that overlapped).
fn check_crowd(kind: Kind, gate_token: u64, grants: &mut [Grant], took: Duration) -> CrowdSeen {
    grants.sort_by_key(|g| g.enter);
    // No waiter waited for a lease to run out: the grants follow each
    // other without a gap anywhere near the holds' ttl.
    let gap = grants.windows(2).map(|w| w[1].enter - w[0].enter).max().unwrap_or(0);
    assert!(
        gap < GRANT_GAP.as_micros(),
        "{kind:?}: {:?} without a grant while waiters waited (holds of 60 s)",
        Duration::from_micros(u64::try_from(gap).unwrap_or(u64::MAX))
    );
    // Enter +1, leave -1; at equal times leaves first (no false overlap).
    let mut events: Vec<(u128, i32, char)> = grants
        .iter()
        .flat_map(|g| [(g.enter, 1, g.letter), (g.leave, -1, g.letter)])
        .collect();
    events.sort_by_key(|(t, d, _)| (*t, *d));
    let (mut holders, mut readers, mut writers) = (0i32, 0i32, 0i32);
    let mut seen = CrowdSeen {
        served: grants.len(),
        took,
        ..CrowdSeen::default()
    };
    for (_, d, letter) in events {
        holders += d;
        match letter {
            'R' => readers += d,
            'W' => writers += d,
            _ => {}
        }
        if d > 0 {
            assert!(writers == 0 || holders == 1, "a writer beside another holder");
            seen.most_holders = seen.most_holders.max(holders as usize);
            seen.most_readers = seen.most_readers.max(readers as usize);
        }
    }
    // Holds that the logs show apart may still have overlapped: a holder
    // whose process logged its enter late. The server's listings taken
    // inside holds count too (and never more than the kind allows).
    let listed = grants.iter().map(|g| g.listed).max().unwrap_or(0);
    match kind {
        Kind::Semaphore => {
            assert!(listed <= PERMITS as usize, "the server listed {listed} permits out");
            seen.most_holders = seen.most_holders.max(listed);
        }
        Kind::RwLock => seen.most_readers = seen.most_readers.max(listed),
        Kind::Mutex => {}
    }
    match kind {
        Kind::Mutex => assert_eq!(seen.most_holders, 1),
        Kind::Semaphore => {
            assert_eq!(
                seen.most_holders, PERMITS as usize,
                "{PERMITS} permits out at once, never more"
            );
            let mut tokens: Vec<u64> = grants.iter().map(|g| g.token).collect();
            tokens.sort_unstable();
            tokens.dedup();
            assert_eq!(tokens.len(), grants.len(), "every permit its own token");
        }
        Kind::RwLock => {
            assert!(seen.most_readers >= 2, "readers in together");
            let mut last_write = gate_token;
            for g in grants.iter() {
                match g.letter {
                    'W' => {
                        assert!(g.token > last_write, "writers' tokens grow");
                        last_write = g.token;
                    }
                    _ => assert_eq!(g.token, last_write, "a reader carries the last writer's token"),
                }
            }
        }
    }
    seen
}

/// The bound the kit's `dead_waiter_skipped` uses (the goal is 500 ms).
pub const DEAD_WAITER_BOUND: Duration = Duration::from_millis(1500);

/// The test of a binary: on the server in the environment variable `var`
/// (skipped without it, unless services are required), a waiter of every
/// kind killed with SIGKILL while it waits (see [`dead_waiter_killed`]);
/// prints each delay, within [`DEAD_WAITER_BOUND`].
pub async fn waiter_killed_while_waiting(module_path: &str, var: &str, label: &str) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    for kind in [Kind::Mutex, Kind::Semaphore, Kind::RwLock] {
        let live = lockkit::connect(&url).await.expect("connect");
        let delay = dead_waiter_killed(module_path, &url, kind, live, async {}).await;
        eprintln!("{label}: a {kind:?} waiter killed with SIGKILL: the next served {delay:?} after the release");
        assert!(
            delay <= DEAD_WAITER_BOUND,
            "{kind:?}: {delay:?} (bound {DEAD_WAITER_BOUND:?})"
        );
    }
}

/// The test of a binary: crowds of processes (see [`crowd`]) on a
/// semaphore and a read-write lock, on the server in `var`; prints what
/// each cost.
pub async fn crowds_of_processes(module_path: &str, var: &str, label: &str) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    for kind in [Kind::Semaphore, Kind::RwLock] {
        let seen = crowd(module_path, &url, kind).await;
        eprintln!(
            "{label}: {kind:?}, {CHILDREN} processes x {PER_CHILD} waiters: {} served in {:?} ({:.0}/s), at most {} holders at once",
            seen.served,
            seen.took,
            seen.served as f64 / seen.took.as_secs_f64(),
            seen.most_holders
        );
    }
}

/// The tests of this module in a test binary, on the server in the
/// environment variable `$var`, printed as `$label`: the children's entry
/// point (`child_process`), a waiter killed with SIGKILL, and crowds of
/// processes.
#[macro_export]
macro_rules! child_process_tests {
    ($var:literal, $label:literal) => {
        /// The entry point of the child processes the other tests start.
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        #[ignore = "a child process entry: the tests that need it start it"]
        async fn child_process() {
            $crate::common::child::child_main().await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn waiter_killed_while_waiting() {
            $crate::common::child::waiter_killed_while_waiting(module_path!(), $var, $label).await;
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn crowd_of_processes() {
            $crate::common::child::crowds_of_processes(module_path!(), $var, $label).await;
        }
    };
}
