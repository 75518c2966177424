//! Network faults between a holder and its server (issue 8), on Redis,
//! MariaDB, Postgres and ZooKeeper: the holder reaches the server through the
//! testkit's [`FaultProxy`], another owner connects directly. Per backend:
//!
//! - blackhole: the holder's lost signal fires before the other owner gets
//!   the name; once the path heals the same client locks again, and its lost
//!   guard's unlock is a typed error, not a hang;
//! - down for good: the name comes free within the lease (ttl and sweep, or
//!   the ZooKeeper session), the holder was told first, and its client fails
//!   fast instead of hanging;
//! - latency: 50 ms each way keeps a 1 s lease alive for several ttls;
//! - resets mid-hold: the holder keeps the lock or is told it lost it —
//!   another owner never holds it while the holder still believes it does;
//! - lost replies (the contract: attempts are idempotent): the server runs a claim or a release
//!   and its answer is lost; the command is sent again on a new connection
//!   and takes effect once — one share, one decrement;
//! - a lock that failed on a lost reply (Redis) leaves no hold behind.
//!
//! Servers come from `LOCKKIT_REDIS_URL`, `LOCKKIT_MYSQL_URL`,
//! `LOCKKIT_POSTGRES_URL`, `LOCKKIT_ZK_URL` (skipped without, failed with
//! `LOCKKIT_REQUIRE_SERVICES=1`).
#![cfg(any(feature = "redis", feature = "mysql", feature = "postgres", feature = "zookeeper"))]

#[path = "../common/mod.rs"]
mod common;

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::{Duration, Instant};

use lockkit::raw::ConnectUrl;
use lockkit::{LeaseKind, LockClient, LockError, LockGuard, LockOptions, LostSignal};
use lockkit_core::testkit::{Fault, FaultProxy, server_url};

use common::{unique, with_params};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(30);
/// The added latency of the latency case, each way.
const LATENCY: Duration = Duration::from_millis(50);

/// One backend under test.
struct Spec {
    /// The environment variable with the server URL.
    var: &'static str,
    /// Query parameters of every client: timeouts, the sweeper.
    params: &'static str,
    /// The lease the holder asks for (ignored by session leases).
    ttl: Duration,
    /// The lease of the latency case.
    latency_ttl: Duration,
    /// The longest a cut-off holder can keep the name from others: its
    /// lease plus the sweep, or the session timeout.
    lease_bound: Duration,
}

const REDIS: Spec = Spec {
    var: "LOCKKIT_REDIS_URL",
    params: "response_timeout=300ms&connect_timeout=300ms",
    ttl: Duration::from_secs(1),
    latency_ttl: Duration::from_secs(1),
    lease_bound: Duration::from_secs(1),
};

const MYSQL: Spec = Spec {
    var: "LOCKKIT_MYSQL_URL",
    params: "sweep_interval=200ms&connect_timeout=1s",
    ttl: Duration::from_secs(1),
    // An extension of MySQL's watchdog is an UPDATE and a read-back SELECT,
    // each a prepare and an execute on a pooled connection whose statement
    // cache is still cold, plus sqlx's ping on release: ~4-6 round trips,
    // 400-600 ms at 100 ms per round trip, and the lease it reports counts
    // from the read-back. A 1 s lease renewed at 333 ms does not survive
    // that (reported in issue 8); 2 s did, until a full `scripts/test` run
    // (every backend's fault cases at once on two cores) lost it once: a
    // renewal that also opens a pooled connection through the proxy (TCP,
    // handshake, authentication: ~5 more round trips) has little margin
    // left. 3 s leaves a whole second.
    latency_ttl: Duration::from_secs(3),
    lease_bound: Duration::from_millis(1200),
};

const POSTGRES: Spec = Spec {
    var: "LOCKKIT_POSTGRES_URL",
    params: "sweep_interval=200ms&connect_timeout=1s",
    ttl: Duration::from_secs(1),
    // As MySQL's: an extension on a cold pooled connection (prepare,
    // execute, the pool's ping) is 3-4 round trips, 300-400 ms at 100 ms
    // each; a 1 s lease renewed at 333 ms kept a margin of ~300 ms, which a
    // loaded machine (a torture run and a build beside the suite) ate once,
    // and a 2 s lease lost it once in a full `scripts/test` run, as MySQL's.
    latency_ttl: Duration::from_secs(3),
    lease_bound: Duration::from_millis(1200),
};

