//! Several OS processes on one Redis server (`LOCKKIT_REDIS_URL`): a waiter killed
//! with SIGKILL while it waits costs the waiter behind it little (the
//! release finds its channel without a listener and drops it from the
//! line), and crowds of 4 processes × 50 waiters on a semaphore and a
//! read-write lock are all served, within the kind's bounds. See
//! `common::child`.
#![cfg(feature = "redis")]

crate::child_process_tests!("LOCKKIT_REDIS_URL", "redis");
