//! Operator tools: `list` and `force_release`.

use tokio::time::timeout;

use super::steps::{holder, must_lock, must_unlock};
use crate::LockError;
use crate::testkit::kit::Kit;

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
