//! No herd effect on ZooKeeper: each waiter watches only its predecessor, so
//! one release wakes exactly one waiter, and the lock is handed on in queue
//! order. Wake-ups are counted by each backend ([`ZkStats::wakeups`]: watch
//! events delivered to waiting acquisitions).
#![cfg(feature = "zookeeper")]

use std::time::{Duration, Instant};

use lockkit::raw::LockBackend;
use lockkit::{LockClient, LockError, LockGuard, LockOptions};
use lockkit_zk::ZkBackend;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use crate::common::unique;

const WAITERS: usize = 16;
/// Far above any healthy latency, far below a stuck lock.
const BOUND: Duration = Duration::from_secs(15);

fn server_url() -> Option<String> {
    lockkit_core::testkit::server_url("LOCKKIT_ZK_URL")
}

/// Polls `check` until it holds, for at most [`BOUND`].
async fn eventually<F: AsyncFnMut() -> bool>(what: &str, mut check: F) {
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < BOUND, "not within {BOUND:?}: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

type Waiting = JoinHandle<(Result<LockGuard, LockError>, Instant)>;

struct Waiter {
    backend: ZkBackend,
    task: Waiting,
}

/// A waiter with its own session, queued behind the `queued` contenders
/// already there: returns once its node is in line and its watch is set.
async fn queue_waiter(url: &str, name: &str, probe: &ZkBackend, queued: usize) -> Waiter {
    let backend = ZkBackend::from_url(url).await.expect("connect");
    let client = LockClient::new(backend.clone(), LockOptions::new().wait(Duration::from_secs(300))).unwrap();
    let n = name.to_owned();
    let task = tokio::spawn(async move {
        let r = client.lock(&n).await;
        (r, Instant::now())
    });
    eventually("the waiter queues and watches its predecessor", async || {
        backend.stats().watches == 1 && probe.contenders(name).await.unwrap() == queued + 1
    })
    .await;
    Waiter { backend, task }
}

fn wakeups(waiters: &[Waiter]) -> Vec<u64> {
    waiters.iter().map(|w| w.backend.stats().wakeups).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_release_wakes_one_waiter_in_queue_order() {
    let Some(url) = server_url() else { return };
    let name = unique("herd");
    let holder_backend = ZkBackend::from_url(&url).await.expect("connect");
    let holder = LockClient::new(holder_backend.clone(), LockOptions::new()).unwrap();
    let mut held = holder.lock(&name).await.expect("lock a free name");
    let mut waiters = Vec::new();
    for i in 0..WAITERS {
        waiters.push(queue_waiter(&url, &name, &holder_backend, i + 1).await);
    }
    assert_eq!(wakeups(&waiters), [0; WAITERS], "queueing woke nobody");

    let mut handoffs = Vec::new();
    let mut last_token = held.fencing_token();
    for k in 0..WAITERS {
        let released_at = Instant::now();
        assert!(held.unlock().await.expect("unlock").is_free());
        let (guard, acquired_at) = timeout(BOUND, &mut waiters[k].task)
            .await
            .unwrap_or_else(|_| panic!("waiter {k} did not get the lock after the release"))
            .expect("waiter task");
        let guard = guard.unwrap_or_else(|e| panic!("waiter {k}: {e}"));
        handoffs.push(acquired_at - released_at);
        assert!(guard.fencing_token() > last_token, "tokens grow along the queue");
        last_token = guard.fencing_token();
        for (j, later) in waiters.iter().enumerate().skip(k + 1) {
            assert!(
                !later.task.is_finished(),
                "waiter {j} got the lock before waiter {k}: not FIFO"
            );
        }
        let woken = wakeups(&waiters);
        assert!(
            woken[..=k].iter().all(|w| *w == 1) && woken[k + 1..].iter().all(|w| *w == 0),
            "after {} releases exactly the first {} waiters woke, once each: {woken:?}",
            k + 1,
            k + 1
        );
        held = guard;
    }
    held.unlock().await.expect("unlock");
    assert_eq!(wakeups(&waiters), [1; WAITERS], "one wake-up per waiter in all");
    assert_eq!(
        holder_backend.contenders(&name).await.unwrap(),
        0,
        "nothing left in line"
    );
    handoffs.sort();
    eprintln!(
        "{WAITERS} hand-offs: median {:?}, max {:?} (release call to the next lock returning)",
        handoffs[WAITERS / 2],
        handoffs[WAITERS - 1]
    );
}

/// A waiter that gives up wakes only the one behind it, which looks again
/// and finds a new predecessor rather than the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_passes_its_place_on() {
    let Some(url) = server_url() else { return };
    let name = unique("herd_give_up");
    let holder_backend = ZkBackend::from_url(&url).await.expect("connect");
    let holder = LockClient::new(holder_backend.clone(), LockOptions::new()).unwrap();
    let held = holder.lock(&name).await.expect("lock a free name");
    let first = queue_waiter(&url, &name, &holder_backend, 1).await;
    let quitter = queue_waiter(&url, &name, &holder_backend, 2).await;
    let last = queue_waiter(&url, &name, &holder_backend, 3).await;

    // Dropping the waiting future deletes its node in the background.
    quitter.task.abort();
    eventually("the waiter behind the quitter is woken", async || {
        last.backend.stats().wakeups == 1
    })
    .await;
    eventually("it watches its new predecessor", async || {
        last.backend.stats().watches == 2 && holder_backend.contenders(&name).await.unwrap() == 3
    })
    .await;
    assert_eq!(
        first.backend.stats().wakeups,
        0,
        "the quitter's predecessor was not woken"
    );
    assert_eq!(holder_backend.stats().wakeups, 0);
    assert!(
        !last.task.is_finished(),
        "the lock is still held: waking is not acquiring"
    );

    held.unlock().await.expect("unlock");
    let (g1, _) = timeout(BOUND, first.task).await.expect("first acquires").unwrap();
    let g1 = g1.expect("first");
    assert_eq!(
        last.backend.stats().wakeups,
        1,
        "the release woke only the first waiter"
    );
    assert!(!last.task.is_finished());
    g1.unlock().await.expect("unlock");
    let (g3, _) = timeout(BOUND, last.task).await.expect("last acquires").unwrap();
    let g3 = g3.expect("last");
    assert_eq!(last.backend.stats().wakeups, 2);
    g3.unlock().await.expect("unlock");
    assert_eq!(holder_backend.contenders(&name).await.unwrap(), 0);
}

/// What one contender of the per-kind herd asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Permit,
    Read,
    Write,
}

