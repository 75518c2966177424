//! Faults on the three-node ZooKeeper ensemble (`LOCKKIT_ZK_ENSEMBLE_URL`):
//! with one server stopped, locks keep working; a holder whose server (not
//! the leader) stops moves its session to another server and keeps its hold.
//!
//! Servers are stopped and started with `scripts/services down|up
//! zk-ensemble:N`, only followers (the quorum of two stays up), and always
//! started again when a test ends, also when it fails. The tests here take
//! turns, and each holds an exclusive file lock that the ensemble's
//! conformance run (tests/zookeeper/kit.rs) holds shared: even from two cargo
//! invocations, no conformance case sees a server go. (So this is a binary of
//! its own: in the conformance run's process, whose shared lock lasts as long
//! as the process, the exclusive lock would never be granted.)
#![cfg(feature = "zookeeper")]

#[path = "../common/mod.rs"]
mod common;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use lockkit::raw::ConnectUrl;
use lockkit::{LockClient, LockOptions, LostReason};
use lockkit_core::testkit::services_required;
use lockkit_zk::ZkBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

use common::unique;

/// Far above any healthy latency (an election included), far below a stuck lock.
const BOUND: Duration = Duration::from_secs(30);

/// The tests of this binary stop servers: one at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits until no other process uses the ensemble, and keeps it so.
async fn exclusive_use() -> std::fs::File {
    let path = std::env::temp_dir().join("lockkit-zk-ensemble.lock");
    let file = std::fs::File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    tokio::task::spawn_blocking(move || {
        file.lock().expect("lock the ensemble");
        file
    })
    .await
    .unwrap()
}

struct Ensemble {
    url: String,
    /// Node N (as `scripts/services` numbers them) at `nodes[N - 1]`.
    nodes: Vec<SocketAddr>,
}

fn ensemble() -> Option<Ensemble> {
    let url = match std::env::var("LOCKKIT_ZK_ENSEMBLE_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if services_required() => panic!("LOCKKIT_ZK_ENSEMBLE_URL is not set and LOCKKIT_REQUIRE_SERVICES=1"),
        _ => {
            eprintln!("skipped: LOCKKIT_ZK_ENSEMBLE_URL is not set (run scripts/services up zk-ensemble)");
            return None;
        }
    };
    let parsed = ConnectUrl::parse(&url).expect("LOCKKIT_ZK_ENSEMBLE_URL");
    let nodes: Vec<SocketAddr> = parsed
        .hosts
        .iter()
        .map(|h| {
            (h.host.as_str(), h.port.unwrap_or(2181))
                .to_socket_addrs()
                .expect("resolve")
                .next()
                .expect("an address")
        })
        .collect();
    assert_eq!(nodes.len(), 3, "the ensemble URL lists three servers");
    Some(Ensemble { url, nodes })
}

/// A four-letter-word answer, or `None` if the server does not answer.
async fn four_letter(addr: SocketAddr, word: &str) -> Option<String> {
    let talk = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(word.as_bytes()).await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    };
    timeout(Duration::from_secs(5), talk).await.ok().flatten()
}

/// `leader`, `follower`, or `None` (down, or not serving yet).
async fn mode(addr: SocketAddr) -> Option<String> {
    let srvr = four_letter(addr, "srvr").await?;
    srvr.lines()
        .find_map(|l| l.strip_prefix("Mode: "))
        .map(|m| m.trim().to_owned())
}