const ZOOKEEPER: Spec = Spec {
    var: "LOCKKIT_ZK_URL",
    params: "session_timeout=4s",
    ttl: Duration::from_secs(1),
    latency_ttl: Duration::from_secs(1),
    lease_bound: Duration::from_secs(4),
};

/// A holder behind a proxy and another owner connected directly.
struct Rig {
    spec: &'static Spec,
    proxy: FaultProxy,
    holder: LockClient,
    other: LockClient,
}

/// The rig for `spec`, or `None` when its server is not configured.
async fn rig(spec: &'static Spec) -> Option<Rig> {
    let url = server_url(spec.var)?;
    let parsed = ConnectUrl::parse(&url).unwrap_or_else(|e| panic!("{}: {e}", spec.var));
    let host = parsed.hosts.first().expect("a host");
    let port = host
        .port
        .unwrap_or_else(|| panic!("{}: the test needs an explicit port", spec.var));
    let upstream: SocketAddr = (host.host.as_str(), port)
        .to_socket_addrs()
        .expect("resolve")
        .next()
        .expect("an address");
    let proxy = FaultProxy::start(upstream).await.expect("proxy");
    let authority = format!("{}:{port}", host.host);
    assert!(url.contains(&authority), "{url} does not name {authority}");
    let through = url.replacen(&authority, &proxy.addr().to_string(), 1);
    let connect = |url: String| async move {
        let url = with_params(&url, spec.params);
        lockkit::connect(&url)
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", lockkit::raw::redact(&url)))
    };
    Some(Rig {
        spec,
        holder: connect(through).await,
        other: connect(url).await,
        proxy,
    })
}

impl Rig {
    /// The holder's options: the spec's short lease, auto-extended.
    fn hold(&self) -> LockOptions {
        self.holder.options().ttl(self.spec.ttl).wait(BOUND)
    }

    /// Another owner's options: a long lease, waiting up to [`BOUND`].
    fn take(&self) -> LockOptions {
        self.other.options().ttl(Duration::from_secs(60)).wait(BOUND)
    }

    /// The holder locks `name` (free), then its path gets `fault`: the
    /// other owner's grant, which must come after the holder was told.
    async fn cut_off(&self, name: &str, fault: Fault) -> CutOff {
        let held = self
            .holder
            .lock_with(name, &self.hold())
            .await
            .expect("lock a free name");
        let lost = LostAt::watch(&held);
        let cut = Instant::now();
        self.proxy.set(fault);
        let taken = timeout(BOUND, self.contend(name, held.lost_signal()))
            .await
            .expect("another owner gets the name")
            .expect("task");
        let lost_at = lost.at(&held).await;
        assert_told_first(self.spec.var, &taken, lost_at);
        CutOff {
            held,
            taken,
            cut,
            lost_at,
        }
    }

    /// The other owner starts waiting for `name`; the result records when it
    /// got it and whether `holder` had been told by then.
    fn contend(&self, name: &str, holder: LostSignal) -> JoinHandle<Taken> {
        let (other, name, opts) = (self.other.clone(), name.to_owned(), self.take());
        tokio::spawn(async move {
            let guard = other.lock_with(&name, &opts).await;
            // Right after the grant: the holder must know already.
            let holder_lost = holder.is_lost();
            Taken {
                at: Instant::now(),
                guard,
                holder_lost,
            }
        })
    }
}

/// A holder cut off by a fault, and the other owner's grant after it.
struct CutOff {
    held: LockGuard,
    taken: Taken,
    /// When the fault began.
    cut: Instant,
    /// When the holder was told.
    lost_at: Instant,
}

/// Another owner's acquisition.
struct Taken {
    at: Instant,
    guard: Result<LockGuard, LockError>,
    /// Whether the holder's lost signal had fired when the grant returned.
    holder_lost: bool,
}

/// Records when a guard's lost signal fired.
struct LostAt {
    signal: LostSignal,
    valid_until: Option<Instant>,
    seen: JoinHandle<Instant>,
}

impl LostAt {
    fn watch(guard: &LockGuard) -> Self {
        let signal = guard.lost_signal();
        let seen = {
            let signal = signal.clone();
            tokio::spawn(async move {
                signal.wait().await;
                Instant::now()
            })
        };
        LostAt {
            signal,
            valid_until: guard.valid_until(),
            seen,
        }
    }

    /// Whether it fired (or its deadline passed) yet.
    fn is_lost(&self) -> bool {
        self.signal.is_lost()
    }

