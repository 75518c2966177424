//! The conformance kit against a sentinel-monitored Redis master (`LOCKKIT_REDIS_SENTINEL_URL`,
//! started by `scripts/services up redis-sentinel`).
#![cfg(feature = "redis")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_REDIS_SENTINEL_URL", |url| async move {
        lockkit::connect(&url).await
    })
    .map(|k| k.with_stress(8, 200))
);
