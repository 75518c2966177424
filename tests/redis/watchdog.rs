//! The watchdog on Redis, against private servers: leases stay alive for
//! many ttls with one batched script call per renewal, and when the server
//! becomes unreachable the lost signal fires before the lease could have
//! ended on the server.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::{Duration, Instant};

use lockkit::{LockError, LockOptions, LostReason};
use redis::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_five_ttls_with_one_script_call_per_renewal() {
    let Some((server, a, b)) = redis::two_clients("held_five_ttls_with_one_script_call_per_renewal").await else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let opts = LockOptions::new().ttl(ttl).auto_extend(true);
    let mut guards = Vec::new();
    for i in 0..50 {
        guards.push(a.lock_with(&format!("held-{i}"), &opts).await.expect("lock"));
    }
    let before = server.command_calls();
    tokio::time::sleep(ttl * 5).await;
    let after = server.command_calls();
    for g in &guards {
        assert!(!g.is_lost(), "{} was lost", g.name());
        let info = b.inspect(g.name()).await.expect("inspect").expect("still held");
        assert_eq!(info.owner, a.owner());
        assert!(b.try_lock(g.name()).await.expect("try_lock").is_none());
    }
    let calls = after.get("evalsha").copied().unwrap_or(0) - before.get("evalsha").copied().unwrap_or(0);
    // 5 ttls at one renewal per ttl/3 is ~15 renewals; one extension per
    // lock per renewal would be ~750 calls.
    assert!(
        calls <= 40,
        "{calls} script calls to keep 50 locks for 5 ttls: not batched"
    );
    eprintln!("50 locks held for 5 ttls with {calls} script calls");
    for g in guards {
        assert!(g.unlock().await.expect("unlock").is_free());
    }
}

/// Holds a lock with auto-extend, then makes the server unreachable with
/// `cut` and checks that the lost signal fires before `cut time + ttl`
/// (the latest the server-side lease can end).
async fn lost_before_the_ttl_runs_out(server: &mut Server, cut: impl FnOnce(&mut Server)) {
    let url = format!("{}?response_timeout=300ms&connect_timeout=300ms", server.url());
    let a = lockkit::connect(&url).await.expect("connect");
    let ttl = Duration::from_secs(3);
    let g = a
        .lock_with("watched", &LockOptions::new().ttl(ttl).auto_extend(true))
        .await
        .expect("lock");
    // Let the watchdog renew at least once.
    tokio::time::sleep(ttl / 2).await;
    assert!(!g.is_lost());
    let cut_at = Instant::now();
    cut(server);
    tokio::time::timeout(ttl * 3, g.lost())
        .await
        .expect("the lost signal fires when the server is unreachable");
    let fired = cut_at.elapsed();
    assert!(
        fired < ttl,
        "lost fired {fired:?} after the server became unreachable; the lease (ttl {ttl:?}) may have ended already"
    );
    assert!(g.is_lost());
    assert_eq!(g.lost_reason(), Some(LostReason::Expired));
    // Releasing now fails with a typed error, not a hang or a panic.
    let e = tokio::time::timeout(Duration::from_secs(10), g.unlock())
        .await
        .expect("unlock returns")
        .expect_err("the server is unreachable");
    assert!(matches!(e, LockError::Backend { retryable: true, .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_before_the_ttl_when_the_server_dies() {
    if !redis::available("lost_fires_before_the_ttl_when_the_server_dies") {
        return;
    }
    let mut server = Server::start();
    lost_before_the_ttl_runs_out(&mut server, Server::stop).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_fires_before_the_ttl_when_the_server_hangs() {
    if !redis::available("lost_fires_before_the_ttl_when_the_server_hangs") {
        return;
    }
    let mut server = Server::start();
    lost_before_the_ttl_runs_out(&mut server, |s| s.freeze()).await;
    server.thaw();
}
