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
use std::process::Stdio;
use std::time::{Duration, Instant};

use sqlx::Connection;

use crate::common::{spawn_child, unique, with_params};
use crate::dead_waiter::{NAME, ROLE, URL};

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
    let got_a = first_value::<bool>(&mut a, &take).await;
    let got_b = first_value::<bool>(&mut b, &take).await;
    assert!(got_a, "the first client gets the lock");
    assert!(
        got_b,
        "PgBouncer in transaction mode ran the second client on the holder's server session"
    );
    // Both took it on one server session: it counts two holds.
    let free = format!("SELECT pg_advisory_unlock({key})");
    assert!(first_value::<bool>(&mut a, &free).await && first_value::<bool>(&mut b, &free).await);
}

/// Runs `text` in the simple protocol; its first row's first value.
async fn first_value<T>(conn: &mut sqlx::PgConnection, text: &str) -> T
where
    T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    use sqlx::Row;
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_owned()))
        .fetch_all(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
    rows[0].try_get::<T, _>(0).unwrap_or_else(|e| panic!("{text}: {e}"))
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

/// Behind a pooler no release is pushed to other processes, so the first
/// waiter of each process looks every few ms whether it heads the line
/// now. A look that finds the name busy must not lock the name's row in
/// `<table>_kinds`: under a crowd, looks queued on that row held the
/// pooler's server connections, and releases waited out the pool's
/// timeout. Here a session straight to Postgres holds that row lock while
/// a writer of this process heads the line and one of a child process
/// waits behind it: only the head's attempt (it would take the name) may
/// wait for the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_head_of_the_line_waits_for_the_names_row() {
    let (Some(pooled), Some(direct)) = (server_url("LOCKKIT_PGBOUNCER_URL"), server_url("LOCKKIT_POSTGRES_URL")) else {
        return;
    };
    let table = format!("lk_look_{}", std::process::id());
    let url = with_params(&pooled, &format!("table={table}"));
    let name = unique("pgbouncer_look");
    let kind = lockkit::LockKind::Write;
    let holder = lockkit::connect(&url).await.expect("connect through the pooler");
    let long = holder.options().ttl(Duration::from_secs(60));
    let held = holder.rw_lock(&name).unwrap().write_with(&long).await.expect("write");
    let first = lockkit::connect(&url).await.expect("connect through the pooler");
    let head = {
        let (c, name) = (first.clone(), name.clone());
        let opts = long.clone().wait(Duration::from_secs(120));
        tokio::spawn(async move { c.rw_lock(&name).unwrap().write_with(&opts).await })
    };
    crate::kinds::until_waiting(&holder, &name, kind, 1).await;
    let env = [(ROLE, "write"), (URL, url.as_str()), (NAME, name.as_str())];
    let child = spawn_child("sql::dead_waiter", "dead_child", &env, Stdio::null());
    crate::kinds::until_waiting(&holder, &name, kind, 2).await;

    let mut row = sqlx::PgConnection::connect(&direct).await.expect("connect to postgres");
    simple(&mut row, "BEGIN").await;
    simple(&mut row, &format!("SELECT * FROM {table}_kinds FOR UPDATE")).await;
    let mut watch = sqlx::PgConnection::connect(&direct).await.expect("connect to postgres");
    let blocked = format!(
        "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
         AND query LIKE '%{table}_kinds%FOR UPDATE%'"
    );
    // The head's backoff (at most `max_backoff`) brings its attempt to
    // the row; the child's writer looks every 10 ms meanwhile.
    let deadline = Instant::now() + Duration::from_secs(30);
    while first_value::<i64>(&mut watch, &blocked).await == 0 {
        assert!(Instant::now() < deadline, "the head's attempt never came to the row");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut most = 0;
    for _ in 0..100 {
        most = most.max(first_value::<i64>(&mut watch, &blocked).await);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    simple(&mut row, "ROLLBACK").await;
    assert_eq!(most, 1, "only the head of the line waited for the name's row");

    drop(child);
    held.unlock().await.expect("unlock");
    let got = head.await.unwrap().expect("the head is served");
    got.unlock().await.expect("unlock");
}

/// Runs `text` in the simple protocol.
async fn simple(conn: &mut sqlx::PgConnection, text: &str) {
    sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_owned()))
        .execute(&mut *conn)
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
}
