//! Several OS processes on ZooKeeper (this test binary again, see
//! `common::child`):
//!
//! - crowds of 4 processes × 50 waiters on a semaphore of 3 and on a
//!   read-write lock, all served within the kind's bounds;
//! - a dead waiter: a process waiting in line is killed with SIGKILL just
//!   before the holder releases; the live waiter behind it is served well
//!   before the dead one's session could expire (it takes the dead node out
//!   once its session stops refreshing its liveness record);
//! - a stopped waiter (SIGSTOP, then SIGCONT): it loses its place the same
//!   way, and once it runs again queues at the back and is served once,
//!   after the waiter that passed it.
#![cfg(feature = "zookeeper")]

use std::time::{Duration, Instant};

use lockkit::raw::LockBackend;
use lockkit::{LockClient, LockKind, LockOptions};
use lockkit_zk::ZkBackend;

use crate::common::child::{self, DEAD_WAITER_BOUND, Kind, Worker};
use crate::common::unique;
use crate::support::{BOUND, Server, server};

/// The entry point of the child processes the other tests start.
#[ignore = "a child process entry: the tests that need it start it"]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_process() {
    child::child_main().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crowd_of_processes() {
    child::crowds_of_processes(module_path!(), "LOCKKIT_ZK_URL", "zookeeper").await;
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

/// A waiter process of every kind killed just before the release costs the
/// waiter behind it about the staleness bound of its liveness record, not
/// its session timeout (10 s here): the waiter behind takes the dead node
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_killed_while_waiting() {
    let Some(server) = server() else { return };
    for kind in [Kind::Mutex, Kind::Semaphore, Kind::RwLock] {
        let behind = ZkBackend::from_url(&server.url).await.expect("connect");
        let live = LockClient::new(behind.clone(), LockOptions::new()).unwrap();
        let ready = until_watching(&behind);
        let delay = child::dead_waiter_killed(module_path!(), &server.url, kind, live, ready).await;
        eprintln!(
            "zookeeper: a {kind:?} waiter killed with SIGKILL: the next served {delay:?} after the release ({} dead node taken out)",
            behind.stats().dead_waiters
        );
        assert!(
            delay <= DEAD_WAITER_BOUND,
            "{kind:?}: served {delay:?} after the release: the dead waiter's session timeout, not its liveness, freed it"
        );
        assert_eq!(
            behind.stats().dead_waiters,
            1,
            "the waiter behind took the dead node out"
        );
    }
}

/// The nodes of `name`'s mutex line, first to last, as a raw session of
/// `server` lists them.
async fn line_nodes(server: &Server, name: &str) -> Vec<String> {
    let raw = zookeeper_client::Client::connector()
        .connect(&format!("{}{}", server.addr, server.chroot))
        .await
        .expect("raw session");
    let parent = format!("/{}", lockkit_zk::encode_name(name));
    let mut nodes = raw.list_children(&parent).await.expect("the line");
    nodes.sort_by_key(|n| n.rsplit('-').next().and_then(|s| s.parse::<u64>().ok()));
    nodes
}

fn signal(worker: &Worker, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &worker.process.0.id().to_string()])
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
    let dir = tempfile::tempdir().unwrap();
    let backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let holder = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
    let held = holder.lock(&name).await.expect("hold");
    let child = Worker::spawn(module_path!(), "serve:mutex", &server.url, &name, dir.path(), 0);
    child.expect("ASKING", BOUND);
    child::until_waiting(&holder, &name, kind, 1).await;
    let before_behind = line_nodes(&server, &name).await;
    let behind = ZkBackend::from_url(&server.url).await.expect("connect");
    let waiter = LockClient::new(behind.clone(), LockOptions::new()).unwrap();
    let (n, opts) = (name.clone(), waiter.options().wait(BOUND));
    let live = tokio::spawn(async move { waiter.lock_with(&n, &opts).await });
    child::until_waiting(&holder, &name, kind, 2).await;
    until_watching(&behind).await;
    signal(&child, "-STOP");
    // The line as the child stopped: the holder's node, the child's, the
    // live waiter's. (A child that queued again meanwhile would stand
    // behind the live waiter, and nothing would be taken out.)
    let stopped = line_nodes(&server, &name).await;
    assert_eq!(
        stopped.get(..2),
        Some(&before_behind[..]),
        "the child's node changed before it stopped (line {stopped:?}, before the live waiter {before_behind:?})"
    );
    held.unlock().await.expect("release");
    let passed = tokio::time::timeout(BOUND, live)
        .await
        .expect("the waiter behind the stopped one is served")
        .unwrap()
        .expect("lock");
    assert_eq!(
        behind.stats().dead_waiters,
        1,
        "the stopped waiter's node was taken out (line as it stopped: {stopped:?}; now {:?})",
        line_nodes(&server, &name).await
    );
    signal(&child, "-CONT");
    // It runs again, finds its node gone, and queues behind the holder.
    child::until_waiting(&holder, &name, kind, 1).await;
    assert_eq!(
        child.printed(),
        None,
        "the stopped waiter was served while another holds the lock"
    );
    let token = passed.fencing_token();
    passed.unlock().await.expect("unlock");
    let got = child.expect("GOT ", BOUND);
    let its: u64 = got.strip_prefix("GOT ").expect("GOT <token>").parse().unwrap();
    assert!(its > token, "served after the one that passed it ({its} > {token})");
    assert_eq!(child.next_line(BOUND).as_deref(), Some("DONE"));
    assert_eq!(child.next_line(Duration::from_millis(200)), None, "served once");
    assert_eq!(backend.waiting_for(&name, kind).await.unwrap(), 0);
}
