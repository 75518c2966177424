//! The conformance kit against MySQL/MariaDB in session mode (`?mode=session`
//! appended to `LOCKKIT_MYSQL_URL`): holds are server session locks.

#![cfg(feature = "mysql")]

use lockkit_core::testkit::Kit;

lockkit_core::conformance_tests!(
    Kit::from_env("LOCKKIT_MYSQL_URL", |url| async move {
        lockkit::connect(&crate::common::with_params(&url, "mode=session")).await
    })
    .map(|k| k.with_stress(8, 100)),
    not_applicable: [fifo_order, releaser_does_not_overtake, dead_waiter_skipped]
        because "MariaDB session locks: waiters cannot be counted without performance_schema, so no fair queue is declared"
);
