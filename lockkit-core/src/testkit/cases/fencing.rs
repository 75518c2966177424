//! Fencing tokens: strictly growing over holds, kept by re-entry.

use super::steps::{must_lock, must_unlock, ttl_leases};
use crate::testkit::kit::Kit;

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