    /// The instant it fired: when the waiting task saw it, or the validity
    /// deadline if that was earlier (the guard counts as lost from then on,
    /// whenever the task got to run).
    async fn at(self, guard: &LockGuard) -> Instant {
        let seen = timeout(BOUND, self.seen)
            .await
            .expect("the lost signal fires")
            .expect("task");
        let deadline = guard.valid_until().or(self.valid_until);
        deadline.map_or(seen, |d| d.min(seen))
    }
}

/// Asserts that another owner's grant came after the holder was told.
fn assert_told_first(label: &str, taken: &Taken, lost_at: Instant) {
    assert!(
        taken.holder_lost,
        "{label}: another owner acquired while the holder's lost signal had not fired"
    );
    assert!(
        lost_at < taken.at,
        "{label}: the lost signal fired {:?} after another owner acquired",
        lost_at - taken.at
    );
}

/// (a) + (b): blackhole the holder's path; it is told before another owner
/// acquires; after healing, its stale guard's unlock is a typed error and
/// the same client locks the name again.
async fn blackhole_then_heal(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let name = unique("faults/blackhole");
    let CutOff {
        held,
        taken,
        cut,
        lost_at,
    } = rig.cut_off(&name, Fault::Blackhole).await;
    let theirs = taken.guard.expect("another owner locks");
    assert!(theirs.fencing_token() > held.fencing_token());
    eprintln!(
        "{}: blackhole: lost after {:?} ({:?}), another owner acquired after {:?}",
        spec.var,
        lost_at - cut,
        held.lost_reason(),
        taken.at - cut
    );

    rig.proxy.set(Fault::Pass);
    let stale = timeout(BOUND, held.unlock())
        .await
        .expect("the stale guard's unlock returns after healing");
    match stale {
        Err(LockError::NotHeld { .. } | LockError::Lost { .. }) => {}
        other => panic!("{}: a lost guard's unlock must say it is not held: {other:?}", spec.var),
    }
    let info = rig.other.inspect(&name).await.expect("inspect").expect("held");
    assert_eq!(info.owner, rig.other.owner(), "the stale unlock touched the new hold");
    theirs.unlock().await.expect("unlock");
    let again = timeout(BOUND, rig.holder.lock_with(&name, &rig.hold()))
        .await
        .expect("the healed client locks again in time")
        .expect("the healed client locks again");
    assert!(again.fencing_token() > info.token);
    assert!(!again.is_lost());
    again.unlock().await.expect("unlock");
}

/// (c): the holder's path goes down for good; the name comes free within
/// the lease bound, the holder was told first, and its client fails fast.
async fn down_for_good(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let name = unique("faults/down");
    let CutOff {
        held,
        taken,
        cut,
        lost_at,
    } = rig.cut_off(&name, Fault::Down).await;
    let freed_after = taken.at - cut;
    // Generous: the lease bound plus scheduling and a waiter's backoff.
    assert!(
        freed_after < spec.lease_bound + Duration::from_secs(10),
        "{}: the name stayed blocked {freed_after:?} after its holder was cut off (bound {:?})",
        spec.var,
        spec.lease_bound
    );
    let theirs = taken.guard.expect("another owner locks");
    eprintln!(
        "{}: down: lost after {:?}, free for another owner after {freed_after:?}",
        spec.var,
        lost_at - cut
    );

    // The cut-off client answers with an error in bounded time, never hangs.
    let started = Instant::now();
    let tried = timeout(BOUND, rig.holder.try_lock(&unique("faults/down-probe")))
        .await
        .unwrap_or_else(|_| panic!("{}: try_lock hangs while the server is unreachable", spec.var));
    match tried {
        Err(e) => assert!(e.is_retryable(), "{}: {e}", spec.var),
        Ok(g) => panic!("{}: locked through a downed path: {g:?}", spec.var),
    }
    let unlocked = timeout(BOUND, held.unlock())
        .await
        .unwrap_or_else(|_| panic!("{}: unlock hangs while the server is unreachable", spec.var));
    assert!(unlocked.is_err(), "{}: {unlocked:?}", spec.var);
    eprintln!(
        "{}: down: the cut-off client failed in {:?}",
        spec.var,
        started.elapsed()
    );
    theirs.unlock().await.expect("unlock");
}

