//! Leases: extension and the watchdog, the lost signal, and a crashed
//! holder's lease running out.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use tokio::time::timeout;

use super::steps::{assert_holder, is_busy, must_lock, must_unlock, ttl_leases};
use crate::LockError;
use crate::testkit::kit::{Kit, error_chain};

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
        assert_holder(&b, guard.name(), Some(a.owner().to_owned()), |h| h.0).await;
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

/// Contract point 7 when the holder does not run: a holder whose process
/// is starved (its runtime's threads blocked, as a CPU-starved, swapped or
/// paused process) can neither renew nor hear anything. If another owner
/// then acquires, the holder's guard — looked at from a thread that does
/// run — says it is lost, and its deadline lay before that acquisition.
/// Where a session lease is the holder's connection, which the server
/// keeps open, nobody acquires within the bound and there is nothing to
/// check: that is reported as not run.
pub async fn lost_when_starved(kit: &Kit) {
    let name = kit.name("lost_when_starved");
    // The holder lives on a runtime of its own, with one worker thread,
    // which is then kept busy: its watchdog, its connections' tasks and
    // its session's pings stop with it.
    let holder_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the starved holder");
    let held = {
        let (kit, name) = (kit.clone(), name.clone());
        holder_rt.spawn(async move {
            let a = kit.client().await;
            let guard = must_lock(&a, &name, &kit.short(&a).auto_extend(true)).await;
            (a, guard)
        })
    };
    let (a, guard) = timeout(kit.bound, held)
        .await
        .expect("the holder acquires within the bound")
        .expect("holder task panicked");
    let token = guard.fencing_token();
    let (starving, stop) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    {
        let (starving, stop, until) = (starving.clone(), stop.clone(), Instant::now() + kit.bound * 2);
        holder_rt.spawn(async move {
            starving.store(true, Ordering::Release);
            while !stop.load(Ordering::Acquire) && Instant::now() < until {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        });
    }
    while !starving.load(Ordering::Acquire) {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    let b = kit.client().await;
    // The wait is the bound; the outer timeout only catches a wait that
    // overruns it. Either ending means nobody acquired.
    let taken = match timeout(kit.bound * 2, b.lock_with(&name, &kit.long(&b))).await {
        Ok(Err(LockError::WaitTimeout { .. })) | Err(_) => None,
        Ok(other) => Some(other),
    };
    let acquired_at = Instant::now();
    match taken {
        Some(taken) => {
            let gb = taken.unwrap_or_else(|e| panic!("lock: {}", error_chain(&e)));
            assert!(
                guard.is_lost(),
                "another owner acquired while the starved holder's guard says it holds (deadline {:?} after)",
                guard.valid_until().map(|v| v.saturating_duration_since(acquired_at))
            );
            if let Some(deadline) = guard.valid_until() {
                assert!(
                    deadline <= acquired_at,
                    "the starved holder's deadline lies {:?} after another owner acquired",
                    deadline - acquired_at
                );
            }
            assert!(gb.fencing_token() > token);
            stop.store(true, Ordering::Release);
            timeout(kit.bound, guard.lost())
                .await
                .expect("the holder's lost signal fires once it runs again");
            must_unlock(gb).await;
        }
        None => {
            stop.store(true, Ordering::Release);
            assert!(
                !ttl_leases(&b),
                "a starved holder's ttl lease must run out: nobody acquired within {:?}",
                kit.bound
            );
            eprintln!(
                "{}: lost_when_starved: not run: the server kept the starved holder's session for {:?}",
                kit.label(),
                kit.bound
            );
        }
    }
    drop(guard);
    drop(a);
    tokio::task::spawn_blocking(move || holder_rt.shutdown_timeout(std::time::Duration::from_secs(5)))
        .await
        .expect("shutting the holder's runtime down");
}
