//! The conformance kit against one Redis server (`LOCKKIT_REDIS_URL`).
#![cfg(feature = "redis")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_REDIS_URL", |url| async move { lockkit::connect(&url).await })
        .map(|k| k.with_stress(8, 200))
);
