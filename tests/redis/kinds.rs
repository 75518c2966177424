//! Semaphores and read-write locks on a private Redis server, beyond the
//! conformance kit: the watchdog renews every kind of hold in one round
//! trip per renewal, and attempts and releases of permits and read holds
//! take effect once.
#![cfg(feature = "redis")]

use crate::common::redis;

use std::time::Duration;

use lockkit::{LockGuard, LockOptions};
use lockkit_core::LockKind;
use lockkit_core::raw::{AcquireRequest, Hold, ReleaseOutcome, TryAcquire, new_attempt_id};
use redis::Server;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_renewed_in_one_round_trip() {
    let Some((server, a, b)) = redis::two_clients("every_kind_renewed_in_one_round_trip").await else {
        return;
    };
    let ttl = Duration::from_secs(1);
    let opts = LockOptions::new().ttl(ttl).auto_extend(true);
    let mut guards: Vec<LockGuard> = Vec::new();
    for i in 0..10 {
        guards.push(a.lock_with(&format!("m-{i}"), &opts).await.expect("lock"));
        let sem = a.semaphore(&format!("s-{i}"), 2).expect("semaphore");
        guards.push(sem.acquire_with(&opts).await.expect("permit"));
        let rw = a.rw_lock(&format!("rw-{i}")).expect("rw lock");
        guards.push(if i % 2 == 0 {
            rw.write_with(&opts).await.expect("write")
        } else {
            rw.read_with(&opts).await.expect("read")
        });
    }
    let before = server.command_calls();
    tokio::time::sleep(ttl * 5).await;
    let after = server.command_calls();
    for g in &guards {
        assert!(!g.is_lost(), "{} ({:?}) was lost", g.name(), g.kind());
        let holders = b.backend().holders(g.name(), g.kind()).await.expect("holders");
        let held: Vec<(&str, u64)> = holders.iter().map(|h| (h.owner.as_str(), h.token)).collect();
        assert_eq!(held, [(a.owner(), g.fencing_token())], "{} ({:?})", g.name(), g.kind());
    }
    let calls = after.get("evalsha").copied().unwrap_or(0) - before.get("evalsha").copied().unwrap_or(0);
    // About 15 renewals, each one pipeline with one call for the mutexes
    // and one for the other kinds; one extension per hold would be ~450.
    assert!(
        calls <= 50,
        "{calls} script calls to keep 30 holds of three kinds for 5 ttls: not batched"
    );
    eprintln!("30 holds of three kinds held for 5 ttls with {calls} script calls");
    for g in guards {
        assert!(g.unlock().await.expect("unlock").is_free());
    }
}

