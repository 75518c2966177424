//! Names and input: every valid name works as-is, bad input gets a typed
//! error.

use std::time::Duration;

use super::steps::{holder, is_busy, must_lock, must_unlock};
use crate::LockError;
use crate::testkit::kit::Kit;

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
