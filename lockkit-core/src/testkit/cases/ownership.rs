//! Ownership: only the holder releases or extends.

use std::time::Duration;

use tokio::time::timeout;

use super::steps::{assert_holder, must_lock, must_unlock, ttl_leases};
use crate::LockError;
use crate::backend::{ExtendOutcome, Hold, ReleaseOutcome};
use crate::name::new_attempt_id;
use crate::testkit::kit::Kit;

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
            kind: crate::backend::LockKind::Mutex,
        },
        Hold {
            name: name.clone(),
            owner: a.owner().to_owned(),
            token: token + 1,
            kind: crate::backend::LockKind::Mutex,
        },
        Hold {
            name: name.clone(),
            owner: a.owner().to_owned(),
            token: token.wrapping_sub(1),
            kind: crate::backend::LockKind::Mutex,
        },
    ];
    for hold in &wrong {
        let r = b.backend().release(hold, &new_attempt_id()).await.expect("release");
        assert_eq!(r, ReleaseOutcome::NotHeld, "release by {hold:?} must be refused");
        let r = b.backend().extend(hold, Duration::from_secs(60)).await.expect("extend");
        assert_eq!(r, ExtendOutcome::NotHeld, "extend by {hold:?} must be refused");
    }
    assert_holder(&b, &name, Some((a.owner().to_owned(), 1, token)), |h| h).await;
    must_unlock(ga).await;
    let never = Hold {
        name: kit.name("never_held"),
        owner: a.owner().to_owned(),
        token: 1,
        kind: crate::backend::LockKind::Mutex,
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
    assert_holder(&a, &name, Some((b.owner().to_owned(), 1, gb.fencing_token())), |h| h).await;
    must_unlock(gb).await;
}
