//! The conformance kit against five independent Redis masters
//! (`LOCKKIT_REDLOCK_URL`).
#![cfg(feature = "redis")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_REDLOCK_URL", |url| async move { lockkit::connect(&url).await })
        .map(|k| k.with_stress(8, 200))
);