/// Waits until every node serves, with one leader.
async fn all_serving(e: &Ensemble) {
    let started = Instant::now();
    loop {
        let mut modes = Vec::new();
        for addr in &e.nodes {
            modes.push(mode(*addr).await);
        }
        if modes.iter().all(Option::is_some) && modes.iter().flatten().filter(|m| *m == "leader").count() == 1 {
            return;
        }
        assert!(started.elapsed() < BOUND * 2, "the ensemble does not serve: {modes:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node (1-3) that serves session `id`, if any.
async fn node_of_session(e: &Ensemble, id: i64) -> Option<usize> {
    let needle = format!("sid={id:#x},");
    for (i, addr) in e.nodes.iter().enumerate() {
        if four_letter(*addr, "cons").await.is_some_and(|c| c.contains(&needle)) {
            return Some(i + 1);
        }
    }
    None
}

fn services(action: &str, node: usize) -> bool {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/services");
    let out = Command::new(script)
        .args([action, &format!("zk-ensemble:{node}")])
        .output()
        .expect("run scripts/services");
    if !out.status.success() {
        eprintln!(
            "scripts/services {action} zk-ensemble:{node} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    out.status.success()
}

/// A stopped server, started again when dropped — also when the test panics.
struct Stopped {
    node: usize,
}

impl Stopped {
    fn stop(e: &Ensemble, node: usize) -> Stopped {
        let stopped = Stopped { node };
        assert!(services("down", node), "stop zk-ensemble:{node}");
        assert!(
            TcpStream::connect_timeout(&e.nodes[node - 1], Duration::from_secs(2)).is_err(),
            "zk-ensemble:{node} still answers: it was not started by scripts/services, so it cannot be stopped"
        );
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !services("up", self.node) {
            eprintln!("could not start zk-ensemble:{} again", self.node);
        }
    }
}

/// A follower's node number.
async fn a_follower(e: &Ensemble) -> usize {
    for (i, addr) in e.nodes.iter().enumerate() {
        if mode(*addr).await.as_deref() == Some("follower") {
            return i + 1;
        }
    }
    panic!("no follower in the ensemble")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_keep_working_with_one_server_down() {
    let Some(e) = ensemble() else { return };
    let _serial = SERIAL.lock().await;
    let _exclusive = exclusive_use().await;
    all_serving(&e).await;
    let stopped = Stopped::stop(&e, a_follower(&e).await);

    let mut clients: Vec<LockClient> = Vec::new();
    for _ in 0..4 {
        clients.push(lockkit::connect(&e.url).await.expect("connect"));
    }
    let (a, b) = (&clients[0], &clients[1]);
    let name = unique("ensemble_degraded");
    let ga = a.lock(&name).await.expect("lock");
    assert!(b.try_lock(&name).await.unwrap().is_none());
    let again = a.lock(&name).await.expect("re-enter");
    assert_eq!((again.hold_count(), again.fencing_token()), (2, ga.fencing_token()));
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.lock(&name).await })
    };
    again.unlock().await.unwrap();
    let token = ga.fencing_token();
    ga.unlock().await.unwrap();
    let gb = timeout(BOUND, waiter).await.expect("hand-off").unwrap().expect("lock");
    assert!(gb.fencing_token() > token);
    gb.unlock().await.unwrap();

    // Four clients increment an unguarded counter under the lock.
    let counter = Arc::new(AtomicU64::new(0));
    let name = unique("ensemble_degraded_counter");
    let tasks: Vec<_> = clients
        .iter()
        .map(|c| {
            let (c, name, counter) = (c.clone(), name.clone(), counter.clone());
            tokio::spawn(async move {
                for _ in 0..25 {
                    let g = c.lock(&name).await.expect("lock");
                    let seen = counter.load(Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    counter.store(seen + 1, Ordering::SeqCst);
                    g.unlock().await.expect("unlock");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("worker");
    }
    assert_eq!(
        counter.load(Ordering::SeqCst),
        100,
        "lost updates: the lock did not exclude"
    );

    drop(stopped);
    all_serving(&e).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_survives_the_loss_of_a_non_leader_server() {
    let Some(e) = ensemble() else { return };
    let _serial = SERIAL.lock().await;
    let _exclusive = exclusive_use().await;
    all_serving(&e).await;
    let holder_url = format!("{}?session_timeout=10s", e.url);

    // A holder whose session a follower serves (clients pick servers at random).
    let mut found = None;
    for _ in 0..30 {
        let backend = ZkBackend::from_url(&holder_url).await.expect("connect");
        let id = backend.session_id().expect("a session");
        if let Some(node) = node_of_session(&e, id).await
            && mode(e.nodes[node - 1]).await.as_deref() == Some("follower")
        {
            found = Some((backend, id, node));
            break;
        }
    }
    let (backend, session, node) = found.expect("a session on a follower within 30 tries");
    let holder = LockClient::new(backend.clone(), LockOptions::new().wait(BOUND)).unwrap();
    let other = lockkit::connect(&e.url).await.expect("connect");
    let name = unique("ensemble_failover");
    let held = holder.lock(&name).await.expect("lock");

    let stopped = Stopped::stop(&e, node);
    timeout(BOUND, held.lost())
        .await
        .expect("the lost signal fires while the session moves to another server");
    assert_eq!(held.lost_reason(), Some(LostReason::Session));

    let info = timeout(BOUND, holder.inspect(&name))
        .await
        .expect("the holder reconnects to another server")
        .expect("inspect")
        .expect("still held");
    assert_eq!(
        (info.owner.as_str(), info.token),
        (holder.owner(), held.fencing_token())
    );
    assert_eq!(backend.session_id(), Some(session), "the session survived the server");
    assert_ne!(node_of_session(&e, session).await, Some(node));
    assert_eq!(backend.stats().sessions, 1);
    assert!(
        other.try_lock(&name).await.unwrap().is_none(),
        "nobody else got the lock"
    );

    let unlocked = held.unlock().await.expect("the hold survived: it can be released");
    assert!(unlocked.is_free());
    let g = other.try_lock(&name).await.unwrap().expect("free after the release");
    g.unlock().await.unwrap();

    drop(stopped);
    all_serving(&e).await;
}