/// The permits of the herd's semaphore.
const PERMITS: usize = 3;

impl Ask {
    fn kind(self) -> lockkit::LockKind {
        match self {
            Ask::Permit => lockkit::LockKind::Permit {
                permits: PERMITS as u32,
            },
            Ask::Read => lockkit::LockKind::Read,
            Ask::Write => lockkit::LockKind::Write,
        }
    }

    async fn take(self, client: &LockClient, name: &str) -> Result<LockGuard, LockError> {
        let opts = client.options().wait(Duration::from_secs(300));
        match self {
            Ask::Permit => client.semaphore(name, PERMITS as u32)?.acquire_with(&opts).await,
            Ask::Read => client.rw_lock(name)?.read_with(&opts).await,
            Ask::Write => client.rw_lock(name)?.write_with(&opts).await,
        }
    }
}

/// Whether the contender at `i` of a line of `asks` holds: the first
/// [`PERMITS`] of a semaphore, a writer first, a reader with no writer
/// before it.
fn granted(line: &[Ask], i: usize) -> bool {
    match line[i] {
        Ask::Permit => i < PERMITS,
        Ask::Write => i == 0,
        Ask::Read => !line[..i].contains(&Ask::Write),
    }
}

/// What the waiters' backends counted, summed.
#[derive(Debug, Default, Clone, Copy)]
struct Counted {
    wakeups: u64,
    listings: u64,
    reads: u64,
}

fn counted(backends: &[&ZkBackend]) -> Counted {
    backends.iter().fold(Counted::default(), |c, b| {
        let s = b.stats();
        Counted {
            wakeups: c.wakeups + s.wakeups,
            listings: c.listings + s.listings,
            reads: c.reads + s.reads,
        }
    })
}

