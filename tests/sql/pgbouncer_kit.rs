//! The conformance kit against PostgreSQL through PgBouncer in transaction
//! pooling mode (`LOCKKIT_PGBOUNCER_URL`, from `scripts/services up
//! pgbouncer`): the table mode, which finds the pooler at connect and
//! keeps nothing on server sessions. The crowd cases run 8 clients × 25
//! waiters through it. Without a session to carry its liveness key, a
//! dead waiter's place lives out its lease (`queue_lease`, 5 s by
//! default): the bound of the dead-waiter case is twice that.

#![cfg(feature = "postgres")]

use lockkit_core::testkit::Kit;
use lockkit_sql::DEFAULT_QUEUE_LEASE;

lockkit_core::conformance_tests!(
    Kit::from_env(
        "LOCKKIT_PGBOUNCER_URL",
        |url| async move { lockkit::connect(&url).await }
    )
    .map(|k| k.with_stress(8, 100).with_dead_waiter_bound(DEFAULT_QUEUE_LEASE * 2))
);
