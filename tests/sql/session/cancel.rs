//! Session mode: a client's tasks waiting for one name stand in line
//! behind its one server-side wait. A queued task that leaves (dropped, or
//! its own wait bound passed) just leaves; the server-side wait passes on
//! to the next task; the last task leaving ends it on the server; a grant
//! goes to a live task, and the tasks of the granted owner re-enter its
//! hold. After any of it, nothing is left waiting or held on the server.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use lockkit::{LockClient, LockError, LockGuard};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};

use super::{BOUND, Scene, servers};

/// A wait bound nobody reaches in these tests.
const LONG: Duration = Duration::from_secs(120);

type Locking = JoinHandle<Result<LockGuard, LockError>>;

/// A `lock` of `client` for `name`, polled once here before it goes to a
/// task of its own: a `lock` whose client already has tasks in the name's
/// line joins the line in that first poll, so tasks started one after
/// another stand in that order.
async fn queued_lock(client: &LockClient, name: &str, wait: Duration) -> Locking {
    let (client, name) = (client.clone(), name.to_owned());
    let mut lock: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(async move {
        let opts = client.options().wait(wait);
        client.lock_with(&name, &opts).await
    });
    let first = std::future::poll_fn(|cx| Poll::Ready(lock.as_mut().poll(cx).is_pending())).await;
    assert!(first, "the name is held: the lock waits");
    tokio::spawn(lock)
}

async fn aborted(task: Locking) {
    task.abort();
    assert!(task.await.expect_err("aborted").is_cancelled());
}

async fn granted(what: &str, task: Locking) -> LockGuard {
    timeout(BOUND, task)
        .await
        .unwrap_or_else(|_| panic!("{what}: not granted within {BOUND:?}"))
        .expect("task")
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

/// One client's five waiters: dropping a queued one and the one whose turn
/// is next keeps the one server-side wait (the same connection) for the
/// others, and the grant goes to the first live one; the last to leave
/// ends the wait on the server, and the released name is then free, not
/// granted to a forgotten waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wait_passes_on_and_ends_with_the_last() {
    for (dialect, url) in servers() {
        let (mut scene, held) = Scene::new(dialect, &url, "session_pass_on").await;
        let name = scene.name.clone();
        let b = scene.client().await;
        let owners: Vec<LockClient> = (0..5).map(|_| b.with_new_owner()).collect();
        let mut tasks = vec![queued_lock(&owners[0], &name, LONG).await];
        scene.until_waits("the first waits on the server", 1).await;
        let wait = scene.wait_ids().await;
        for owner in &owners[1..] {
            tasks.push(queued_lock(owner, &name, LONG).await);
        }
        let mut tasks: Vec<Option<Locking>> = tasks.into_iter().map(Some).collect();
        aborted(tasks[2].take().unwrap()).await;
        aborted(tasks[0].take().unwrap()).await;
        assert_eq!(
            scene.wait_ids().await,
            wait,
            "{dialect:?}: the client's one server-side wait goes on for the others"
        );
        held.unlock().await.expect("unlock");
        let g1 = granted("the first live waiter", tasks[1].take().unwrap()).await;
        assert_eq!(
            g1.owner(),
            owners[1].owner(),
            "{dialect:?}: the grant went to the first live waiter"
        );
        scene.until_waits("the next waits on the server", 1).await;
        aborted(tasks[3].take().unwrap()).await;
        g1.unlock().await.expect("unlock");
        let g4 = granted("the last waiter", tasks[4].take().unwrap()).await;
        assert_eq!(g4.owner(), owners[4].owner());
        scene.until_waits("nobody waits", 0).await;
        g4.unlock().await.expect("unlock");

        // Everybody leaves: the server-side wait is ended, and the name
        // released is free.
        let held = scene.holder.lock(&name).await.expect("lock");
        let mut tasks = vec![queued_lock(&owners[0], &name, LONG).await];
        scene.until_waits("the first waits on the server", 1).await;
        for owner in &owners[1..3] {
            tasks.push(queued_lock(owner, &name, LONG).await);
        }
        for task in tasks {
            aborted(task).await;
        }
        scene.until_waits("the wait ends with its last waiter", 0).await;
        held.unlock().await.expect("unlock");
        assert_eq!(
            scene.admin.holder_of(&name).await,
            None,
            "{dialect:?}: not granted to a waiter that left"
        );
        let g = b.try_lock(&name).await.expect("try_lock").expect("free");
        g.unlock().await.expect("unlock");
        drop((b, owners));
        scene.finish().await;
    }
}

/// Each queued task keeps its own wait bound: a short one times out while
/// the others wait on behind the same server-side wait, and are served in
/// their order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_wait_bounds_are_each_tasks_own() {
    for (dialect, url) in servers() {
        let (mut scene, held) = Scene::new(dialect, &url, "session_own_bounds").await;
        let name = scene.name.clone();
        let b = scene.client().await;
        let (o1, o2, o3) = (b.with_new_owner(), b.with_new_owner(), b.with_new_owner());
        let t1 = queued_lock(&o1, &name, LONG).await;
        scene.until_waits("the first waits on the server", 1).await;
        let wait = scene.wait_ids().await;
        let short = Duration::from_millis(300);
        let asked = Instant::now();
        let t2 = queued_lock(&o2, &name, short).await;
        let t3 = queued_lock(&o3, &name, LONG).await;
        let e = timeout(BOUND, t2)
            .await
            .expect("the short wait ends")
            .expect("task")
            .expect_err("timed out");
        assert!(matches!(e, LockError::WaitTimeout { .. }), "{dialect:?}: {e:?}");
        assert!(asked.elapsed() >= short, "{dialect:?}: not before its bound");
        assert_eq!(scene.wait_ids().await, wait, "{dialect:?}: the others' wait goes on");
        held.unlock().await.expect("unlock");
        let g1 = granted("the first", t1).await;
        assert_eq!(g1.owner(), o1.owner());
        g1.unlock().await.expect("unlock");
        let g3 = granted("the third", t3).await;
        assert_eq!(g3.owner(), o3.owner());
        g3.unlock().await.expect("unlock");
        drop(b);
        scene.finish().await;
    }
}

