//! `lockkit::blocking`: the blocking client from plain threads — locks,
//! tokens, drops that release, leases kept alive by the client's own
//! runtime while the caller sleeps, leases lost without it, semaphores,
//! read-write locks, typed refusal inside an async runtime — and the same
//! core flow on the servers in `LOCKKIT_REDIS_URL`, `LOCKKIT_REDLOCK_URL`,
//! `LOCKKIT_MYSQL_URL`, `LOCKKIT_POSTGRES_URL` and `LOCKKIT_ZK_URL`
//! (skipped without, failed with `LOCKKIT_REQUIRE_SERVICES=1`) and on an
//! SQLite file.

use std::time::Duration;

use lockkit::blocking::{self, LockClient};
use lockkit::{LockError, LockOptions};

use crate::common::unique;

/// Far above any healthy latency, far below a stuck test.
const BOUND: Duration = Duration::from_secs(20);

/// A client of the memory store `store`, shared by every client of it in
/// this process.
fn memory(store: &str) -> LockClient {
    blocking::connect(&format!("memory://{store}")).expect("connect")
}

/// Lock, refusal to another owner, unlock, and a greater token for the next
/// holder: `a` and `b` are clients of one store with different owners.
fn core_flow(a: &LockClient, b: &LockClient) {
    assert_ne!(a.owner(), b.owner());
    let name = unique("blocking");
    let first = a.lock(&name).expect("lock");
    assert_eq!(first.name(), name);
    assert_eq!(first.owner(), a.owner());
    assert_eq!(first.hold_count(), 1);
    assert!(!first.is_lost());
    assert!(
        b.try_lock(&name).expect("try_lock").is_none(),
        "another owner is refused while it is held"
    );
    let held = a.inspect(&name).expect("inspect").expect("held");
    assert_eq!(held.token, first.fencing_token());
    let token = first.fencing_token();
    assert!(first.unlock().expect("unlock").is_free());
    let second = b.try_lock(&name).expect("try_lock").expect("free after unlock");
    assert!(second.fencing_token() > token, "tokens grow");
    assert!(second.unlock().expect("unlock").is_free());
}

#[test]
fn lock_unlock_and_tokens_grow() {
    let a = memory("blocking-core");
    core_flow(&a, &a.with_new_owner());
    core_flow(&a, &memory("blocking-core"));
    let b = a.with_owner("blocking-core-b").expect("owner");
    assert_eq!(b.owner(), "blocking-core-b");
    core_flow(&a, &b);
}

#[test]
fn a_dropped_guard_is_released() {
    let a = memory("blocking-drop");
    let b = memory("blocking-drop");
    let name = unique("drop");
    let guard = a
        .lock_with(&name, &a.options().ttl(Duration::from_secs(600)))
        .expect("lock");
    let token = guard.fencing_token();
    drop(guard);
    let next = b
        .try_lock(&name)
        .expect("try_lock")
        .expect("released by the drop, long before the 600 s ttl");
    assert!(next.fencing_token() > token);
    // A guard dropped together with its client, as at the end of `main`.
    drop(a);
    drop(next);
    assert!(
        b.inspect(&name).expect("inspect").is_none(),
        "released before the drop returned"
    );
}

#[test]
fn auto_extension_runs_while_the_caller_sleeps() {
    let a = memory("blocking-extend");
    let b = a.with_new_owner();
    let name = unique("extend");
    let guard = a
        .lock_with(&name, &LockOptions::new().ttl(Duration::from_millis(300)))
        .expect("lock");
    std::thread::sleep(Duration::from_millis(1200));
    assert!(!guard.is_lost(), "extended: {:?}", guard.lost_reason());
    assert!(guard.lost_reason().is_none());
    assert!(b.try_lock(&name).expect("try_lock").is_none(), "still held");
    guard.unlock().expect("unlock");
}

#[test]
fn without_auto_extension_the_lease_runs_out() {
    let a = memory("blocking-expire");
    let b = a.with_new_owner();
    let name = unique("expire");
    let options = LockOptions::new().ttl(Duration::from_millis(300)).auto_extend(false);
    let guard = a.lock_with(&name, &options).expect("lock");
    let signal = guard.lost_signal();
    assert!(guard.wait_lost(BOUND), "lost after its ttl");
    assert!(guard.is_lost());
    assert!(guard.lost_reason().is_some());
    assert!(signal.is_lost() && signal.reason().is_some() && signal.wait(Duration::ZERO));
    let next = b
        .lock_with(&name, &b.options().wait(BOUND))
        .expect("free after the ttl");
    assert!(next.fencing_token() > guard.fencing_token());
    assert!(
        matches!(guard.unlock(), Err(LockError::NotHeld { .. })),
        "the lost hold is not released"
    );
    next.unlock().expect("unlock");
}

#[test]
fn a_held_lock_is_not_reported_lost() {
    let a = memory("blocking-held");
    let guard = a.lock(&unique("held")).expect("lock");
    assert!(!guard.wait_lost(Duration::from_millis(200)));
    assert!(!guard.lost_signal().wait(Duration::from_millis(50)));
    guard.extend(Duration::from_secs(60)).expect("extend");
    assert!(guard.valid_until().is_some());
    guard.abandon();
}

