//! Session loss on ZooKeeper: a holder whose connection is cut (through the
//! testkit's [`FaultProxy`]) is told at once, and nobody else gets the lock
//! before the server has expired its session; a short cut that the session
//! survives still fires the lost signal, but keeps the hold.
#![cfg(feature = "zookeeper")]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::unique;
use crate::support::server;
use lockkit::{LockClient, LockError, LockOptions, LostReason};
use lockkit_core::testkit::{Fault, FaultProxy};
use lockkit_zk::ZkBackend;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(15);
/// The holder's session timeout (the server's minimum here is 2 s).
const SESSION_TIMEOUT: Duration = Duration::from_secs(4);

/// A four-letter-word answer of the server.
async fn four_letter(addr: SocketAddr, word: &str) -> String {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect for a four-letter word");
    s.write_all(word.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// Whether the server still has session `id` (its session tracker lists it).
async fn session_alive(addr: SocketAddr, id: i64) -> bool {
    let dump = four_letter(addr, "dump").await;
    let tracker = dump.split("ephemeral nodes dump").next().unwrap_or_default();
    tracker.lines().any(|l| l.trim() == format!("{id:#x}"))
}

/// A holder connected through a proxy, and its client.
async fn holder_through(proxy: &FaultProxy, chroot: &str) -> (ZkBackend, LockClient) {
    client_through(proxy, chroot, SESSION_TIMEOUT).await
}

async fn client_through(proxy: &FaultProxy, chroot: &str, session_timeout: Duration) -> (ZkBackend, LockClient) {
    let url = format!(
        "zk://{}{chroot}?session_timeout={}s",
        proxy.addr(),
        session_timeout.as_secs()
    );
    let backend = ZkBackend::from_url(&url).await.expect("connect through the proxy");
    let client = LockClient::new(backend.clone(), LockOptions::new().wait(BOUND)).unwrap();
    (backend, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_holder_is_told_and_nobody_gets_the_lock_before_its_session_expires() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    let (backend, holder) = holder_through(&proxy, &server.chroot).await;
    let other = lockkit::connect(&server.url).await.expect("connect");
    let name = unique("session_cut");

    let held = holder.lock(&name).await.expect("lock a free name");
    let session = backend.session_id().expect("a session");
    assert!(other.try_lock(&name).await.unwrap().is_none());
    assert!(session_alive(server.addr, session).await);

    let cut_at = Instant::now();
    proxy.set(Fault::Down);
    timeout(BOUND, held.lost())
        .await
        .expect("the lost signal fires when the connection is cut");
    let told_after = cut_at.elapsed();
    assert_eq!(held.lost_reason(), Some(LostReason::Session));
    assert!(held.is_lost());

    let taken = timeout(
        SESSION_TIMEOUT * 2 + BOUND,
        other.lock_with(&name, &other.options().wait(SESSION_TIMEOUT * 2 + BOUND)),
    )
    .await
    .expect("the lock comes free once the session expires")
    .expect("lock");
    let taken_after = cut_at.elapsed();
    assert!(
        !session_alive(server.addr, session).await,
        "another owner holds the lock while the cut-off holder's session is alive"
    );
    assert!(
        told_after < taken_after,
        "the holder was told before anybody else got the lock"
    );
    // The server expires a session no earlier than its timeout after it last
    // heard from the client (a ping at most ~0.15 timeouts before the cut).
    assert!(
        taken_after >= SESSION_TIMEOUT * 3 / 4,
        "acquired {taken_after:?} after the cut, before the {SESSION_TIMEOUT:?} session could expire"
    );
    assert!(taken.fencing_token() > held.fencing_token());

    // The holder comes back to an expired session: its guard holds nothing,
    // and its backend opens a new session for the next acquisition.
    proxy.set(Fault::Pass);
    match held.unlock().await {
        Err(LockError::NotHeld { .. }) => {}
        other => panic!("a guard of an expired session must not release: {other:?}"),
    }
    assert_eq!(
        other.inspect(&name).await.unwrap().map(|i| i.owner),
        Some(other.owner().to_owned())
    );
    taken.unlock().await.expect("unlock");
    let again = holder.lock(&name).await.expect("the holder's client works again");
    assert_ne!(backend.session_id(), Some(session), "in a new session");
    assert_eq!(backend.stats().sessions, 2);
    assert!(!again.is_lost());
    again.unlock().await.expect("unlock");
    eprintln!("cut: lost signal after {told_after:?}, another owner acquired after {taken_after:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_cut_fires_the_lost_signal_but_the_session_keeps_the_hold() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    let (backend, holder) = holder_through(&proxy, &server.chroot).await;
    let other = lockkit::connect(&server.url).await.expect("connect");
    let name = unique("session_blip");

    let held = holder.lock(&name).await.expect("lock a free name");
    let session = backend.session_id().expect("a session");
    proxy.set(Fault::Down);
    timeout(BOUND, held.lost())
        .await
        .expect("the lost signal fires while the connection is suspended");
    proxy.set(Fault::Pass);

    // Reconnected within the session timeout: same session, node still there.
    let info = timeout(BOUND, holder.inspect(&name))
        .await
        .expect("the holder reconnects")
        .expect("inspect")
        .expect("still held");
    assert_eq!(backend.session_id(), Some(session), "the session survived");
    assert_eq!(backend.stats().suspensions, 1);
    assert_eq!(
        (info.owner.as_str(), info.token),
        (holder.owner(), held.fencing_token())
    );
    assert!(other.try_lock(&name).await.unwrap().is_none(), "nobody else got it");
    assert!(
        held.is_lost(),
        "a suspension is a loss: the holder could not know it would survive"
    );

    let unlocked = held.unlock().await.expect("the hold is still there to release");
    assert!(unlocked.is_free());
    let g = other.try_lock(&name).await.unwrap().expect("free after the release");
    g.unlock().await.unwrap();
    let again = holder.lock(&name).await.expect("lock again");
    assert!(!again.is_lost(), "a hold taken after the reconnection is not lost");
    again.unlock().await.unwrap();
}

/// While the connection is suspended, requests wait for the reconnection:
/// a `try_lock` may not wait with them, and a bounded `lock` gives up at its
/// bound — but returns only once its queued node is gone (contract point
/// 13), so that the owner's other processes cannot meet the node as a hold
/// after the call failed: here when the connection is back, at most a
/// session timeout after the bound (by then the server has ended a session
/// it could not hear).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_stay_bounded_while_the_connection_is_suspended() {
    let Some(server) = server() else { return };
    let proxy = FaultProxy::start(server.addr).await.expect("proxy");
    // A long session, so that waiting for it to end would show.
    let session_timeout = Duration::from_secs(10);
    let (backend, waiter) = client_through(&proxy, &server.chroot, session_timeout).await;
    let holder = lockkit::connect(&server.url).await.expect("connect");
    let probe = ZkBackend::from_url(&server.url).await.expect("connect");
    let name = unique("session_bounded_wait");
    let held = holder.lock(&name).await.expect("lock a free name");

    let wait = Duration::from_secs(3);
    let started = Instant::now();
    let waiting = {
        let (waiter, name) = (waiter.clone(), name.clone());
        tokio::spawn(async move { waiter.lock_with(&name, &waiter.options().wait(wait)).await })
    };
    let deadline = Instant::now() + BOUND;
    while backend.stats().watches < 1 {
        assert!(Instant::now() < deadline, "the waiter did not queue");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    proxy.set(Fault::Down);
    while backend.stats().suspensions < 1 {
        assert!(Instant::now() < deadline, "the waiter's connection was not suspended");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let tried = Instant::now();
    match waiter.try_lock(&name).await {
        Err(e) => assert!(e.is_retryable(), "{e}"),
        Ok(r) => panic!("try_lock on a suspended connection: {r:?}"),
    }
    assert!(
        tried.elapsed() < session_timeout,
        "try_lock waited for the reconnection"
    );

    // Past its bound the lock has given up, but its node still stands on
    // the server, which keeps the session: the call has not returned.
    tokio::time::sleep((started + wait + Duration::from_secs(2)).saturating_duration_since(Instant::now())).await;
    assert!(
        !waiting.is_finished(),
        "the lock returned while its node could still stand"
    );
    proxy.set(Fault::Pass);
    match timeout(BOUND, waiting).await.expect("the wait ends").unwrap() {
        Err(LockError::WaitTimeout { .. }) => {}
        other => panic!("expected WaitTimeout, got {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited < wait + session_timeout,
        "the {wait:?} wait took {waited:?}: longer than a session timeout past its bound"
    );
    assert_eq!(
        probe.contenders(&name).await.unwrap(),
        1,
        "the given-up waiter's node is gone when its call returns"
    );
    assert_eq!(backend.stats().sessions, 1, "the session survived");
    held.unlock().await.unwrap();
    let g = waiter.try_lock(&name).await.unwrap().expect("free");
    g.unlock().await.unwrap();
}

/// A healthy holder keeps its lock for many session timeouts: its session's
/// deadline (which `is_lost()` compares with the clock) keeps moving with
/// the heartbeat, staying within a session timeout of now, and never
/// passes while the server hears from the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_holders_session_deadline_keeps_moving() {
    let Some(server) = server() else { return };
    let url = format!("{}?session_timeout=2s", server.url);
    let backend = ZkBackend::from_url(&url).await.expect("connect");
    let client = LockClient::new(backend, LockOptions::new().wait(BOUND)).unwrap();
    let other = lockkit::connect(&server.url).await.expect("connect");
    let name = unique("session_deadline");
    let held = client.lock(&name).await.expect("lock");
    let first = held.valid_until().expect("a session lease has a deadline");
    assert!(
        first <= Instant::now() + Duration::from_secs(2),
        "within a session timeout of now"
    );
    // Three session timeouts.
    let until = Instant::now() + Duration::from_secs(6);
    let mut latest = first;
    while Instant::now() < until {
        assert!(!held.is_lost(), "a healthy holder's lock is not lost");
        let deadline = held.valid_until().expect("deadline");
        assert!(deadline > Instant::now(), "the deadline stays ahead of the clock");
        latest = latest.max(deadline);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        latest > first + Duration::from_secs(4),
        "the deadline moved with the heartbeat"
    );
    assert!(other.try_lock(&name).await.expect("try_lock").is_none(), "still held");
    held.unlock().await.expect("unlock");
}

/// A client whose runtime shut down while it was reconnecting answers every
/// request at once with a connection loss. The queue's reads tried again
/// at once, in one poll that never yielded: a take-back running when an
/// application's runtime shut down kept a worker thread busy and the
/// shutdown waiting for ever (seen as a test binary that hung at 100 % CPU
/// after its last test). Such a backend's calls now fail with a typed
/// error within the client's own bound (7/5 of the session timeout).
#[test]
fn a_call_whose_client_lost_its_runtime_fails_instead_of_spinning() {
    let Some(server) = server() else { return };
    let caller = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let proxy = caller.block_on(FaultProxy::start(server.addr)).expect("proxy");
    let owner_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("zk://{}{}?session_timeout=4s", proxy.addr(), server.chroot);
    let backend = owner_rt
        .block_on(ZkBackend::from_url(&url))
        .expect("connect through the proxy");
    let client = LockClient::new(backend.clone(), LockOptions::new()).expect("client");
    let name = unique("runtime_gone");
    // The client holds a session; its connection breaks, and while it
    // tries to reconnect its runtime goes.
    caller.block_on(async { proxy.set(Fault::Down) });
    owner_rt.block_on(async { tokio::time::sleep(Duration::from_millis(500)).await });
    drop(owner_rt);

    let (done, result) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = caller.block_on(async { client.inspect(&name).await.map(|i| i.is_some()) });
        let _ = done.send(r);
        drop(proxy);
    });
    let outcome = result
        .recv_timeout(Duration::from_secs(60))
        .expect("the call returns (it spun without end before)");
    assert!(
        matches!(outcome, Err(LockError::Backend { .. })),
        "the call fails with a backend error: {outcome:?}"
    );
}
