//! Connections kept between statements (`lockkit-sql/src/conn/kept.rs`):
//! the backend keeps a connection whose statement finished for the next
//! one, without giving it back to the pool, which would test it. A kept
//! connection the server has since ended must not fail an operation: the
//! statement that finds it dead is sent again on another connection.

#![cfg(feature = "postgres")]

use std::time::{Duration, Instant};

use lockkit_core::testkit::server_url;
use sqlx::PgPool;

use crate::common::{tag, unique, with_params};

/// The server sessions of lockkit's pools whose last statement named
/// `table`.
const ITS_SESSIONS: &str = "FROM pg_stat_activity WHERE pid <> pg_backend_pid() \
    AND application_name = 'lockkit' AND position($1 in query) > 0";

/// A lock and unlock of `name`; the token, which must exceed `last`.
async fn cycle(client: &lockkit::LockClient, name: &str, last: u64) -> u64 {
    let guard = client.lock(name).await.expect("lock after the sessions ended");
    let token = guard.fencing_token();
    assert!(token > last, "token {token} after {last}");
    guard.unlock().await.expect("unlock after the sessions ended");
    token
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_connections_the_server_ended_are_replaced() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let table = format!("lockkit_kept_{}", &tag()[..8]);
    let client = lockkit::connect(&with_params(&url, &format!("table={table}&sweep_interval=0")))
        .await
        .unwrap();
    let name = unique("kept");
    let mut last = 0;
    for _ in 0..5 {
        last = cycle(&client, &name, last).await;
    }
    let admin = PgPool::connect(&url).await.unwrap();
    let ended: Vec<bool> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid) {ITS_SESSIONS}"
    )))
    .bind(&table)
    .fetch_all(&admin)
    .await
    .unwrap();
    assert!(!ended.is_empty(), "no kept session of the client was found");
    assert!(ended.iter().all(|e| *e), "a session was not ended: {ended:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) {ITS_SESSIONS}")))
            .bind(&table)
            .fetch_one(&admin)
            .await
            .unwrap();
        if left == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{left} ended sessions still listed after 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for _ in 0..5 {
        last = cycle(&client, &name, last).await;
    }
    drop(client);
    for object in
        ["TABLE", "TABLE", "TABLE", "TABLE", "SEQUENCE"]
            .iter()
            .zip(["", "_waiters", "_kinds", "_holds", "_token_seq"])
    {
        let (what, suffix) = object;
        let drop_it = format!("DROP {what} IF EXISTS {table}{suffix}");
        sqlx::query(sqlx::AssertSqlSafe(drop_it)).execute(&admin).await.unwrap();
    }
}
