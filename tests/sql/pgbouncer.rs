//! Behind PgBouncer (`LOCKKIT_PGBOUNCER_URL`: transaction pooling,
//! `LOCKKIT_PGBOUNCER_STMT_URL`: statement pooling, from `scripts/services
//! up pgbouncer`). A transaction pooler hands a server session to another
//! client between transactions, and Postgres advisory locks are re-entrant
//! per server session: two clients then both "hold" one session lock. So
//! the session mode refuses such a pooler with a typed error naming its
//! pool mode, and still connects straight to Postgres. (The table mode
//! through the same pooler runs the conformance kit: `pgbouncer_kit.rs`.)
#![cfg(feature = "postgres")]

use lockkit::LockError;
use lockkit_core::testkit::server_url;
use sqlx::Connection;

use crate::common::{unique, with_params};

/// The hazard itself, without lockkit: two client connections through the
/// transaction pooler both get one session advisory lock, because the
/// pooler ran both on the one server session it had idle.
#[tokio::test]
async fn a_transaction_pooler_grants_one_session_lock_twice() {
    let Some(url) = server_url("LOCKKIT_PGBOUNCER_URL") else {
        return;
    };
    let mut a = sqlx::PgConnection::connect(&url).await.expect("connect a");
    let mut b = sqlx::PgConnection::connect(&url).await.expect("connect b");
    let key = i64::from_str_radix(&lockkit_core::raw::random_owner()[..15], 16).expect("a key");
    // The simple protocol: one message, one pooled transaction each.
    let take = format!("SELECT pg_try_advisory_lock({key})");
    let got_a = simple_bool(&mut a, &take).await;
    let got_b = simple_bool(&mut b, &take).await;
    assert!(got_a, "the first client gets the lock");
    assert!(
        got_b,
        "PgBouncer in transaction mode ran the second client on the holder's server session"
    );
    // Both took it on one server session: it counts two holds.
    let free = format!("SELECT pg_advisory_unlock({key})");
    assert!(simple_bool(&mut a, &free).await && simple_bool(&mut b, &free).await);
}

/// Runs `text` in the simple protocol; its one boolean.
async fn simple_bool(conn: &mut sqlx::PgConnection, text: &str) -> bool {
    use sqlx::Row;
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_owned()))
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    rows[0].try_get::<bool, _>(0).expect("a boolean")
}

/// Session mode through the transaction pooler: refused at connect, a
/// configuration error naming transaction pooling; nothing is held.
#[tokio::test]
async fn session_mode_behind_a_transaction_pooler_is_refused() {
    let Some(url) = server_url("LOCKKIT_PGBOUNCER_URL") else {
        return;
    };
    let a = lockkit::connect(&with_params(&url, "mode=session")).await;
    let e = a.expect_err("session mode through a transaction pooler is refused");
    assert_refused(&e, "transaction pooling");
}

/// Session mode through the statement pooler: refused, naming statement
/// pooling.
#[tokio::test]
async fn session_mode_behind_a_statement_pooler_is_refused() {
    let Some(url) = server_url("LOCKKIT_PGBOUNCER_STMT_URL") else {
        return;
    };
    let e = lockkit::connect(&with_params(&url, "mode=session"))
        .await
        .expect_err("refused");
    assert_refused(&e, "statement pooling");
}

/// Straight to Postgres the session mode still connects and locks.
#[tokio::test]
async fn session_mode_straight_to_postgres_connects() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let client = lockkit::connect(&with_params(&url, "mode=session"))
        .await
        .expect("session mode connects straight to Postgres");
    let g = client.lock(&unique("pgbouncer_direct")).await.expect("lock");
    g.unlock().await.expect("unlock");
}

fn assert_refused(e: &LockError, mode: &str) {
    match e {
        LockError::InvalidConfig { part, reason } => {
            assert_eq!(part, "query parameter mode", "{e}");
            assert!(reason.contains(mode), "the reason names {mode}: {e}");
        }
        other => panic!("expected InvalidConfig naming {mode}, got {other:?}"),
    }
}