#[test]
fn semaphore_of_two_permits() {
    let a = memory("blocking-semaphore");
    let name = unique("semaphore");
    let slots = a.semaphore(&name, 2).expect("semaphore");
    assert_eq!((slots.name(), slots.permits()), (name.as_str(), 2));
    let first = slots.acquire().expect("first permit");
    let second = a
        .with_new_owner()
        .semaphore(&name, 2)
        .expect("semaphore")
        .try_acquire()
        .expect("try_acquire")
        .expect("second permit");
    assert_ne!(first.fencing_token(), second.fencing_token());
    assert!(
        slots.try_acquire().expect("try_acquire").is_none(),
        "both permits are out"
    );
    assert_eq!(slots.holders().expect("holders").len(), 2);
    assert_eq!(slots.waiting().expect("waiting"), 0);
    first.unlock().expect("unlock");
    let third = slots.try_acquire().expect("try_acquire").expect("a permit came back");
    drop((second, third));
    assert!(slots.holders().expect("holders").is_empty());
}

#[test]
fn readers_share_and_keep_a_writer_out() {
    let a = memory("blocking-rw");
    let name = unique("rw");
    let mine = a.rw_lock(&name).expect("rw_lock");
    let theirs = a.with_new_owner().rw_lock(&name).expect("rw_lock");
    let writer = a.with_new_owner().rw_lock(&name).expect("rw_lock");
    let r1 = mine.read().expect("read");
    let r2 = theirs.try_read().expect("try_read").expect("readers share");
    assert!(
        writer.try_write().expect("try_write").is_none(),
        "no writer beside readers"
    );
    assert_eq!(writer.readers().expect("readers").len(), 2);
    assert!(writer.writer().expect("writer").is_none());
    drop((r1, r2));
    let w = writer.try_write().expect("try_write").expect("free for a writer");
    assert!(
        mine.try_read().expect("try_read").is_none(),
        "no reader beside a writer"
    );
    let read = w.downgrade().expect("downgrade");
    assert_eq!(read.kind(), lockkit::LockKind::Read);
    let shared = mine
        .try_read()
        .expect("try_read")
        .expect("readers share with the downgraded one");
    assert_eq!(read.fencing_token(), shared.fencing_token());
    assert!(
        matches!(shared.downgrade(), Err(LockError::Conflict { .. })),
        "a read hold does not downgrade"
    );
}

fn in_async_refusal<T: std::fmt::Debug>(result: Result<T, LockError>) {
    match result {
        Err(LockError::InvalidConfig { part, reason }) => {
            assert_eq!(part, "blocking API");
            assert!(reason.contains("async"), "{reason}");
        }
        other => panic!("expected the blocking API's InvalidConfig, got {other:?}"),
    }
}

/// Blocking calls inside an async runtime get a typed error, not a panic;
/// dropping clients and guards there neither panics nor leaves a hold.
#[test]
fn inside_an_async_runtime_blocking_calls_are_refused() {
    let client = memory("blocking-async");
    let other = memory("blocking-async");
    let name = unique("async");
    let guard = client.lock(&name).expect("lock");
    let slots = client.semaphore(&unique("async-semaphore"), 1).expect("semaphore");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        in_async_refusal(blocking::connect("memory://blocking-async"));
        in_async_refusal(client.lock(&unique("async")));
        in_async_refusal(client.try_lock(&name));
        in_async_refusal(client.inspect(&name));
        in_async_refusal(slots.try_acquire());
        in_async_refusal(guard.extend(Duration::from_secs(60)));
        // The async client works there, on the blocking client's runtime.
        let info = client.as_async().inspect(&name).await.expect("inspect");
        assert_eq!(info.map(|i| i.token), Some(guard.fencing_token()));
        drop(slots);
        drop(guard);
        drop(client);
    });
    // The guard dropped inside the runtime was released on a thread of its
    // own.
    let next = other
        .lock_with(&name, &other.options().wait(BOUND))
        .expect("released by the drop");
    let held = other.lock(&unique("async-unlock")).expect("lock");
    runtime.block_on(async {
        in_async_refusal(held.unlock());
        drop(other);
    });
    drop(next);
    // The last handle on a runtime, dropped inside another.
    let lone = memory("blocking-async");
    lone.lock(&unique("async-lone")).expect("lock").abandon();
    runtime.block_on(async move { drop(lone) });
    drop(runtime);
}

