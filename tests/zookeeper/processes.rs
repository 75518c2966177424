//! Several OS processes on ZooKeeper (this test binary again, as
//! `child_process`, driven by environment variables):
//!
//! - a crowd: 4 processes × 50 waiters on one semaphore of 3, and on one
//!   read-write lock (a writer in every ten), queued behind a gate hold:
//!   every waiter served, never more than 3 permits out (a writer alone,
//!   readers together), from the grants each process logs;
//! - a dead waiter: a process waiting in line is killed with SIGKILL just
//!   before the holder releases; the live waiter behind it is served well
//!   before the dead one's session could expire (it takes the dead node out
//!   once its session stops refreshing its liveness record);
//! - a stopped waiter (SIGSTOP, then SIGCONT): it loses its place the same
//!   way, and once it runs again queues at the back and is served once,
//!   after the waiter that passed it.
#![cfg(feature = "zookeeper")]

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkit::{LockBackend, LockClient, LockError, LockGuard, LockKind, LockOptions};
use lockkit_zk::ZkBackend;

use crate::common::{self, Reaper, unique};
use crate::support::{BOUND, server};

const ROLE: &str = "LOCKKIT_ZK_CHILD";
const URL: &str = "LOCKKIT_ZK_CHILD_URL";
const NAME: &str = "LOCKKIT_ZK_CHILD_NAME";
const TEST: &str = "child_process";

const PROCESSES: usize = 4;
const PER_PROCESS: usize = 50;
const PERMITS: u32 = 3;
const WRITER_EVERY: usize = 10;

/// What a child waiter asks for.
fn ask(role: &str, i: usize) -> LockKind {
    match role {
        "semaphore" => LockKind::Permit { permits: PERMITS },
        "rwlock" if i % WRITER_EVERY == WRITER_EVERY - 1 => LockKind::Write,
        "rwlock" => LockKind::Read,
        _ => LockKind::Mutex,
    }
}

async fn take(client: &LockClient, name: &str, kind: LockKind, opts: &LockOptions) -> Result<LockGuard, LockError> {
    match kind {
        LockKind::Permit { permits } => client.semaphore(name, permits)?.acquire_with(opts).await,
        LockKind::Read => client.rw_lock(name)?.read_with(opts).await,
        LockKind::Write => client.rw_lock(name)?.write_with(opts).await,
        _ => client.lock_with(name, opts).await,
    }
}

fn wall_nanos() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos()
}

/// The entry point of the child processes; without [`ROLE`] it returns at
/// once. Roles: `semaphore` / `rwlock` (a crowd of [`PER_PROCESS`]
/// waiters, each printing `GRANT <kind> <from> <to> <token>` in wall-clock
/// nanoseconds), `wait` / `wait-permit` (one waiter, waiting as long as it
/// takes, printing `GOT <token>` once served).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let url = std::env::var(URL).expect("child url");
    let name = std::env::var(NAME).expect("child lock name");
    let backend = ZkBackend::from_url(&url).await.expect("child connects");
    let client = LockClient::new(backend, LockOptions::new()).expect("client");
    if role == "wait" || role == "wait-permit" {
        let kind = match role.as_str() {
            "wait" => LockKind::Mutex,
            _ => LockKind::Permit { permits: PERMITS },
        };
        println!("WAITING");
        let guard = take(&client, &name, kind, &client.options().wait_forever()).await;
        let guard = guard.expect("the waiter is served");
        println!("GOT {}", guard.fencing_token());
        guard.unlock().await.expect("unlock");
        println!("DONE");
        return;
    }
    let tasks: Vec<_> = (0..PER_PROCESS)
        .map(|i| {
            let (client, name, kind) = (client.with_new_owner(), name.clone(), ask(&role, i));
            tokio::spawn(async move {
                let opts = client.options().wait(Duration::from_secs(120));
                let guard = take(&client, &name, kind, &opts).await.expect("a waiter is served");
                let from = wall_nanos();
                tokio::time::sleep(Duration::from_millis(2)).await;
                let to = wall_nanos();
                let token = guard.fencing_token();
                guard.unlock().await.expect("unlock");
                let label = match kind {
                    LockKind::Permit { .. } => "Permit",
                    LockKind::Read => "Read",
                    LockKind::Write => "Write",
                    _ => "Mutex",
                };
                format!("GRANT {label} {from} {to} {token}")
            })
        })
        .collect();
    for t in tasks {
        println!("{}", t.await.expect("waiter task"));
    }
    println!("DONE");
}