/// `owner`'s attempt `attempt` at a hold of `kind` on the name `counted`.
fn request<'a>(owner: &'a str, kind: LockKind, attempt: &'a str) -> AcquireRequest<'a> {
    AcquireRequest {
        name: "counted",
        owner,
        ttl: Duration::from_secs(30),
        attempt,
        fair: true,
        kind,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permit_and_read_attempts_count_once() {
    if !redis::available("permit_and_read_attempts_count_once") {
        return;
    }
    let server = Server::start();
    let client = lockkit::connect(&server.url()).await.expect("connect");
    let backend = client.backend();
    let owner = client.owner();
    let request = |kind, attempt| request(owner, kind, attempt);
    let lease = |t: TryAcquire| match t {
        TryAcquire::Acquired(lease) => (lease.token, lease.hold_count),
        TryAcquire::Busy { .. } => panic!("busy"),
    };
    let (first, second) = (&new_attempt_id(), &new_attempt_id());
    let permit = LockKind::Permit { permits: 2 };

    // A repeated permit attempt is the same permit; another attempt of the
    // same owner takes another one.
    let once = lease(backend.try_acquire(&request(permit, first)).await.unwrap());
    let again = lease(backend.try_acquire(&request(permit, first)).await.unwrap());
    assert_eq!(once, again, "a repeated attempt is the same permit");
    assert_eq!(once.1, 1);
    let other = lease(backend.try_acquire(&request(permit, second)).await.unwrap());
    assert!(other.0 > once.0);
    assert_eq!(backend.holders("counted", permit).await.unwrap().len(), 2);
    let hold = Hold {
        kind: permit,
        ..Hold::mutex("counted", client.owner(), once.0)
    };
    assert_eq!(
        backend.release(&hold, first).await.unwrap(),
        ReleaseOutcome::Released { remaining: 0 }
    );
    assert_eq!(backend.release(&hold, first).await.unwrap(), ReleaseOutcome::NotHeld);
    assert_eq!(backend.holders("counted", permit).await.unwrap().len(), 1);
    // The name is one lock: the read below waits for the last permit.
    let last = Hold {
        kind: permit,
        ..Hold::mutex("counted", client.owner(), other.0)
    };
    assert_eq!(
        backend.release(&last, second).await.unwrap(),
        ReleaseOutcome::Released { remaining: 0 }
    );

    // A read hold counts each attempt once, and takes each share back once.
    let read = lease(backend.try_acquire(&request(LockKind::Read, first)).await.unwrap());
    assert_eq!(read, (0, 1), "never written: token 0");
    assert_eq!(
        lease(backend.try_acquire(&request(LockKind::Read, first)).await.unwrap()),
        (0, 1)
    );
    assert_eq!(
        lease(backend.try_acquire(&request(LockKind::Read, second)).await.unwrap()),
        (0, 2)
    );
    let hold = Hold {
        kind: LockKind::Read,
        ..Hold::mutex("counted", client.owner(), 0)
    };
    for _ in 0..2 {
        assert_eq!(
            backend.release(&hold, first).await.unwrap(),
            ReleaseOutcome::Released { remaining: 1 }
        );
    }
    assert_eq!(
        backend.release(&hold, second).await.unwrap(),
        ReleaseOutcome::Released { remaining: 0 }
    );
    assert!(backend.holders("counted", LockKind::Read).await.unwrap().is_empty());
    // The mutex of the name was never touched.
    assert!(client.inspect("counted").await.unwrap().is_none());
}

/// `key` (a lock key) with `family` inserted after its hash tag: the keys
/// of a semaphore's or read-write lock's line (see the key layout).
fn family_key(key: &str, family: &str) -> String {
    let at = key.find('}').expect("a hash tag") + 1;
    format!("{}{family}{}", &key[..at], &key[at..])
}

/// A client that died while queued (its id in the line, nobody behind it)
/// holds up neither a semaphore's free permit nor a read-write lock's
/// readers for long: the change that lets it in finds nobody listening on
/// its channel and drops it, and the next client gets the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_waiters_leave_the_lines_of_every_kind() {
    if !redis::available("dead_waiters_leave_the_lines_of_every_kind") {
        return;
    }
    let server = Server::start();
    let (holder, waiter) = (
        lockkit::connect(&server.url()).await.expect("connect"),
        lockkit::connect(&server.url()).await.expect("connect"),
    );
    let opts = LockOptions::new().wait(Duration::from_secs(20));
    let dead = "0123456789abcdef";

    // A semaphore of one permit: held, with a dead client first in line.
    let sem_key = family_key(&redis::lock_key("sem"), "s");
    let permit = holder.semaphore("sem", 1).unwrap().acquire().await.expect("permit");
    server.cli(&["ZADD", &family_key(&sem_key, "q"), "1", dead]);
    let sem = waiter.semaphore("sem", 1).unwrap();
    let wait = {
        let opts = opts.clone();
        tokio::spawn(async move { sem.acquire_with(&opts).await })
    };
    let kind = LockKind::Permit { permits: 1 };
    redis::eventually("the waiter queued behind the dead one", || async {
        (holder.backend().waiting_for("sem", kind).await.unwrap() == 2).then_some(())
    })
    .await;
    permit.unlock().await.expect("unlock");
    let got = tokio::time::timeout(Duration::from_secs(15), wait)
        .await
        .expect("the permit passes the dead waiter")
        .unwrap()
        .expect("permit");
    assert_eq!(
        holder.backend().waiting_for("sem", kind).await.unwrap(),
        0,
        "the dead one was dropped"
    );
    got.unlock().await.expect("unlock");

    // A free read-write lock, a dead writer first in line: a reader waits
    // for it (no reader passes a waiting writer), then drops it.
    let rw_key = family_key(&redis::lock_key("rw"), "r");
    // (A client waiting to write stands in line as its id and `:w`.)
    server.cli(&["ZADD", &family_key(&rw_key, "q"), "1", &format!("{dead}:w")]);
    assert!(
        waiter.rw_lock("rw").unwrap().try_read().await.unwrap().is_none(),
        "a writer waits: no reader passes it"
    );
    let read = tokio::time::timeout(Duration::from_secs(15), waiter.rw_lock("rw").unwrap().read_with(&opts))
        .await
        .expect("the reader passes the dead writer once its turn passed")
        .expect("read");
    assert_eq!(holder.backend().waiting_for("rw", LockKind::Read).await.unwrap(), 0);
    read.unlock().await.expect("unlock");
}

/// Readers and writers of one name, each its own client, contending for a
/// while: a writer is never beside anybody, and every hold comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_and_writers_contending_stay_apart() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    if !redis::available("readers_and_writers_contending_stay_apart") {
        return;
    }
    let server = Server::start();
    // Readers count +1 each, a writer -1000: a writer beside anybody shows
    // as a value other than -1000 while it holds.
    let inside = Arc::new(AtomicI64::new(0));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let client = lockkit::connect(&server.url()).await.expect("connect");
        let inside = inside.clone();
        tasks.push(tokio::spawn(async move {
            let rw = client.rw_lock("contended").unwrap();
            let opts = LockOptions::new().wait(Duration::from_secs(30));
            for round in 0..15 {
                if (i + round) % 3 == 0 {
                    let g = rw.write_with(&opts).await.expect("write");
                    assert_eq!(inside.fetch_sub(1000, Ordering::SeqCst), 0, "a writer beside others");
                    tokio::task::yield_now().await;
                    inside.fetch_add(1000, Ordering::SeqCst);
                    g.unlock().await.expect("unlock");
                } else {
                    let g = rw.read_with(&opts).await.expect("read");
                    assert!(inside.fetch_add(1, Ordering::SeqCst) >= 0, "a reader beside a writer");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    g.unlock().await.expect("unlock");
                }
            }
        }));
    }
    for t in tasks {
        t.await.expect("a contender failed");
    }
    let observer = lockkit::connect(&server.url()).await.expect("connect");
    for kind in [LockKind::Read, LockKind::Write] {
        assert!(observer.backend().holders("contended", kind).await.unwrap().is_empty());
        assert_eq!(observer.backend().waiting_for("contended", kind).await.unwrap(), 0);
    }
}

