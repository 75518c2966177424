//! The conformance kit against PostgreSQL (`LOCKKIT_POSTGRES_URL`, from `scripts/services up postgres`).

#![cfg(feature = "postgres")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env(
        "LOCKKIT_POSTGRES_URL",
        |url| async move { lockkit::connect(&url).await }
    )
    .map(|k| k.with_stress(8, 100))
);
