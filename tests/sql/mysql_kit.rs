//! The conformance kit against MySQL/MariaDB (`LOCKKIT_MYSQL_URL`, from `scripts/services up mysql`).

#![cfg(feature = "mysql")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_MYSQL_URL", |url| async move { lockkit::connect(&url).await })
        .map(|k| k.with_stress(8, 100))
);