/// When an owner is granted the name, its other tasks in line re-enter its
/// hold at once (same token, hold count 2), ahead of another owner queued
/// before them, who stays a different holder and gets the name after both
/// released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owners_queued_tasks_reenter_its_hold() {
    for (dialect, url) in servers() {
        let (mut scene, held) = Scene::new(dialect, &url, "session_owner_reenters").await;
        let name = scene.name.clone();
        let b = scene.client().await;
        let other = b.with_new_owner();
        let first = queued_lock(&b, &name, LONG).await;
        scene.until_waits("the first waits on the server", 1).await;
        let theirs = queued_lock(&other, &name, LONG).await;
        let second = queued_lock(&b, &name, LONG).await;
        held.unlock().await.expect("unlock");
        let g1 = granted("the owner's first task", first).await;
        let g2 = granted("the owner's second task", second).await;
        assert_eq!(g1.fencing_token(), g2.fencing_token(), "{dialect:?}: one hold");
        let info = b.inspect(&name).await.expect("inspect").expect("held");
        assert_eq!((info.owner.as_str(), info.hold_count), (b.owner(), 2), "{dialect:?}");
        let token = g1.fencing_token();
        g1.unlock().await.expect("unlock");
        assert!(
            !theirs.is_finished(),
            "{dialect:?}: another owner does not share the hold"
        );
        g2.unlock().await.expect("unlock");
        let g3 = granted("the other owner", theirs).await;
        assert_eq!(g3.owner(), other.owner());
        assert!(g3.fencing_token() > token);
        g3.unlock().await.expect("unlock");
        drop((b, other));
        scene.finish().await;
    }
}

/// Churn: 60 owners of one client take the name with short wait bounds, or
/// drop their `lock` after a few milliseconds, while another client takes
/// it over and over; one holder at a time throughout, and when it is over
/// nothing waits or is held on the server (a grant nobody took was given
/// back) and the name is free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn churn_leaves_nothing_behind() {
    for (dialect, url) in servers() {
        let (mut scene, held) = Scene::new(dialect, &url, "session_churn").await;
        held.unlock().await.expect("unlock");
        let name = scene.name.clone();
        let (a, b) = (scene.holder.clone(), scene.client().await);
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let served = Arc::new(AtomicUsize::new(0));
        let section = {
            let (inside, most, served) = (inside.clone(), most.clone(), served.clone());
            move |g: LockGuard| {
                let (inside, most, served) = (inside.clone(), most.clone(), served.clone());
                async move {
                    most.fetch_max(inside.fetch_add(1, Ordering::AcqRel) + 1, Ordering::AcqRel);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::AcqRel);
                    served.fetch_add(1, Ordering::AcqRel);
                    g.unlock().await.expect("unlock");
                }
            }
        };
        let mut tasks = Vec::new();
        {
            let (a, name, section) = (a.clone(), name.clone(), section.clone());
            tasks.push(tokio::spawn(async move {
                let opts = a.options().wait(LONG);
                for _ in 0..40 {
                    section(a.lock_with(&name, &opts).await.expect("lock")).await;
                }
            }));
        }
        for i in 0..60u64 {
            let (owner, name, section) = (b.with_new_owner(), name.clone(), section.clone());
            tasks.push(tokio::spawn(async move {
                for round in 0..5u64 {
                    let ms = Duration::from_millis(1 + (i * 7 + round * 13) % 30);
                    if (i + round) % 2 == 0 {
                        // Its own bound.
                        let opts = owner.options().wait(ms);
                        match owner.lock_with(&name, &opts).await {
                            Ok(g) => section(g).await,
                            Err(LockError::WaitTimeout { .. }) => {}
                            Err(e) => panic!("lock: {e}"),
                        }
                    } else if let Ok(got) = timeout(ms, owner.lock_with(&name, &owner.options().wait(LONG))).await {
                        // Dropped after `ms`, unless granted before.
                        section(got.expect("lock")).await;
                    }
                }
            }));
        }
        for t in tasks {
            timeout(LONG, t).await.expect("the churn ends").expect("task");
        }
        eprintln!(
            "{dialect:?} session churn: {} grants, at most {} holders at once",
            served.load(Ordering::Acquire),
            most.load(Ordering::Acquire)
        );
        assert_eq!(most.load(Ordering::Acquire), 1, "{dialect:?}: one holder at a time");
        scene.until_free().await;
        let g = b.try_lock(&name).await.expect("try_lock").expect("free");
        g.unlock().await.expect("unlock");
        drop((a, b));
        scene.finish().await;
    }
}
