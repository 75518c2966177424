//! Re-entry and idempotence: one owner's holds are shares of one hold,
//! and a repeated attempt or release counts once.

use super::steps::{assert_holder, holder, is_busy, must_lock, must_unlock};
use crate::LockError;
use crate::backend::{AcquireRequest, Hold, ReleaseOutcome, TryAcquire};
use crate::name::new_attempt_id;
use crate::testkit::kit::{Kit, error_chain};

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
    let g3 = twin.try_lock_with(&name, &kit.long(&twin)).await.expect("try_lock");
    // Without shared holds the hold is the holding client's: a second
    // client with the same owner id is refused, never granted beside it.
    let shared = a.capabilities().shared_holds;
    let g3 = match (g3, shared) {
        (Some(g3), true) => {
            assert_eq!(g3.hold_count(), 3);
            assert_eq!(g3.fencing_token(), g1.fencing_token());
            Some(g3)
        }
        (None, true) => panic!("a client with the same owner id re-enters"),
        (Some(_), false) => panic!("a second client holds beside the first without shared holds"),
        (None, false) => None,
    };
    let other_owner = kit.long(&b).owner("somebody-else");
    assert!(b.try_lock_with(&name, &other_owner).await.expect("try_lock").is_none());
    let count = if shared { 3 } else { 2 };
    assert_holder(
        &b,
        &name,
        Some((a.owner().to_owned(), count, g1.fencing_token())),
        |h| h,
    )
    .await;
    let g1_token = g1.fencing_token();
    if let Some(g3) = g3 {
        assert_eq!(must_unlock(g3).await, 2);
    }
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
/// Contract point 13: attempts are idempotent. The same acquisition attempt
/// sent twice (a retry after a lost reply, a command a client library
/// re-sent) is granted once: one share of the hold, the same token; a
/// release sent twice takes one share back, never two; a repeated first
/// acquisition does not turn into a re-entry.
pub async fn idempotent_attempts(kit: &Kit) {
    let name = kit.name("idempotent_attempts");
    let a = kit.client().await;
    assert!(
        a.capabilities().idempotent_attempts,
        "{}: the backend does not declare idempotent attempts (Capabilities::idempotent_attempts): list the case as not applicable",
        kit.label()
    );
    let backend = a.backend();
    let ttl = kit.ttl * 20;
    let (first, second) = (new_attempt_id(), new_attempt_id());
    let req = |attempt| AcquireRequest {
        name: &name,
        owner: a.owner(),
        ttl,
        attempt,
        fair: true,
        kind: crate::backend::LockKind::Mutex,
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
        kind: crate::backend::LockKind::Mutex,
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
        kind: crate::backend::LockKind::Mutex,
    };
    let r = backend.release(&hold, &third).await.expect("release");
    assert_eq!(r, ReleaseOutcome::Released { remaining: 0 });
}
