//! Where a MySQL/MariaDB lock table's fencing tokens come from: a new table
//! on MariaDB draws from its sequence `<table>_token_seq`, and its
//! `<table>_tokens` refuses the stamp an older lockkit would make there; a
//! table whose counter rows exist (MySQL, or made by an older lockkit) keeps
//! them; a sequence made beside a lock table that has holds starts above
//! their tokens; `create_table=false` without a token source is a typed
//! error naming the statement to run.
#![cfg(feature = "mysql")]

use lockkit::LockError;
use lockkit_core::testkit::server_url;
use sqlx::MySqlPool;

fn table(case: &str) -> String {
    format!("lockkit_tok_{case}_{}", &crate::common::tag()[..8])
}

/// The server's URL, a pool on it and a new table name for `case`; `None`
/// without the server.
async fn setup(case: &str) -> Option<(String, MySqlPool, String)> {
    let url = server_url("LOCKKIT_MYSQL_URL")?;
    let pool = MySqlPool::connect(&url).await.unwrap();
    Some((url, pool, table(case)))
}

async fn exec(pool: &MySqlPool, sql: String) {
    sqlx::query(sqlx::AssertSqlSafe(sql)).execute(pool).await.unwrap();
}

async fn exists(pool: &MySqlPool, object: &str) -> bool {
    let n: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(object)
    .fetch_one(pool)
    .await
    .unwrap();
    n > 0
}

async fn drop_all(pool: &MySqlPool, t: &str) {
    exec(
        pool,
        format!("DROP TABLE IF EXISTS `{t}`, `{t}_tokens`, `{t}_waiters`, `{t}_kinds`, `{t}_holds`"),
    )
    .await;
    exec(pool, format!("DROP SEQUENCE IF EXISTS `{t}_token_seq`")).await;
}

/// The tokens of `n` acquire + release cycles on `name`, alternating
/// between the two clients.
async fn cycles(a: &lockkit::LockClient, b: &lockkit::LockClient, name: &str, n: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for i in 0..n {
        let client = if i % 2 == 0 { a } else { b };
        let guard = client.lock(name).await.unwrap();
        tokens.push(guard.fencing_token());
        guard.unlock().await.unwrap();
    }
    tokens
}

fn assert_growing(tokens: &[u64]) {
    for w in tokens.windows(2) {
        assert!(w[1] > w[0], "tokens must grow: {tokens:?}");
    }
}

#[tokio::test]
async fn mariadb_new_table_draws_tokens_from_its_sequence() {
    let Some((url, pool, t)) = setup("seq").await else {
        return;
    };
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(version.contains("MariaDB"), "this suite's server is MariaDB: {version}");
    let url_t = format!("{url}?table={t}");
    let (a, b) = (
        lockkit::connect(&url_t).await.unwrap(),
        lockkit::connect(&url_t).await.unwrap(),
    );
    assert!(exists(&pool, &format!("{t}_token_seq")).await, "the sequence was made");
    assert_growing(&cycles(&a, &b, "x", 12).await);
    // Re-entry keeps the hold's token; a new hold draws a greater one.
    let outer = a.lock("y").await.unwrap();
    let inner = a.lock("y").await.unwrap();
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    let held = outer.fencing_token();
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let next = b.lock("y").await.unwrap();
    assert!(next.fencing_token() > held);
    next.unlock().await.unwrap();

    // What an older lockkit would run to stamp a hold: refused by the check.
    let old_stamp = format!(
        "INSERT INTO `{t}_tokens` (bucket, last_token) VALUES (3, LAST_INSERT_ID(1)) \
         ON DUPLICATE KEY UPDATE last_token = LAST_INSERT_ID(last_token + 1)"
    );
    let refused = sqlx::query(sqlx::AssertSqlSafe(old_stamp)).execute(&pool).await;
    assert!(
        refused.is_err(),
        "an older lockkit cannot draw tokens beside the sequence"
    );

    // A client that may not create the source is told what to run.
    let bare = table("bare");
    for part in ["", "_waiters", "_kinds", "_holds"] {
        exec(&pool, format!("CREATE TABLE `{bare}{part}` LIKE `{t}{part}`")).await;
    }
    let e = lockkit::connect(&format!("{url}?table={bare}&create_table=false"))
        .await
        .expect_err("no token source");
    match &e {
        LockError::InvalidConfig { reason, .. } => assert!(
            reason.contains(&format!("{bare}_token_seq")) && reason.contains("CREATE SEQUENCE"),
            "names the sequence and how to make it: {reason}"
        ),
        other => panic!("expected a schema error, got {other:?}"),
    }
    drop((a, b));
    drop_all(&pool, &t).await;
    drop_all(&pool, &bare).await;
    pool.close().await;
}

#[tokio::test]
async fn a_table_with_counter_rows_keeps_them() {
    let Some((url, pool, t)) = setup("rows").await else {
        return;
    };
    // As an older lockkit left it: counter rows far along.
    exec(
        &pool,
        format!(
            "CREATE TABLE `{t}_tokens` (bucket INT NOT NULL PRIMARY KEY, last_token BIGINT NOT NULL) ENGINE=InnoDB"
        ),
    )
    .await;
    let rows: Vec<String> = (0..64).map(|b| format!("({b}, 5000000)")).collect();
    exec(
        &pool,
        format!(
            "INSERT INTO `{t}_tokens` (bucket, last_token) VALUES {}",
            rows.join(", ")
        ),
    )
    .await;
    let url_t = format!("{url}?table={t}");
    let (a, b) = (
        lockkit::connect(&url_t).await.unwrap(),
        lockkit::connect(&url_t).await.unwrap(),
    );
    assert!(
        !exists(&pool, &format!("{t}_token_seq")).await,
        "no sequence beside counter rows"
    );
    let tokens = cycles(&a, &b, "x", 8).await;
    assert_growing(&tokens);
    assert!(
        tokens.iter().all(|&t| t > 5_000_000 && t < 5_000_100),
        "drawn from the counter rows: {tokens:?}"
    );
    drop((a, b));
    drop_all(&pool, &t).await;
    pool.close().await;
}

#[tokio::test]
async fn a_sequence_made_beside_holds_starts_above_their_tokens() {
    let Some((url, pool, t)) = setup("above").await else {
        return;
    };
    let url_t = format!("{url}?table={t}");
    let first = lockkit::connect(&url_t).await.unwrap();
    let held = first.lock("held").await.unwrap();
    drop(first);
    // The token source is gone (dropped by hand), the hold is not; and a
    // hold far along stands on another name.
    exec(&pool, format!("DROP SEQUENCE `{t}_token_seq`")).await;
    exec(&pool, format!("DROP TABLE `{t}_tokens`")).await;
    exec(&pool, format!("UPDATE `{t}` SET token = 7000000 WHERE name = 'held'")).await;
    let again = lockkit::connect(&url_t).await.unwrap();
    assert!(exists(&pool, &format!("{t}_token_seq")).await);
    let g = again.lock("other").await.unwrap();
    assert!(
        g.fencing_token() > 7_000_000,
        "the new sequence starts above the table's tokens: {}",
        g.fencing_token()
    );
    g.unlock().await.unwrap();
    drop(held);
    drop(again);
    drop_all(&pool, &t).await;
    pool.close().await;
}