/// (d): with added latency the holder keeps its lease through several ttls.
async fn latency_keeps_the_lease(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let name = unique("faults/latency");
    rig.proxy.set(Fault::Latency(LATENCY));
    let held = rig
        .holder
        .lock_with(&name, &rig.hold().ttl(spec.latency_ttl))
        .await
        .expect("lock a free name");
    let lost = LostAt::watch(&held);
    // Three leases (and one and a half session timeouts), looking often.
    let until = Instant::now() + (3 * spec.latency_ttl).max(spec.lease_bound * 3 / 2);
    let mut looks = 0;
    while Instant::now() < until {
        assert!(
            !lost.is_lost(),
            "{}: a false loss under {LATENCY:?} of latency",
            spec.var
        );
        assert!(
            rig.other.try_lock(&name).await.expect("try_lock").is_none(),
            "{}: another owner got a held name",
            spec.var
        );
        looks += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !lost.is_lost(),
        "{}: a false loss under {LATENCY:?} of latency",
        spec.var
    );
    let info = rig.other.inspect(&name).await.expect("inspect").expect("held");
    assert_eq!(
        (info.owner.as_str(), info.token),
        (rig.holder.owner(), held.fencing_token())
    );
    assert!(held.unlock().await.expect("unlock").is_free());
    eprintln!("{}: latency: held through {looks} looks", spec.var);
}

/// (e): connections reset mid-hold; the holder keeps the lock or is told
/// it lost it, never a silent double hold.
async fn resets_mid_hold(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let name = unique("faults/reset");
    let held = rig
        .holder
        .lock_with(&name, &rig.hold())
        .await
        .expect("lock a free name");
    let lost = LostAt::watch(&held);
    let waiting = rig.contend(&name, held.lost_signal());
    let mut cut = 0;
    for _ in 0..3 {
        tokio::time::sleep(spec.ttl / 2).await;
        cut += rig.proxy.reset_all();
    }
    assert!(cut > 0, "{}: nothing to reset: the holder has no connection", spec.var);
    tokio::time::sleep(spec.ttl * 2).await;
    // Anything granted before this instant was granted while the holder had
    // not let go: the holder must have been told before it.
    let unlock_from = Instant::now();
    let lost_at = if lost.is_lost() {
        Some(lost.at(&held).await)
    } else {
        None
    };
    let kept = lost_at.is_none();
    let unlocked = timeout(BOUND, held.unlock())
        .await
        .unwrap_or_else(|_| panic!("{}: unlock hangs after resets", spec.var));
    let taken = timeout(BOUND, waiting)
        .await
        .expect("the other owner gets the name")
        .expect("task");
    if taken.at < unlock_from {
        let lost_at = lost_at.unwrap_or_else(|| {
            panic!(
                "{}: another owner acquired while the holder believed it held the lock",
                spec.var
            )
        });
        assert_told_first(spec.var, &taken, lost_at);
    }
    let theirs = taken.guard.expect("the other owner locks");
    eprintln!(
        "{}: {cut} connections reset over 3 resets; holder {}; its unlock: {unlocked:?}",
        spec.var,
        if kept { "kept the lock" } else { "reported it lost" }
    );
    theirs.unlock().await.expect("unlock");
}