/// The herd of a semaphore or a read-write lock: `gate` holds taken first,
/// then one waiter per entry of `waiters`, each with its own session,
/// queued one after the other. Holds are given back oldest first, one at a
/// time; after each, exactly the waiters the line admits get their hold,
/// nobody else. A release wakes only the waiters it admits and at most one
/// more (the waiter that moves up behind a newly admitted one), so watch
/// events stay O(1) per release whatever the length of the line.
async fn herd_of(case: &str, gate: &[Ask], waiters: &[Ask]) {
    let Some(url) = server_url() else { return };
    let name = unique(case);
    let holder_backend = ZkBackend::from_url(&url).await.expect("connect");
    let holder = LockClient::new(holder_backend.clone(), LockOptions::new()).unwrap();
    let kind = gate[0].kind();
    let mut line: Vec<Ask> = gate.to_vec();
    // (index in `tasks` or None for a gate hold, guard), oldest first.
    let mut held: std::collections::VecDeque<(Option<usize>, LockGuard)> = Default::default();
    for ask in gate {
        held.push_back((None, ask.take(&holder, &name).await.expect("a gate hold")));
    }
    let mut backends = Vec::new();
    let mut tasks: Vec<Option<JoinHandle<Result<LockGuard, LockError>>>> = Vec::new();
    for (i, ask) in waiters.iter().enumerate() {
        let backend = ZkBackend::from_url(&url).await.expect("connect");
        let client = LockClient::new(backend.clone(), LockOptions::new()).unwrap();
        let (n, ask) = (name.clone(), *ask);
        tasks.push(Some(tokio::spawn(async move { ask.take(&client, &n).await })));
        eventually("the waiter queues and watches", async || {
            backend.stats().watches >= 1 && holder_backend.waiting_for(&name, kind).await.unwrap() == i + 1
        })
        .await;
        backends.push(backend);
    }
    // Which entry of `line` is which waiter (`None`: a gate hold).
    let mut who: Vec<Option<usize>> = vec![None; gate.len()];
    who.extend((0..waiters.len()).map(Some));
    line.extend_from_slice(waiters);
    let refs: Vec<&ZkBackend> = backends.iter().collect();
    let queued = counted(&refs);
    let (mut releases, mut grants, mut most) = (0u64, 0u64, 0u64);
    let mut granted_already: Vec<bool> = (0..line.len()).map(|i| i < gate.len()).collect();
    while let Some((from, guard)) = held.pop_front() {
        let before = counted(&refs);
        guard.unlock().await.expect("unlock");
        releases += 1;
        let at = who
            .iter()
            .position(|w| *w == from)
            .expect("the released hold is in line");
        line.remove(at);
        who.remove(at);
        granted_already.remove(at);
        let admitted: Vec<usize> = (0..line.len())
            .filter(|&i| granted(&line, i) && !granted_already[i])
            .collect();
        for &i in &admitted {
            let w = who[i].expect("a waiter");
            let task = tasks[w].take().expect("not yet granted");
            let guard = timeout(BOUND, task)
                .await
                .unwrap_or_else(|_| panic!("{case}: waiter {w} ({:?}) was not admitted", line[i]))
                .expect("waiter task")
                .unwrap_or_else(|e| panic!("{case}: waiter {w}: {e}"));
            granted_already[i] = true;
            held.push_back((Some(w), guard));
            grants += 1;
        }
        for (w, task) in tasks.iter().enumerate() {
            if let Some(task) = task {
                assert!(!task.is_finished(), "{case}: waiter {w} got its hold out of turn");
            }
        }
        let woke = counted(&refs).wakeups - before.wakeups;
        most = most.max(woke);
    }
    let total = counted(&refs);
    let woken = total.wakeups - queued.wakeups;
    eprintln!(
        "{case}: {} waiters, {releases} releases: {woken} wake-ups ({:.2} per release, at most {most} counted \
         during one), {:.2} listings and {:.1} node reads per grant; while queueing {} wake-ups",
        waiters.len(),
        woken as f64 / releases as f64,
        (total.listings - queued.listings) as f64 / grants as f64,
        (total.reads - queued.reads) as f64 / grants as f64,
        queued.wakeups
    );
    assert_eq!(grants as usize, waiters.len(), "every waiter admitted");
    assert!(
        woken <= grants + releases,
        "{case}: {woken} wake-ups for {releases} releases admitting {grants}: a herd"
    );
    assert_eq!(
        holder.backend().waiting_for(&name, kind).await.unwrap(),
        0,
        "nobody left in line"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn semaphore_releases_wake_only_whom_they_admit() {
    herd_of("herd_semaphore", &[Ask::Permit; PERMITS], &[Ask::Permit; 16]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rwlock_releases_wake_only_whom_they_admit() {
    use Ask::{Read as R, Write as W};
    let waiters = [R, R, R, W, R, R, W, W, R, R, R, R, W, R, R, R];
    herd_of("herd_rwlock", &[W], &waiters).await;
}