/// Starts a child in `role` on `name`; its stdout lines come on the
/// returned channel.
fn spawn_child(role: &str, url: &str, name: &str) -> (Reaper, mpsc::Receiver<String>) {
    let env = [(ROLE, role), (URL, url), (NAME, name)];
    let mut child = common::spawn_child(module_path!(), TEST, &env, Stdio::piped());
    let (tx, rx) = mpsc::channel();
    let stdout = child.0.stdout.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The harness prints "test NAME ... " on the first line.
            for word in ["GRANT ", "GOT ", "DONE", "WAITING"] {
                if let Some(at) = line.find(word) {
                    let _ = tx.send(line[at..].to_owned());
                }
            }
        }
    });
    (child, rx)
}

/// Waits (up to [`BOUND`]) until `n` wait for `name` as `kind`.
async fn until_waiting(backend: &ZkBackend, name: &str, kind: LockKind, n: usize) {
    let deadline = Instant::now() + BOUND * 4;
    while backend.waiting_for(name, kind).await.expect("waiting") < n {
        assert!(Instant::now() < deadline, "{n} waiters not in line");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (up to [`BOUND`]) until `backend`'s waiter watches the line: it
/// has listed it, and seen who waits ahead of it (a node it never saw
/// waiting may have held from its create on, and is never taken out).
async fn until_watching(backend: &ZkBackend) {
    let deadline = Instant::now() + BOUND;
    while backend.stats().watches == 0 {
        assert!(Instant::now() < deadline, "the waiter does not watch the line");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One grant a child logged.
struct Grant {
    kind: String,
    from: u128,
    to: u128,
}

/// The crowd of `role` over [`PROCESSES`] processes, queued behind `gate`
/// holds; returns the grants.
async fn crowd(role: &str, gate: LockKind, gates: usize) -> Option<Vec<Grant>> {
    let server = server()?;
    let name = unique(&format!("processes-{role}"));
    let backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let mut held = Vec::new();
    for _ in 0..gates {
        held.push(take(&client, &name, gate, &client.options()).await.expect("gate"));
    }
    let children: Vec<_> = (0..PROCESSES).map(|_| spawn_child(role, &server.url, &name)).collect();
    until_waiting(&backend, &name, gate, PROCESSES * PER_PROCESS).await;
    let opened = Instant::now();
    for g in held {
        g.unlock().await.expect("gate unlock");
    }
    let mut grants = Vec::new();
    for (_reaper, lines) in &children {
        loop {
            let line = lines
                .recv_timeout(Duration::from_secs(150))
                .expect("a child finishes its crowd");
            if line == "DONE" {
                break;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            grants.push(Grant {
                kind: parts[1].to_owned(),
                from: parts[2].parse().unwrap(),
                to: parts[3].parse().unwrap(),
            });
        }
    }
    let took = opened.elapsed();
    eprintln!(
        "{role}: {PROCESSES} processes x {PER_PROCESS} waiters served in {took:?} ({:.0}/s)",
        grants.len() as f64 / took.as_secs_f64()
    );
    assert_eq!(grants.len(), PROCESSES * PER_PROCESS, "every waiter served");
    assert_eq!(backend.waiting_for(&name, gate).await.unwrap(), 0);
    Some(grants)
}

/// The most grants of `kinds` inside at once, and whether a grant of
/// `alone` ever had company.
fn overlap(grants: &[Grant], alone: &str) -> (usize, bool) {
    let mut events: Vec<(u128, i32, bool)> = Vec::new();
    for g in grants {
        let solo = g.kind == alone;
        events.push((g.from, 1, solo));
        events.push((g.to, -1, solo));
    }
    // Leaving before entering at the same instant.
    events.sort_by_key(|e| (e.0, e.1));
    let (mut inside, mut most, mut solo_inside, mut shared_solo) = (0i32, 0i32, 0i32, false);
    for (_, step, solo) in events {
        inside += step;
        if solo {
            solo_inside += step;
        }
        most = most.max(inside);
        if solo_inside > 0 && inside > 1 {
            shared_solo = true;
        }
    }
    (most as usize, shared_solo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_crowd_over_processes_is_served_within_its_permits() {
    let permit = LockKind::Permit { permits: PERMITS };
    let Some(grants) = crowd("semaphore", permit, PERMITS as usize).await else {
        return;
    };
    let (most, _) = overlap(&grants, "");
    assert!(most <= PERMITS as usize, "{most} permits out at once, of {PERMITS}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_write_crowd_over_processes_keeps_writers_alone() {
    let Some(grants) = crowd("rwlock", LockKind::Write, 1).await else {
        return;
    };
    let (most, writer_shared) = overlap(&grants, "Write");
    assert!(!writer_shared, "a writer held beside another hold");
    assert!(most >= 2, "readers were never in together");
}

/// A waiter process killed just before the release costs the waiter behind
/// it about the staleness bound of its liveness record, not its session
/// timeout (10 s here).
async fn killed_waiter(role: &str, kind: LockKind) {
    let Some(server) = server() else { return };
    let name = unique(&format!("processes-dead-{role}"));
    let backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let holder = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let holds = match kind {
        LockKind::Permit { permits } => permits as usize,
        _ => 1,
    };
    let mut held = Vec::new();
    for _ in 0..holds {
        held.push(take(&holder, &name, kind, &holder.options()).await.expect("hold"));
    }
    let (mut child, lines) = spawn_child(role, &server.url, &name);
    lines.recv_timeout(BOUND).expect("the child starts waiting");
    until_waiting(&backend, &name, kind, 1).await;
    let behind = ZkBackend::from_url(&server.url).await.expect("connect");
    let waiter = LockClient::new(behind.clone(), LockOptions::new()).unwrap();
    let (n, opts) = (name.clone(), waiter.options().wait(BOUND));
    let live = tokio::spawn(async move {
        let g = take(&waiter, &n, kind, &opts).await;
        (g, Instant::now())
    });
    until_waiting(&backend, &name, kind, 2).await;
    until_watching(&behind).await;
    child.0.kill().expect("SIGKILL the waiting process");
    child.0.wait().expect("reap it");
    let released = Instant::now();
    held.pop().expect("a hold").unlock().await.expect("release");
    let (g, at) = tokio::time::timeout(BOUND, live).await.expect("served").unwrap();
    let g = g.expect("the waiter behind the dead one is served");
    let delay = at - released;
    eprintln!(
        "{role}: a waiter behind a killed one served {delay:?} after the release ({} dead node taken out)",
        behind.stats().dead_waiters
    );
    assert!(
        delay < Duration::from_millis(1500),
        "served {delay:?} after the release: the dead waiter's session timeout, not its liveness, freed it"
    );
    assert_eq!(
        behind.stats().dead_waiters,
        1,
        "the waiter behind took the dead node out"
    );
    g.unlock().await.unwrap();
    for g in held {
        g.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_waiter_process_costs_the_next_waiter_little() {
    killed_waiter("wait", LockKind::Mutex).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_permit_waiter_process_costs_the_next_waiter_little() {
    killed_waiter("wait-permit", LockKind::Permit { permits: PERMITS }).await;
}

fn signal(child: &Child, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill(1)");
    assert!(status.success(), "kill {sig}");
}

/// A live waiter whose process does not run for a while (here: stopped)
/// is taken for dead: it must notice its node is gone, queue again at the
/// back, and be served once, after the waiter that passed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_waiter_process_queues_again_behind_the_one_that_passed_it() {
    let Some(server) = server() else { return };
    let name = unique("processes-stopped");
    let kind = LockKind::Mutex;
    let backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let holder = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let held = take(&holder, &name, kind, &holder.options()).await.expect("hold");
    let (child, lines) = spawn_child("wait", &server.url, &name);
    lines.recv_timeout(BOUND).expect("the child starts waiting");
    until_waiting(&backend, &name, kind, 1).await;
    let behind = ZkBackend::from_url(&server.url).await.expect("connect");
    let waiter = LockClient::new(behind.clone(), LockOptions::new()).unwrap();
    let (n, opts) = (name.clone(), waiter.options().wait(BOUND));
    let live = tokio::spawn(async move { take(&waiter, &n, kind, &opts).await });
    until_waiting(&backend, &name, kind, 2).await;
    until_watching(&behind).await;
    signal(&child.0, "-STOP");
    held.unlock().await.expect("release");
    let passed = tokio::time::timeout(BOUND, live)
        .await
        .expect("the waiter behind the stopped one is served")
        .unwrap()
        .expect("lock");
    assert_eq!(
        behind.stats().dead_waiters,
        1,
        "the stopped waiter's node was taken out"
    );
    signal(&child.0, "-CONT");
    // It runs again, finds its node gone, and queues behind the holder.
    until_waiting(&backend, &name, kind, 1).await;
    assert!(
        lines.try_recv().is_err(),
        "the stopped waiter was served while another holds the lock"
    );
    let token = passed.fencing_token();
    passed.unlock().await.expect("unlock");
    let got = lines
        .recv_timeout(BOUND)
        .expect("the stopped waiter is served after all");
    let its: u64 = got.strip_prefix("GOT ").expect("GOT <token>").parse().unwrap();
    assert!(its > token, "served after the one that passed it ({its} > {token})");
    assert_eq!(lines.recv_timeout(BOUND).as_deref(), Ok("DONE"));
    assert!(lines.recv_timeout(Duration::from_millis(200)).is_err(), "served once");
    assert_eq!(backend.waiting_for(&name, kind).await.unwrap(), 0);
}
