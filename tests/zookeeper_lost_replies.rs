//! Answers lost after the ZooKeeper server acted (issue 13, contract point
//! 13): a contender's create, a re-entry's write and a release whose replies
//! are lost with the connection (the testkit's [`FaultProxy`] delivers the
//! requests and drops the replies, then closes the connection) take effect
//! once. The client finds its own contender node again by the attempt id in
//! its name (after a `sync`), and recognises its own re-entry or release by
//! the attempt id in the node data: no second node, no extra count, no
//! double decrement.
#![cfg(feature = "zookeeper")]

use std::future::Future;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use lockkit::url::ConnectUrl;
use lockkit::{LockClient, LockOptions};
use lockkit_core::testkit::{Fault, FaultProxy, services_required};
use lockkit_zk::ZkBackend;
use tokio::time::{Instant, timeout};

/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(15);

struct Server {
    url: String,
    addr: SocketAddr,
    chroot: String,
}

fn server() -> Option<Server> {
    let url = match std::env::var("LOCKKIT_ZK_URL") {
        Ok(url) if !url.trim().is_empty() => url,
        _ if services_required() => panic!("LOCKKIT_ZK_URL is not set and LOCKKIT_REQUIRE_SERVICES=1"),
        _ => {
            eprintln!("skipped: LOCKKIT_ZK_URL is not set (run scripts/services up zookeeper)");
            return None;
        }
    };
    let parsed = ConnectUrl::parse(&url).expect("LOCKKIT_ZK_URL");
    let host = parsed.hosts.first().expect("a host");
    let addr = (host.host.as_str(), host.port.unwrap_or(2181))
        .to_socket_addrs()
        .expect("resolve")
        .next()
        .expect("an address");
    let chroot = parsed.url.path().to_owned();
    Some(Server { url, addr, chroot })
}

fn unique(case: &str) -> String {
    format!("lockkit-test/{case}/{}", lockkit_core::name::random_owner())
}

/// The client under test, through `proxy` (a session long enough to outlive
/// the cut), and an observer connected directly.
async fn clients(server: &Server, proxy: &FaultProxy) -> (LockClient, ZkBackend, ZkBackend, LockClient) {
    let url = format!("zk://{}{}?session_timeout=10s", proxy.addr(), server.chroot);
    let backend = ZkBackend::from_url(&url).await.expect("connect through the proxy");
    let client = LockClient::new(backend.clone(), LockOptions::new().wait(BOUND)).expect("client");
    let observer_backend = ZkBackend::from_url(&server.url).await.expect("connect");
    let observer = LockClient::new(observer_backend.clone(), LockOptions::new()).expect("client");
    (client, backend, observer_backend, observer)
}

/// The session went on (over a new connection) after the reply was lost.
fn reconnected(backend: &ZkBackend) {
    let stats = backend.stats();
    assert_eq!(stats.sessions, 1, "the same session throughout: {stats:?}");
}

/// Waits (up to [`BOUND`]) until `check` holds.
async fn until<F: Future<Output = bool>>(what: &str, mut check: impl FnMut() -> F) {
    let deadline = Instant::now() + BOUND;
    while !check().await {
        assert!(Instant::now() < deadline, "{what}: not within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn count(observer: &LockClient, name: &str) -> Option<u32> {
    observer.inspect(name).await.expect("inspect").map(|i| i.hold_count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_whose_reply_was_lost_makes_one_contender_node() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    let (client, backend, observer_backend, observer) = clients(&server, &proxy).await;
    let name = unique("lost_create");

    // Held by the observer, so the name's parent node exists (a create
    // under a missing parent fails and is answered before anything is made)
    // and the lost create queues behind it.
    let held = observer.lock(&name).await.expect("observer locks");
    proxy.set(Fault::LoseReplies);
    let locking = {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move { client.lock(&name).await })
    };
    until("the create reached the server, its reply lost", || async {
        observer_backend.contenders(&name).await.unwrap() == 2 && proxy.dropped_bytes() > 0
    })
    .await;
    proxy.set(Fault::Pass);
    until("the client is connected again", || async {
        proxy.open_connections() > 0
    })
    .await;
    assert_eq!(
        observer_backend.contenders(&name).await.unwrap(),
        2,
        "one node for the holder, one for the waiter whose create was lost"
    );
    held.unlock().await.expect("observer unlocks");
    let guard = timeout(BOUND, locking)
        .await
        .expect("lock returns once the connection is back and the name free")
        .expect("task")
        .expect("lock");
    reconnected(&backend);
    assert_eq!(guard.hold_count(), 1);
    assert_eq!(
        observer_backend.contenders(&name).await.unwrap(),
        1,
        "the create was found again, not made twice"
    );
    let info = observer.inspect(&name).await.unwrap().expect("held");
    assert_eq!(
        (info.owner.as_str(), info.hold_count, info.token),
        (client.owner(), 1, guard.fencing_token())
    );
    assert_eq!(guard.unlock().await.expect("unlock").remaining_holds, 0);
    assert_eq!(
        observer_backend.contenders(&name).await.unwrap(),
        0,
        "no node left behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_whose_reply_was_lost_counts_once() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    let (client, backend, _observer_backend, observer) = clients(&server, &proxy).await;
    let name = unique("lost_reentry");

    let outer = client.lock(&name).await.expect("lock");
    proxy.set(Fault::LoseReplies);
    let reentering = {
        let (client, name) = (client.clone(), name.clone());
        tokio::spawn(async move { client.try_lock(&name).await })
    };
    until("the re-entry reached the server, its reply lost", || async {
        count(&observer, &name).await == Some(2) && proxy.dropped_bytes() > 0
    })
    .await;
    proxy.set(Fault::Pass);
    let inner = timeout(BOUND, reentering)
        .await
        .expect("try_lock returns once the connection is back")
        .expect("task")
        .expect("try_lock")
        .expect("re-entered");
    reconnected(&backend);
    assert_eq!(inner.hold_count(), 2);
    assert_eq!(count(&observer, &name).await, Some(2), "the re-entry counted once");
    assert_eq!(inner.unlock().await.expect("unlock").remaining_holds, 1);
    assert_eq!(outer.unlock().await.expect("unlock").remaining_holds, 0);
    assert_eq!(count(&observer, &name).await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_was_lost_takes_one_share() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    let (client, backend, _observer_backend, observer) = clients(&server, &proxy).await;
    let name = unique("lost_release");

    let outer = client.lock(&name).await.expect("lock");
    let inner = client.lock(&name).await.expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    proxy.set(Fault::LoseReplies);
    let unlocking = tokio::spawn(inner.unlock());
    until("the release reached the server, its reply lost", || async {
        count(&observer, &name).await == Some(1) && proxy.dropped_bytes() > 0
    })
    .await;
    proxy.set(Fault::Pass);
    let unlocked = timeout(BOUND, unlocking)
        .await
        .expect("unlock returns once the connection is back")
        .expect("task")
        .expect("unlock");
    reconnected(&backend);
    assert_eq!(unlocked.remaining_holds, 1);
    assert_eq!(count(&observer, &name).await, Some(1), "one share taken back, not two");
    assert_eq!(outer.unlock().await.expect("unlock").remaining_holds, 0);
    assert_eq!(count(&observer, &name).await, None);
}