/// `blocking::LockClient::new` wraps an async client: its calls run on the
/// new runtime, and `as_async` gives the async one back.
#[test]
fn wraps_an_async_client() {
    let inner = lockkit::LockClient::new(lockkit::memory::MemoryBackend::new(), LockOptions::new()).expect("client");
    let client = LockClient::new(inner.clone()).expect("wrap");
    assert_eq!(client.owner(), inner.owner());
    assert_eq!(client.as_async().owner(), inner.owner());
    assert!(client.capabilities().semaphores);
    let name = unique("wrap");
    let guard = client.lock(&name).expect("lock");
    assert_eq!(client.list("lockkit-test/wrap/", 10).expect("list").len(), 1);
    let removed = client.force_release(&name).expect("force_release").expect("held");
    assert_eq!(removed.token, guard.fencing_token());
    assert!(
        matches!(guard.extend(Duration::from_secs(1)), Err(LockError::Lost { .. })),
        "force-released"
    );
    assert!(guard.wait_lost(Duration::ZERO));
}

#[test]
fn handles_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<blocking::LockClient>();
    send_sync::<blocking::LockGuard>();
    send_sync::<blocking::LostSignal>();
    send_sync::<blocking::Semaphore>();
    send_sync::<blocking::RwLock>();
}

#[cfg(feature = "redis")]
#[test]
fn redis_core_flow() {
    on_server("LOCKKIT_REDIS_URL");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_core_flow() {
    on_server("LOCKKIT_POSTGRES_URL");
}

#[cfg(feature = "redis")]
#[test]
fn redlock_core_flow() {
    on_server("LOCKKIT_REDLOCK_URL");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_core_flow() {
    on_server("LOCKKIT_MYSQL_URL");
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_core_flow() {
    on_server("LOCKKIT_ZK_URL");
}

/// The core flow between two clients of the server in `var`, each with its
/// own connections.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper"))]
fn on_server(var: &str) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    core_flow(
        &blocking::connect(&url).expect("connect"),
        &blocking::connect(&url).expect("connect"),
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite_core_flow() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let a = blocking::connect(&url).expect("connect");
    core_flow(&a, &blocking::connect(&url).expect("connect"));
    core_flow(&a, &a.with_new_owner());
}

/// The recipes, blocking: a multi-lock all or nothing, an election with a
/// blocking observer, and a job that runs once among threads and keeps
/// its name blocked for `at_least`.
#[test]
fn recipes_from_plain_threads() {
    let (a, b) = (memory("blocking-recipes"), memory("blocking-recipes"));
    assert_ne!(a.owner(), b.owner());

    // Multi-lock: one member busy, nothing taken; then all of them.
    let (x, y) = (unique("multi-x"), unique("multi-y"));
    let busy = a.lock(&y).expect("lock y");
    assert!(b.try_lock_all(&[&x, &y]).expect("try_lock_all").is_none());
    assert!(
        a.inspect(&x).expect("inspect").is_none(),
        "x left held by an incomplete set"
    );
    drop(busy);
    let set = b.lock_all(&[&y, &x]).expect("lock_all");
    assert_eq!(set.names().count(), 2);
    assert!(set.token(&x).is_some() && !set.is_lost());
    assert!(!set.wait_lost(Duration::from_millis(20)));
    drop(set);
    assert!(
        a.inspect(&x).expect("inspect").is_none(),
        "a dropped set releases its members"
    );
    let short = b.options().ttl(Duration::from_millis(200)).auto_extend(false);
    let set = b.lock_all_with(&[&x, &y], &short).expect("lock_all");
    assert!(set.wait_lost(BOUND), "a set is lost with its members' leases");
    assert!(set.lost_reason().is_some());
    drop(set);

    // Election: A leads, B's observer sees it, B is elected once A resigns.
    let role = unique("role");
    let (ea, eb) = (
        a.election(&role).expect("election"),
        b.election(&role)
            .expect("election")
            .with_observe_interval(Duration::from_millis(10)),
    );
    let mut changes = eb.observe().expect("observe");
    assert_eq!(changes.next().expect("a change").expect("leader"), None);
    let la = ea.campaign().expect("campaign");
    assert!(eb.try_campaign().expect("try_campaign").is_none());
    let seen = changes.next().expect("a change").expect("leader").expect("a leader");
    assert_eq!((seen.owner.as_str(), seen.epoch), (a.owner(), la.epoch()));
    let epoch = la.epoch();
    la.resign().expect("resign");
    let lb = eb.campaign().expect("campaign");
    assert!(lb.epoch() > epoch);
    drop(lb);
    assert!(eb.leader().expect("leader").is_none(), "a dropped leadership resigns");

    // A job fired on four threads runs once, and keeps its name blocked.
    let job = unique("job");
    let limits = lockkit::JobLimits::new(BOUND, BOUND * 2);
    let runs: Vec<_> = (0..4)
        .map(|_| {
            let (client, job) = (a.with_new_owner(), job.clone());
            std::thread::spawn(move || {
                client
                    .run_exclusive(&job, limits, |context| context.token())
                    .expect("run_exclusive")
            })
        })
        .collect();
    let ran: Vec<Option<u64>> = runs.into_iter().map(|t| t.join().expect("thread")).collect();
    assert_eq!(ran.iter().flatten().count(), 1, "ran once: {ran:?}");
    assert_eq!(
        b.run_exclusive(&job, limits, |_| ()).expect("run_exclusive"),
        None,
        "blocked for at_least"
    );
}
