//! Steps of a Redis server's wall clock, on the `redis-clock` service (a
//! `redis-server` whose clock the file `LOCKKIT_REDIS_CLOCK_SHIFT_FILE`
//! shifts; see `scripts/services`). Redis stores every expiry as a time of
//! its own clock, so a step forward ends leases early and a step back
//! makes them last longer. Without the restart guard a step forward gives
//! a second owner at once, while the first still counts on its lease; with
//! it (`?restart_guard=on`), a client that read the server's clock before
//! the step sees it in the next reading, takes back the grant that came
//! with it and quarantines the server until the leases it cut short would
//! have ended.
//!
//! The tests share the one server's clock, so they run one at a time
//! ([`SteppedClock`]).
#![cfg(feature = "redis")]

use std::time::{Duration, Instant};

use crate::common::redis::{SteppedClock, quarantine_of};
use crate::common::{assert_a_longer_lease_after_a_step_back, assert_a_second_owner_after_a_step};
use lockkit::{LockClient, LockOptions};

const NAME: &str = "stepped";

/// The stepped server, with a key prefix of this test's own.
struct SteppedServer {
    clock: SteppedClock,
    prefix: String,
}

impl SteppedServer {
    async fn from_env(test: &str) -> Option<SteppedServer> {
        let clock = SteppedClock::from_env().await?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Some(SteppedServer {
            clock,
            prefix: format!("clock-{test}-{}-{nanos}:", std::process::id()),
        })
    }

    fn shift(&self, ms: i64) {
        self.clock.shift(ms);
    }

    async fn client(&self, query: &str) -> LockClient {
        let sep = if query.is_empty() { "" } else { "&" };
        lockkit::connect(&format!("{}?prefix={}{sep}{query}", self.clock.url, self.prefix))
            .await
            .expect("connect")
    }

    /// Gives this test's keys the restart guard's marker a server in
    /// service has, so the first use is not quarantined.
    fn mark(&self) {
        self.clock
            .cli(&["HSET", &format!("{}node", self.prefix), "q", "0", "e", "0"]);
    }
}

/// A lease of `ttl`, extended by the watchdog.
fn held(ttl: Duration) -> LockOptions {
    LockOptions::new().ttl(ttl).wait(Duration::from_secs(30))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_forward_ends_a_lease_early_and_grants_it_again() {
    let Some(server) = SteppedServer::from_env("forward").await else {
        return;
    };
    let (a, b) = (server.client("").await, server.client("").await);
    let ga = a
        .lock_with(NAME, &held(Duration::from_secs(20)))
        .await
        .expect("A locks");
    // 30 s later on the server's clock: A's lease (20 s, extended every
    // third of it) ended there, while A counts on it for 20 s more.
    server.shift(30_000);
    assert_a_second_owner_after_a_step(&ga, b.try_lock_with(NAME, &held(Duration::from_secs(20))).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_back_makes_a_lease_last_longer() {
    let Some(server) = SteppedServer::from_env("back").await else {
        return;
    };
    let a = server.client("").await;
    let fixed = LockOptions::new().ttl(Duration::from_secs(4)).auto_extend(false);
    let ga = a.lock_with(NAME, &fixed).await.expect("A locks");
    server.shift(-30_000);
    assert_a_longer_lease_after_a_step_back(&a, NAME, ga).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_guard_a_step_forward_grants_nothing_until_cut_leases_end() {
    let Some(server) = SteppedServer::from_env("guarded").await else {
        return;
    };
    server.mark();
    let (a, b) = (
        server.client("restart_guard=on").await,
        server.client("restart_guard=on").await,
    );
    let ttl = Duration::from_secs(6);
    let ga = a.lock_with(NAME, &held(ttl)).await.expect("A locks");
    let a_since = Instant::now();
    // Past A's whole lease on the server's clock.
    server.shift(10_000);
    let refused = b
        .try_lock_with(NAME, &held(ttl))
        .await
        .expect_err("B read the clock before the step: its grant is taken back");
    let left = quarantine_of(&refused);
    assert!(
        Instant::now() + left >= a_since + ttl,
        "the quarantine ({left:?}) lasts until A's lease would have ended"
    );
    assert!(
        b.inspect(NAME).await.expect("inspect").is_none(),
        "nobody holds the name: B's grant was taken back"
    );
    // A client that never read the clock before the step is kept out by
    // the server's quarantine all the same.
    let c = server.client("restart_guard=on").await;
    let refused = c
        .try_lock_with(NAME, &held(ttl))
        .await
        .expect_err("quarantined for every client");
    quarantine_of(&refused);
    // A's extension finds its hold gone.
    tokio::time::timeout(Duration::from_secs(30), ga.lost())
        .await
        .expect("A's lost signal at its next extension");
    // A waiting lock waits the quarantine out.
    let gb = b
        .lock_with(NAME, &held(ttl))
        .await
        .expect("B locks after the quarantine");
    assert!(
        a_since.elapsed() >= ttl,
        "B granted {:?} after A, within A's lease of {ttl:?}",
        a_since.elapsed()
    );
    gb.unlock().await.expect("B unlocks");
}
