//! Concurrent first acquisitions of the same name: 16 clients race for each
//! of 20 fresh names. Exactly one wins each race, and nobody gets an error —
//! InnoDB deadlocks and lock waits of racing inserts, Postgres conflicts and
//! SQLite busy errors are retried inside the backend, never surfaced.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use futures_util_for_tests::join_all;
use lockkit::LockClient;
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

/// `join_all` without a dev-dependency on futures: spawn and await each.
mod futures_util_for_tests {
    pub async fn join_all<T: Send + 'static>(
        futures: impl IntoIterator<Item = impl std::future::Future<Output = T> + Send + 'static>,
    ) -> Vec<T> {
        let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
        let mut out = Vec::with_capacity(handles.len());
        for h in handles {
            out.push(h.await.expect("task"));
        }
        out
    }
}

async fn races(url: &str) {
    let mut clients: Vec<LockClient> = Vec::new();
    for _ in 0..16 {
        clients.push(lockkit::connect(url).await.expect("connect"));
    }
    let run = crate::common::tag();
    for round in 0..20 {
        let name = format!("lockkit-test/race/{run}/{round}");
        let attempts = clients.iter().cloned().map(|c| {
            let name = name.clone();
            async move { c.try_lock(&name).await }
        });
        let mut winners = Vec::new();
        for result in join_all(attempts).await {
            match result {
                Ok(Some(guard)) => winners.push(guard),
                Ok(None) => {}
                Err(e) => panic!("round {round}: a racing acquisition failed: {e:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one of 16 wins");
        for g in winners {
            g.unlock().await.unwrap();
        }
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_races() {
    let dir = tempfile::tempdir().unwrap();
    races(&format!("sqlite://{}/locks.db", dir.path().display())).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_races() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        races(&url).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_races() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        races(&url).await;
    }
}

/// A real InnoDB deadlock inside an acquisition is retried, not surfaced: a
/// heavy transaction locks every token counter row, the acquisition claims
/// its name and waits for its counter, then the heavy transaction asks for
/// the name. InnoDB breaks the cycle by rolling back the lighter side — the
/// acquisition — which must try again and succeed. The table is of the kind
/// that draws from counter rows (MySQL, or made by an older lockkit: its
/// `<table>_tokens` is there before the first connect); on MariaDB a new
/// table draws from a sequence, which no transaction can hold.
#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_deadlock_is_retried() {
    use sqlx::Connection;
    let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
        return;
    };
    let mut setup = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let table = format!("lockkit_deadlock_{}", &crate::common::tag()[..8]);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE `{table}_tokens` (bucket INT NOT NULL PRIMARY KEY, last_token BIGINT NOT NULL) ENGINE=InnoDB"
    )))
    .execute(&mut setup)
    .await
    .unwrap();
    let client = lockkit::connect(&format!("{url}?table={table}"))
        .await
        .expect("connect");
    let deadlocks = async |c: &mut sqlx::MySqlConnection| -> i64 {
        let (_, n): (String, String) = sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_deadlocks'")
            .fetch_one(c)
            .await
            .unwrap();
        n.parse().unwrap()
    };
    let before = deadlocks(&mut setup).await;
    // Every counter row exists, and a ballast table makes the other side heavy.
    let buckets: Vec<String> = (0..64).map(|b| format!("({b}, 0)")).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT IGNORE INTO `{table}_tokens` (bucket, last_token) VALUES {}",
        buckets.join(", ")
    )))
    .execute(&mut setup)
    .await
    .unwrap();
    sqlx::query("CREATE TABLE IF NOT EXISTS lockkit_test_ballast (id INT PRIMARY KEY, v INT NOT NULL)")
        .execute(&mut setup)
        .await
        .unwrap();
    let rows: Vec<String> = (0..200).map(|i| format!("({i}, 0)")).collect();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT IGNORE INTO lockkit_test_ballast (id, v) VALUES {}",
        rows.join(", ")
    )))
    .execute(&mut setup)
    .await
    .unwrap();

    let name = crate::common::unique("deadlock");
    let mut heavy = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let mut tx = heavy.begin().await.unwrap();
    sqlx::query("UPDATE lockkit_test_ballast SET v = v + 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT last_token FROM `{table}_tokens` FOR UPDATE"
    )))
    .fetch_all(&mut *tx)
    .await
    .unwrap();
    let (c, n) = (client.clone(), name.clone());
    let acquisition = tokio::spawn(async move { c.try_lock(&n).await });
    // Wait until the acquisition holds its (uncommitted) row: NOWAIT fails.
    let mut probe = sqlx::MySqlConnection::connect(&url).await.unwrap();
    let started = std::time::Instant::now();
    loop {
        let r = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT name FROM `{table}` WHERE name = ? FOR UPDATE NOWAIT"
        )))
        .bind(name.as_bytes())
        .fetch_all(&mut probe)
        .await;
        if r.is_err() {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "the acquisition never claimed its row"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    // Close the cycle; InnoDB rolls back the acquisition's transaction.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT name FROM `{table}` WHERE name = ? FOR UPDATE"
    )))
    .bind(name.as_bytes())
    .fetch_all(&mut *tx)
    .await
    .expect("the heavy transaction survives the deadlock");
    tx.commit().await.unwrap();
    let guard = acquisition
        .await
        .unwrap()
        .expect("the deadlock is retried, not surfaced")
        .expect("and the name is acquired");
    assert!(deadlocks(&mut setup).await > before, "a deadlock really happened");
    guard.unlock().await.unwrap();
    let seq: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(format!("{table}_token_seq"))
    .fetch_one(&mut setup)
    .await
    .unwrap();
    assert_eq!(seq, 0, "a table with counter rows keeps them: no sequence beside them");
    drop(client);
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "DROP TABLE `{table}`, `{table}_tokens`, `{table}_waiters`, `{table}_kinds`, `{table}_holds`"
    )))
    .execute(&mut setup)
    .await
    .unwrap();
}
