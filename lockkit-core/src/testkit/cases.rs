//! The conformance cases, one per contract point (DESIGN.md, "The contract").
//!
//! Each case panics with a message naming what broke. Cases wait for events
//! within [`Kit::bound`]; the only sleeps are the ones that let a lease run
//! for a multiple of its ttl.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::time::timeout;

use super::history::{Grant, check_history};
use super::kit::{Kit, error_chain};
use crate::backend::{AcquireRequest, ExtendOutcome, Hold, LeaseKind, ReleaseOutcome, TryAcquire};
use crate::name::new_attempt_id;
use crate::{LockClient, LockError, LockGuard};

pub use super::fairness::{dead_waiter_skipped, fifo_order, releaser_does_not_overtake, unfair_still_correct};

fn ttl_leases(client: &LockClient) -> bool {
    client.capabilities().leases == LeaseKind::Ttl
}

pub(super) async fn holder(client: &LockClient, name: &str) -> Option<(String, u32, u64)> {
    client
        .inspect(name)
        .await
        .unwrap_or_else(|e| panic!("inspect {name:?}: {}", error_chain(&e)))
        .map(|i| (i.owner, i.hold_count, i.token))
}

pub(super) async fn must_lock(client: &LockClient, name: &str, opts: &crate::LockOptions) -> LockGuard {
    client
        .lock_with(name, opts)
        .await
        .unwrap_or_else(|e| panic!("lock {name:?} should succeed: {}", error_chain(&e)))
}

pub(super) async fn must_unlock(guard: LockGuard) -> u32 {
    let name = guard.name().to_owned();
    guard
        .unlock()
        .await
        .unwrap_or_else(|e| panic!("unlock {name:?} should succeed: {}", error_chain(&e)))
        .remaining_holds
}

async fn is_busy(client: &LockClient, name: &str) -> bool {
    match client.try_lock(name).await {
        Ok(None) => true,
        Ok(Some(g)) => {
            must_unlock(g).await;
            false
        }
        Err(e) => panic!("try_lock {name:?}: {}", error_chain(&e)),
    }
}

