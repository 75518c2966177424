//! The conformance kit against a Redis Cluster (`LOCKKIT_REDIS_CLUSTER_URL`,
//! started by `scripts/services up redis-cluster`).
#![cfg(feature = "redis")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_REDIS_CLUSTER_URL", |url| async move {
        lockkit::connect(&url).await
    })
    .map(|k| k.with_stress(8, 200))
);