/// Waits (up to [`BOUND`]) until the proxy has discarded more than `before`
/// bytes: the server ran what it was sent and its answer is gone.
async fn reply_lost(proxy: &FaultProxy, before: u64) {
    timeout(BOUND, async {
        while proxy.dropped_bytes() <= before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await
    .expect("a reply was discarded");
}

/// Contract point 13 under lost replies. A waiting `lock` whose claim ran
/// but whose answer was lost tries again (same attempt) once the path heals:
/// one share, count 1. The inner `unlock` of a count-2 hold whose answer was
/// lost is sent again: one share taken back, the outer hold stands.
async fn lost_replies_count_once(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let label = spec.var;
    let name = unique("faults/lost-replies");
    // A long lease: the watchdog's extensions during the fault are not the point.
    let opts = rig.holder.options().ttl(Duration::from_secs(60)).wait(BOUND);
    // Warm: a pooled connection (Redis: the scripts loaded) before the fault.
    let warm = rig.holder.lock_with(&name, &opts).await.expect("lock");
    warm.unlock().await.expect("unlock");

    let before = rig.proxy.dropped_bytes();
    rig.proxy.set(Fault::LoseReplies);
    let lock = {
        let (holder, name, opts) = (rig.holder.clone(), name.clone(), opts.clone());
        tokio::spawn(async move { holder.lock_with(&name, &opts).await })
    };
    reply_lost(&rig.proxy, before).await;
    rig.proxy.set(Fault::Pass);
    let outer = timeout(BOUND, lock)
        .await
        .expect("lock returns once the path heals")
        .expect("task")
        .unwrap_or_else(|e| panic!("{label}: lock: {}", lockkit::one_line(&e)));
    let info = rig.other.inspect(&name).await.expect("inspect").expect("held");
    assert_eq!(
        (outer.hold_count(), info.hold_count),
        (1, 1),
        "{label}: an acquisition whose reply was lost and that was sent again counts once"
    );
    assert_eq!(info.token, outer.fencing_token(), "{label}: one hold, one token");

    let inner = rig.holder.lock_with(&name, &opts).await.expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    let before = rig.proxy.dropped_bytes();
    rig.proxy.set(Fault::LoseReplies);
    let unlock = tokio::spawn(inner.unlock());
    reply_lost(&rig.proxy, before).await;
    rig.proxy.set(Fault::Pass);
    let unlocked = timeout(BOUND, unlock)
        .await
        .expect("unlock returns once the path heals")
        .expect("task")
        .unwrap_or_else(|e| {
            panic!(
                "{label}: the inner unlock, its reply lost, fails: {}",
                lockkit::one_line(&e)
            )
        });
    assert_eq!(unlocked.remaining_holds, 1, "{label}: one share taken back");
    let info = rig.other.inspect(&name).await.expect("inspect");
    assert_eq!(
        info.map(|i| (i.owner, i.hold_count)),
        Some((rig.holder.owner().to_owned(), 1)),
        "{label}: the outer hold stands after the inner unlock was sent twice"
    );
    if rig.holder.capabilities().leases == LeaseKind::Ttl {
        // (A session lease is lost with its connection, by design.)
        assert!(!outer.is_lost(), "{label}: the outer guard is not lost");
    }
    assert_eq!(outer.unlock().await.expect("unlock").remaining_holds, 0);
    assert!(
        rig.other.inspect(&name).await.expect("inspect").is_none(),
        "{label}: free"
    );
}

/// A `try_lock` whose acquisition ran on the server but whose reply was
/// lost past the response timeout fails (retryably) — and must leave no
/// hold behind: nobody has a guard for it, and the owner's next `lock`
/// would re-enter it and keep it alive (found by the torture runner).
async fn failed_lock_leaves_nothing(spec: &'static Spec) {
    let Some(rig) = rig(spec).await else { return };
    let label = spec.var;
    let name = unique("faults/failed-lock");
    let opts = rig.holder.options().ttl(Duration::from_secs(60));
    // Warm: the connection up and the scripts loaded before the fault.
    rig.holder
        .lock_with(&name, &opts)
        .await
        .expect("lock")
        .unlock()
        .await
        .expect("unlock");

    let before = rig.proxy.dropped_bytes();
    rig.proxy.set(Fault::LoseReplies);
    let tried = timeout(BOUND, rig.holder.try_lock_with(&name, &opts))
        .await
        .expect("try_lock returns within its response timeout");
    let e = tried.expect_err("the reply was lost: try_lock fails");
    assert!(e.is_retryable(), "{label}: {e}");
    assert!(
        rig.proxy.dropped_bytes() > before,
        "{label}: the server answered (and ran it)"
    );
    rig.proxy.set(Fault::Pass);
    // The other owner, connected directly, sees the name come free long
    // before the 60 s lease would have freed it.
    let freed = timeout(BOUND, async {
        while rig.other.inspect(&name).await.expect("inspect").is_some() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        freed.is_ok(),
        "{label}: a failed try_lock left its hold: {:?}",
        rig.other.inspect(&name).await
    );
    let g = rig.holder.lock_with(&name, &opts).await.expect("lock after healing");
    assert_eq!(g.hold_count(), 1, "{label}: no leftover share to re-enter");
    g.unlock().await.expect("unlock");
}

macro_rules! fault_tests {
    ($feature:literal, $module:ident, $spec:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn blackhole_lost_before_another_acquires_then_recovers() {
                super::blackhole_then_heal(&$spec).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn down_for_good_frees_the_name_within_the_lease() {
                super::down_for_good(&$spec).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn latency_keeps_the_lease() {
                super::latency_keeps_the_lease(&$spec).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn resets_mid_hold_never_double_hold() {
                super::resets_mid_hold(&$spec).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lost_replies_count_once() {
                super::lost_replies_count_once(&$spec).await
            }
        }
    };
}

fault_tests!("redis", redis, super::REDIS);

/// Redis alone answers a slow reply with an error (its response timeout);
/// the SQL drivers and ZooKeeper wait for the connection instead.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_failed_lock_leaves_nothing() {
    failed_lock_leaves_nothing(&REDIS).await
}
fault_tests!("mysql", mysql, super::MYSQL);
fault_tests!("postgres", postgres, super::POSTGRES);
fault_tests!("zookeeper", zookeeper, super::ZOOKEEPER);