/// Contract point 1: While a lease is valid no other owner holds the name; of many
/// concurrent contenders exactly one wins.
pub async fn mutual_exclusion(kit: &Kit) {
    let name = kit.name("mutual_exclusion");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    assert_eq!(ga.hold_count(), 1);
    assert!(is_busy(&b, &name).await, "another owner acquired a held lock");
    let err = b
        .lock_with(&name, &kit.long(&b).wait(Duration::from_millis(100)))
        .await
        .expect_err("lock of a held name must time out");
    assert!(
        matches!(err, LockError::WaitTimeout { .. }),
        "expected WaitTimeout, got {err:?}"
    );
    assert_eq!(
        holder(&b, &name).await,
        Some((a.owner().to_owned(), 1, ga.fencing_token()))
    );
    assert_eq!(must_unlock(ga).await, 0);
    assert_eq!(
        holder(&b, &name).await,
        None,
        "the name must be free after the last release"
    );

    let race = kit.name("mutual_exclusion_race");
    let clients = join_all((0..8).map(|_| kit.client())).await;
    let opts = kit.long(&a);
    let results = join_all(clients.iter().map(|c| c.try_lock_with(&race, &opts))).await;
    let mut winners = Vec::new();
    for r in results {
        if let Some(g) = r.unwrap_or_else(|e| panic!("try_lock in a race: {}", error_chain(&e))) {
            winners.push(g);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one of 8 concurrent contenders must win");
    for g in winners {
        must_unlock(g).await;
    }
}

/// Contract point 2: The same owner re-enters: the count grows, the token stays; a second
/// client configured with the same owner id shares the hold; the name is
/// free only when the count is back at zero.
pub async fn reentrancy(kit: &Kit) {
    let name = kit.name("reentrancy");
    let (a, b) = (kit.client().await, kit.client().await);
    let twin = kit
        .client()
        .await
        .with_owner(a.owner())
        .expect("a client's owner id is a valid owner");
    let g1 = must_lock(&a, &name, &kit.long(&a)).await;
    let g2 = must_lock(&a, &name, &kit.long(&a)).await;
    assert_eq!((g1.hold_count(), g2.hold_count()), (1, 2));
    assert_eq!(
        g2.fencing_token(),
        g1.fencing_token(),
        "re-entry must not change the token"
    );
    let g3 = twin
        .try_lock_with(&name, &kit.long(&twin))
        .await
        .expect("try_lock")
        .expect("a client with the same owner id re-enters");
    assert_eq!(g3.hold_count(), 3);
    assert_eq!(g3.fencing_token(), g1.fencing_token());
    let other_owner = kit.long(&b).owner("somebody-else");
    assert!(b.try_lock_with(&name, &other_owner).await.expect("try_lock").is_none());
    assert_eq!(
        holder(&b, &name).await,
        Some((a.owner().to_owned(), 3, g1.fencing_token()))
    );
    let g1_token = g1.fencing_token();
    assert_eq!(must_unlock(g3).await, 2);
    assert_eq!(must_unlock(g1).await, 1);
    assert!(
        is_busy(&b, &name).await,
        "the name must stay held while the count is above zero"
    );
    assert_eq!(must_unlock(g2).await, 0);
    let gb = b
        .try_lock_with(&name, &kit.long(&b))
        .await
        .expect("try_lock")
        .expect("free at zero");
    assert!(gb.fencing_token() > g1_token, "a new hold must get a greater token");
    must_unlock(gb).await;
}

/// Contract point 3: `try_lock` answers at once, without waiting for the holder.
pub async fn try_lock_never_waits(kit: &Kit) {
    let name = kit.name("try_lock_never_waits");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    // The holder's lease is 60 s, above the bound: a try_lock that waited fails here.
    let r = timeout(kit.bound, b.try_lock(&name)).await;
    assert!(
        matches!(r, Ok(Ok(None))),
        "try_lock on a held name must return Ok(None) at once, got {r:?}"
    );
    let free = kit.name("try_lock_free");
    let g = timeout(kit.bound, b.try_lock(&free))
        .await
        .expect("try_lock on a free name returns at once")
        .expect("no error")
        .expect("a free name is acquired");
    must_unlock(g).await;
    must_unlock(ga).await;
}

/// Contract point 4: `lock` waits up to its bound and fails with `WaitTimeout`, not
/// earlier; a release during the wait hands the lock over, also to a waiter
/// without a bound.
pub async fn bounded_wait(kit: &Kit) {
    let name = kit.name("bounded_wait");
    let (a, b, c) = (kit.client().await, kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    let wait = Duration::from_millis(300);
    let started = Instant::now();
    let err = b
        .lock_with(&name, &kit.long(&b).wait(wait))
        .await
        .expect_err("must time out");
    assert!(
        matches!(err, LockError::WaitTimeout { .. }),
        "expected WaitTimeout, got {err:?}"
    );
    assert!(started.elapsed() >= wait, "gave up before the wait bound");
    assert!(err.is_retryable());
    assert_eq!(holder(&b, &name).await.map(|h| h.0), Some(a.owner().to_owned()));

    let waiter = spawn_lock(&b, &name, kit.long(&b));
    tokio::task::yield_now().await;
    let token = ga.fencing_token();
    must_unlock(ga).await;
    let gb = await_waiter(kit, waiter).await;
    assert!(gb.fencing_token() > token);

    let forever = spawn_lock(&c, &name, kit.long(&c).wait_forever());
    tokio::task::yield_now().await;
    let token = gb.fencing_token();
    must_unlock(gb).await;
    let gc = await_waiter(kit, forever).await;
    assert!(gc.fencing_token() > token);
    must_unlock(gc).await;
}

pub(super) fn spawn_lock(
    client: &LockClient,
    name: &str,
    opts: crate::LockOptions,
) -> tokio::task::JoinHandle<Result<LockGuard, LockError>> {
    let (client, name) = (client.clone(), name.to_owned());
    tokio::spawn(async move { client.lock_with(&name, &opts).await })
}

async fn await_waiter(kit: &Kit, waiter: tokio::task::JoinHandle<Result<LockGuard, LockError>>) -> LockGuard {
    timeout(kit.bound, waiter)
        .await
        .expect("the waiter must get the lock promptly after the release")
        .expect("waiter task panicked")
        .unwrap_or_else(|e| panic!("waiter: {}", error_chain(&e)))
}

/// Contract point 5: Dropping a `lock` future at any point — while waiting, or while an
/// attempt is on the wire — leaves no hold and no queue entry: the next
/// waiter is not delayed.
pub async fn cancellation_safety(kit: &Kit) {
    let name = kit.name("cancellation_safety");
    let (a, b, c) = (kit.client().await, kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    for i in 0..12u64 {
        let give_up = Duration::from_millis(i * 7 % 40);
        match timeout(give_up, b.lock_with(&name, &kit.long(&b))).await {
            Err(_) => {}
            Ok(r) => panic!("a lock of a held name must still be waiting, got {r:?}"),
        }
    }
    let opts = kit.long(&b);
    tokio::select! {
        _ = tokio::time::sleep(Duration::from_millis(20)) => {}
        r = b.lock_with(&name, &opts) => panic!("a lock of a held name must still be waiting, got {r:?}"),
    }
    assert_eq!(
        holder(&c, &name).await.map(|h| (h.0, h.1)),
        Some((a.owner().to_owned(), 1))
    );
    let waiter = spawn_lock(&c, &name, kit.long(&c));
    tokio::task::yield_now().await;
    must_unlock(ga).await;
    let gc = await_waiter(kit, waiter).await;
    must_unlock(gc).await;

    // Now cancel acquisitions of a free name at many points in flight. A hold
    // left behind would block `c` for its 60 s lease, past the bound.
    let free = kit.name("cancellation_safety_inflight");
    for i in 0..20u64 {
        let give_up = Duration::from_micros(i * i * 25);
        match timeout(give_up, b.lock_with(&free, &kit.long(&b))).await {
            Ok(Ok(g)) => {
                must_unlock(g).await;
            }
            Ok(Err(e)) => panic!("lock of a free name failed: {}", error_chain(&e)),
            Err(_) => {}
        }
        let g = timeout(kit.bound, c.lock_with(&free, &kit.long(&c)))
            .await
            .unwrap_or_else(|_| panic!("a cancelled acquisition (after {give_up:?}) left the name held"))
            .unwrap_or_else(|e| panic!("lock after a cancelled acquisition: {}", error_chain(&e)));
        must_unlock(g).await;
    }
    assert_eq!(holder(&c, &free).await, None);
}

/// Contract point 6: Only the holder releases or extends: a wrong owner or a wrong token
/// changes nothing and gets `NotHeld`; a guard whose lease ran out cannot
/// release the next owner's hold.
pub async fn release_by_non_owner(kit: &Kit) {
    let name = kit.name("release_by_non_owner");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.long(&a)).await;
    let token = ga.fencing_token();
    let wrong = [
        Hold {
            name: name.clone(),
            owner: b.owner().to_owned(),
            token,
        },
        Hold {
            name: name.clone(),
            owner: a.owner().to_owned(),
            token: token + 1,
        },
        Hold {
            name: name.clone(),
            owner: a.owner().to_owned(),
            token: token.wrapping_sub(1),
        },
    ];
    for hold in &wrong {
        let r = b.backend().release(hold, &new_attempt_id()).await.expect("release");
        assert_eq!(r, ReleaseOutcome::NotHeld, "release by {hold:?} must be refused");
        let r = b.backend().extend(hold, Duration::from_secs(60)).await.expect("extend");
        assert_eq!(r, ExtendOutcome::NotHeld, "extend by {hold:?} must be refused");
    }
    assert_eq!(holder(&b, &name).await, Some((a.owner().to_owned(), 1, token)));
    must_unlock(ga).await;
    let never = Hold {
        name: kit.name("never_held"),
        owner: a.owner().to_owned(),
        token: 1,
    };
    assert_eq!(
        a.backend().release(&never, &new_attempt_id()).await.expect("release"),
        ReleaseOutcome::NotHeld
    );

    if !ttl_leases(&a) {
        eprintln!(
            "{}: session leases; expired-guard release is covered by the backend's session tests",
            kit.label()
        );
        return;
    }
    let stale = must_lock(&a, &name, &kit.short(&a)).await;
    timeout(kit.bound, stale.lost())
        .await
        .expect("a lease without auto-extend must be lost after its ttl");
    let gb = must_lock(&b, &name, &kit.long(&b)).await;
    let err = stale.unlock().await.expect_err("a stale guard must not release");
    assert!(
        matches!(err, LockError::NotHeld { .. }),
        "expected NotHeld, got {err:?}"
    );
    assert_eq!(
        holder(&a, &name).await,
        Some((b.owner().to_owned(), 1, gb.fencing_token()))
    );
    must_unlock(gb).await;
}

/// Contract point 13: attempts are idempotent. The same acquisition attempt
/// sent twice (a retry after a lost reply, a command a client library
/// re-sent) is granted once: one share of the hold, the same token; a
/// release sent twice takes one share back, never two; a repeated first
/// acquisition does not turn into a re-entry.
pub async fn idempotent_attempts(kit: &Kit) {
    let name = kit.name("idempotent_attempts");
    let a = kit.client().await;
    if !a.capabilities().idempotent_attempts {
        eprintln!(
            "{}: the backend does not declare idempotent attempts (Capabilities::idempotent_attempts): a retried acquisition may count as a re-entry",
            kit.label()
        );
        return;
    }
    let backend = a.backend();
    let ttl = kit.ttl * 20;
    let (first, second) = (new_attempt_id(), new_attempt_id());
    let req = |attempt| AcquireRequest {
        name: &name,
        owner: a.owner(),
        ttl,
        attempt,
        fair: true,
    };
    let grant = |r: Result<TryAcquire, LockError>, what: &str| match r {
        Ok(TryAcquire::Acquired(lease)) => (lease.token, lease.hold_count),
        Ok(TryAcquire::Busy { .. }) => panic!("{what}: busy, but nobody else holds the name"),
        Err(e) => panic!("{what}: {}", error_chain(&e)),
    };
    let (token, count) = grant(backend.try_acquire(&req(&first)).await, "first acquisition");
    assert_eq!(count, 1, "a first acquisition holds once");
    let (again, count) = grant(backend.try_acquire(&req(&first)).await, "the same attempt again");
    assert_eq!(
        (again, count),
        (token, 1),
        "a repeated first acquisition is the same share, not a re-entry"
    );
    assert_eq!(holder(&a, &name).await, Some((a.owner().to_owned(), 1, token)));
    let (reentered, count) = grant(backend.try_acquire(&req(&second)).await, "re-entry");
    assert_eq!((reentered, count), (token, 2), "a new attempt re-enters");
    let (reentered, count) = grant(backend.try_acquire(&req(&second)).await, "the re-entry again");
    assert_eq!((reentered, count), (token, 2), "a repeated re-entry counts once");
    assert_eq!(holder(&a, &name).await, Some((a.owner().to_owned(), 2, token)));

    let hold = Hold {
        name: name.clone(),
        owner: a.owner().to_owned(),
        token,
    };
    let release = |attempt: &str| {
        let (backend, hold, attempt) = (backend.clone(), hold.clone(), attempt.to_owned());
        async move {
            backend
                .release(&hold, &attempt)
                .await
                .unwrap_or_else(|e| panic!("release: {}", error_chain(&e)))
        }
    };
    assert_eq!(release(&second).await, ReleaseOutcome::Released { remaining: 1 });
    assert_eq!(
        release(&second).await,
        ReleaseOutcome::Released { remaining: 1 },
        "a repeated release takes nothing more"
    );
    assert_eq!(holder(&a, &name).await, Some((a.owner().to_owned(), 1, token)));
    assert_eq!(release(&first).await, ReleaseOutcome::Released { remaining: 0 });
    assert_eq!(holder(&a, &name).await, None, "the last share freed the name");
    assert_eq!(
        release(&first).await,
        ReleaseOutcome::NotHeld,
        "a repeat after the name was freed finds nothing"
    );
    // The next acquisition is a new hold with a greater token.
    let third = new_attempt_id();
    let (next, count) = grant(backend.try_acquire(&req(&third)).await, "after release");
    assert!(next > token && count == 1, "token {next} after {token}, count {count}");
    assert_eq!(release(&third).await, ReleaseOutcome::NotHeld, "another hold's release");
    let hold = Hold {
        name: name.clone(),
        owner: a.owner().to_owned(),
        token: next,
    };
    let r = backend.release(&hold, &third).await.expect("release");
    assert_eq!(r, ReleaseOutcome::Released { remaining: 0 });
}

/// Contract point 7: The watchdog keeps a lease alive for many ttls; an explicit extend
/// pushes the deadline out.
pub async fn extend_and_auto_extend(kit: &Kit) {
    let name = kit.name("auto_extend");
    let (a, b) = (kit.client().await, kit.client().await);
    let auto = must_lock(&a, &name, &kit.short(&a).auto_extend(true)).await;
    let manual_name = kit.name("extend");
    let manual = must_lock(&a, &manual_name, &kit.short(&a)).await;
    let before = manual.valid_until();
    manual
        .extend(kit.ttl * 5)
        .await
        .unwrap_or_else(|e| panic!("extend: {}", error_chain(&e)));
    if ttl_leases(&a) {
        let (before, after) = (before.expect("ttl lease"), manual.valid_until().expect("ttl lease"));
        assert!(after >= before + kit.ttl * 3, "extend must move the deadline out");
    }
    tokio::time::sleep(kit.ttl * 4).await;
    for (guard, what) in [(&auto, "auto-extended"), (&manual, "explicitly extended")] {
        assert!(!guard.is_lost(), "the {what} lock must not be lost");
        assert!(is_busy(&b, guard.name()).await, "the {what} lock must still be held");
        assert_eq!(holder(&b, guard.name()).await.map(|h| h.0), Some(a.owner().to_owned()));
    }
    assert_eq!(must_unlock(auto).await, 0);
    assert_eq!(must_unlock(manual).await, 0);
}

/// Contract point 8: Without extension the lost signal fires, and it has fired by the time
/// another owner acquires.
pub async fn lost_signal(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    if !ttl_leases(&a) {
        eprintln!(
            "{}: session leases; the lost signal is tested by the backend's session-loss tests",
            kit.label()
        );
        return;
    }
    let name = kit.name("lost_signal");
    let ga = must_lock(&a, &name, &kit.short(&a)).await;
    let signal = ga.lost_signal();
    assert!(!ga.is_lost());
    let gb = timeout(kit.bound, b.lock_with(&name, &kit.long(&b)))
        .await
        .expect("the expired lock must be acquirable")
        .unwrap_or_else(|e| panic!("lock: {}", error_chain(&e)));
    assert!(
        ga.is_lost(),
        "the old holder must know it lost the lock by the time another owner holds it"
    );
    timeout(kit.bound, ga.lost()).await.expect("lost() resolves");
    timeout(kit.bound, signal.wait())
        .await
        .expect("LostSignal::wait resolves");
    assert!(signal.is_lost() && signal.reason().is_some());
    assert!(gb.fencing_token() > ga.fencing_token());
    must_unlock(gb).await;
}

/// Contract point 9: Tokens strictly grow over many first acquisitions, stay put on
/// re-entry, and grow on a takeover after expiry.
pub async fn fencing_monotonic(kit: &Kit) {
    let name = kit.name("fencing");
    let (a, b) = (kit.client().await, kit.client().await);
    let mut last = 0u64;
    for i in 0..100 {
        let c = if i % 2 == 0 { &a } else { &b };
        let g = must_lock(c, &name, &kit.long(c)).await;
        assert!(g.fencing_token() > last, "token {} after {last}", g.fencing_token());
        last = g.fencing_token();
        if i % 10 == 0 {
            let again = must_lock(c, &name, &kit.long(c)).await;
            assert_eq!(again.fencing_token(), last);
            must_unlock(again).await;
        }
        must_unlock(g).await;
    }
    if ttl_leases(&a) {
        let g = must_lock(&a, &name, &kit.short(&a)).await;
        assert!(g.fencing_token() > last);
        last = g.fencing_token();
        g.abandon();
        let gb = must_lock(&b, &name, &kit.long(&b)).await;
        assert!(
            gb.fencing_token() > last,
            "a takeover after expiry must get a greater token"
        );
        must_unlock(gb).await;
    }
}

/// Contract point 10: A holder that crashes (stops extending and releasing, its client
/// gone) blocks the name until its lease ends — and not longer.
pub async fn crash_release(kit: &Kit) {
    let name = kit.name("crash_release");
    let (a, b) = (kit.client().await, kit.client().await);
    let ga = must_lock(&a, &name, &kit.short(&a).auto_extend(true)).await;
    // A TTL lease runs to its deadline; a session lease's deadline is only
    // how long the holder may trust it (its session ends with the client).
    let valid_until = ga.valid_until().filter(|_| ttl_leases(&a));
    let token = ga.fencing_token();
    ga.abandon();
    drop(a);
    if let Some(valid_until) = valid_until
        && Instant::now() < valid_until
    {
        assert!(is_busy(&b, &name).await, "a crashed holder's lease must run to its end");
    }
    let gb = timeout(kit.bound, b.lock_with(&name, &kit.long(&b)))
        .await
        .expect("a crashed holder's lock must come free within its ttl")
        .unwrap_or_else(|e| panic!("lock: {}", error_chain(&e)));
    if let Some(valid_until) = valid_until {
        assert!(
            Instant::now() >= valid_until,
            "acquired before the crashed holder's lease could have ended"
        );
    }
    assert!(gb.fencing_token() > token);
    must_unlock(gb).await;
}

/// Contract point 11: Every valid name works as-is (the backend encodes what its store
/// cannot hold); invalid names get `InvalidName`.
pub async fn names(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let tag = format!("{:08x}", rand::random::<u32>());
    let hostile = [
        "a".to_owned(),
        "order:42".to_owned(),
        "a/b/c".to_owned(),
        "/leading".to_owned(),
        "trailing/".to_owned(),
        "{tag}".to_owned(),
        "x{y}z{".to_owned(),
        "quote'\"`".to_owned(),
        "back\\slash".to_owned(),
        "%_%".to_owned(),
        "'; DROP TABLE locks; --".to_owned(),
        "space and\ttab\nnewline".to_owned(),
        "nul\0byte".to_owned(),
        "ünïcødé 锁 🔒".to_owned(),
        ".".to_owned(),
        "..".to_owned(),
        "zookeeper".to_owned(),
        "*?[]".to_owned(),
        "x".repeat(255),
        "锁".repeat(85),
    ];
    for base in hostile {
        let name = unique(&tag, &base);
        assert!(name.len() <= 255);
        let g = must_lock(&a, &name, &kit.long(&a)).await;
        let info = a.inspect(&name).await.expect("inspect").expect("held");
        assert_eq!(info.name, name, "inspect must give the name back as it was");
        assert_eq!(info.owner, a.owner());
        assert!(is_busy(&b, &name).await, "name {name:?} must exclude");
        // A near-miss name is a different lock.
        let sibling = format!("{}~", name.char_indices().nth(1).map_or(&name[..], |(i, _)| &name[..i]));
        let gs = b
            .try_lock_with(&sibling, &kit.long(&b))
            .await
            .expect("try_lock")
            .expect("a different name is free");
        must_unlock(gs).await;
        assert_eq!(must_unlock(g).await, 0);
        assert_eq!(holder(&a, &name).await, None);
    }
}

/// Replaces the start of `base` with a run tag, keeping the length at most
/// 255 bytes, so names are unique per run.
fn unique(tag: &str, base: &str) -> String {
    let mut name = format!("{tag}{base}");
    while name.len() > 255 {
        name.pop();
    }
    name
}

/// Contract point 11b: Bad input gets a typed error and leaves nothing behind.
pub async fn invalid_input(kit: &Kit) {
    let a = kit.client().await;
    for bad in [String::new(), "x".repeat(256), "锁".repeat(86)] {
        let e = a.lock(&bad).await.expect_err("invalid name");
        assert!(matches!(e, LockError::InvalidName { .. }), "lock({bad:?}): {e:?}");
        let e = a.try_lock(&bad).await.expect_err("invalid name");
        assert!(matches!(e, LockError::InvalidName { .. }), "try_lock: {e:?}");
        let e = a.inspect(&bad).await.expect_err("invalid name");
        assert!(matches!(e, LockError::InvalidName { .. }), "inspect: {e:?}");
    }
    let name = kit.name("invalid_input");
    for opts in [
        a.options().ttl(Duration::ZERO),
        a.options().ttl(Duration::from_secs(100 * 365 * 86400)),
        a.options().wait(Duration::MAX),
        a.options().owner(""),
    ] {
        let e = a.lock_with(&name, &opts).await.expect_err("invalid options");
        assert!(matches!(e, LockError::InvalidConfig { .. }), "{opts:?}: {e:?}");
    }
    assert!(a.with_owner("").is_err());
    assert_eq!(holder(&a, &name).await, None, "a refused call must leave nothing held");
}

/// Contract point 12: K tasks × M cycles of acquire → read counter → yield → write
/// counter + 1 → release on one name: the total is exact, and the recorded
/// history has no overlapping holds and strictly increasing tokens.
pub async fn stress(kit: &Kit) {
    let name = kit.name("stress");
    let counter = Arc::new(AtomicU64::new(0));
    let history = Arc::new(Mutex::new(Vec::new()));
    let clients = join_all((0..kit.stress_tasks).map(|_| kit.client())).await;
    let tasks = clients.into_iter().enumerate().map(|(worker, client)| {
        let (name, counter, history) = (name.clone(), counter.clone(), history.clone());
        let opts = client
            .options()
            .ttl(Duration::from_secs(60))
            .wait(Duration::from_secs(120));
        let iterations = kit.stress_iterations;
        tokio::spawn(async move {
            for _ in 0..iterations {
                let g = must_lock(&client, &name, &opts).await;
                let acquired = Instant::now();
                let seen = counter.load(Ordering::SeqCst);
                tokio::task::yield_now().await;
                counter.store(seen + 1, Ordering::SeqCst);
                let released = Instant::now();
                history.lock().expect("history").push(Grant {
                    worker,
                    token: g.fencing_token(),
                    acquired,
                    released,
                });
                must_unlock(g).await;
            }
        })
    });
    for t in join_all(tasks).await {
        t.expect("stress task panicked");
    }
    let total = (kit.stress_tasks * kit.stress_iterations) as u64;
    assert_eq!(
        counter.load(Ordering::SeqCst),
        total,
        "lost updates: the lock did not exclude"
    );
    let mut grants = std::mem::take(&mut *history.lock().expect("history"));
    assert_eq!(grants.len() as u64, total);
    check_history(&mut grants).unwrap_or_else(|e| panic!("history check: {e}"));
}

/// Operator tools: `list` shows held names by prefix, `force_release`
/// removes a hold and the holder's lost signal fires; a backend that does
/// not declare them answers `Unsupported`.
pub async fn admin(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let prefix = kit.name("admin");
    if !a.capabilities().admin {
        let e = a.list(&prefix, 10).await.expect_err("list is not declared");
        assert!(matches!(e, LockError::Unsupported { .. }), "{e:?}");
        let e = a
            .force_release(&prefix)
            .await
            .expect_err("force_release is not declared");
        assert!(matches!(e, LockError::Unsupported { .. }), "{e:?}");
        return;
    }
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}/{i}")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(must_lock(&a, n, &kit.short(&a).auto_extend(true)).await);
    }
    let other = must_lock(&b, &kit.name("admin_other"), &kit.long(&b)).await;
    let listed = a.list(&prefix, 100).await.expect("list");
    let listed_names: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(
        listed_names,
        names.iter().map(String::as_str).collect::<Vec<_>>(),
        "list by prefix, in order"
    );
    assert!(listed.iter().all(|i| i.owner == a.owner() && i.hold_count == 1));
    assert_eq!(a.list(&prefix, 2).await.expect("list").len(), 2, "limit");

    let victim = guards.remove(1);
    let removed = b
        .force_release(victim.name())
        .await
        .expect("force_release")
        .expect("it was held");
    assert_eq!(
        (removed.owner.as_str(), removed.token),
        (a.owner(), victim.fencing_token())
    );
    assert_eq!(holder(&b, victim.name()).await, None);
    timeout(kit.bound, victim.lost())
        .await
        .expect("the holder's lost signal fires after a forced release");
    assert!(
        b.force_release(victim.name()).await.expect("force_release").is_none(),
        "nothing left to remove"
    );
    let e = victim.unlock().await.expect_err("the forced-out guard no longer holds");
    assert!(matches!(e, LockError::NotHeld { .. }), "{e:?}");
    for g in guards {
        must_unlock(g).await;
    }
    must_unlock(other).await;
    assert!(a.list(&prefix, 100).await.expect("list").is_empty());
}
