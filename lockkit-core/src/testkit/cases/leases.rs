//! Leases: extension and the watchdog, the lost signal, and a crashed
//! holder's lease running out.

use std::time::Instant;

use tokio::time::timeout;

use super::{assert_holder, is_busy, must_lock, must_unlock, ttl_leases};
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