/// The semaphores' acquire script as `lockkit-redis` builds it.
const KINDS_ACQUIRE_SCRIPT: &str = concat!(
    include_str!("../../lockkit-redis/src/lua/clock.lua"),
    include_str!("../../lockkit-redis/src/lua/waiter_channel.lua"),
    include_str!("../../lockkit-redis/src/lua/token.lua"),
    include_str!("../../lockkit-redis/src/lua/holds.lua"),
    include_str!("../../lockkit-redis/src/lua/guard.lua"),
    include_str!("../../lockkit-redis/src/lua/one_name.lua"),
    include_str!("../../lockkit-redis/src/lua/kinds_acquire.lua")
);

/// A Redlock permit attempt (slot `*`: the one the server assigns) by the
/// waiting client `waiter` on semaphore `name` of 3, that tells nobody;
/// the script's reply, one element per line.
fn assigned_permit(server: &Server, name: &str, waiter: &str) -> Vec<String> {
    let lock = redis::lock_key(name);
    let holds = family_key(&lock, "s");
    let attempt = format!("{:0>16}", &waiter[..1]);
    server
        .cli(&[
            "EVAL",
            KINDS_ACQUIRE_SCRIPT,
            "7",
            &holds,
            &family_key(&lock, "es"),
            &redis::counter_key(name),
            &family_key(&lock, "qs"),
            &family_key(&lock, "ts"),
            // One name, one lock: the mutex's key, the read-write lock's
            // lease ends.
            &lock,
            &family_key(&lock, "er"),
            &format!("owner-{waiter}"),
            "60000",
            &attempt,
            "",
            waiter,
            "wf",
            "",
            "",
            "",
            redis::WAITER_MARK,
            "p",
            "3",
            "*",
            "0000000000000000",
            "",
        ])
        .lines()
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Redlock's permits: each node assigns a waiting client the r-th free
/// slot, r its place among the clients the line lets in, so that clients
/// let in together take different slots, and every node whose line and
/// holds agree assigns a client the same slot whatever order the clients'
/// attempts reach it in. (A slot chosen by the client, spread by its
/// attempt id, collided in one attempt of four in a crowd of 16, and the
/// colliding attempts split the nodes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_let_in_together_are_assigned_different_slots() {
    if !redis::available("permits_let_in_together_are_assigned_different_slots") {
        return;
    }
    let server = Server::start();
    let clients = [
        "a0a0a0a0a0a0a0a0",
        "b0b0b0b0b0b0b0b0",
        "c0c0c0c0c0c0c0c0",
        "d0d0d0d0d0d0d0d0",
    ];
    for (name, order) in [("slots-1", [1, 2, 0]), ("slots-2", [0, 2, 1]), ("slots-3", [2, 0, 1])] {
        let line = family_key(&redis::lock_key(name), "qs");
        for (place, client) in clients.iter().enumerate() {
            server.cli(&["ZADD", &line, &(place + 1).to_string(), client]);
        }
        for i in order {
            let reply = assigned_permit(&server, name, clients[i]);
            assert_eq!(
                reply.first().map(String::as_str),
                Some("1"),
                "{} holds: {reply:?}",
                clients[i]
            );
            assert_eq!(
                reply.get(5).map(String::as_str),
                Some(i.to_string().as_str()),
                "{} (place {i} in line) takes slot {i} in order {order:?}: {reply:?}",
                clients[i]
            );
        }
        // The fourth is not let in: every permit is taken.
        let reply = assigned_permit(&server, name, clients[3]);
        assert_eq!(reply.first().map(String::as_str), Some("0"), "{reply:?}");
    }
}
