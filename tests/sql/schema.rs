//! The SQL backend's configuration and schema handling: table names are
//! validated as identifiers, existing tables are checked and never
//! clobbered, names compare as exact bytes, connection failures are typed.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use lockkit::LockError;
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

#[cfg(any(feature = "mysql", feature = "postgres"))]
use crate::common::tag;

fn config_part(e: LockError) -> String {
    match e {
        LockError::InvalidConfig { part, .. } => part,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
#[tokio::test]
async fn hostile_table_names_are_invalid_config() {
    let mut urls = vec![];
    #[cfg(feature = "sqlite")]
    urls.push("sqlite::memory:");
    #[cfg(feature = "mysql")]
    urls.push("mysql://u:p@127.0.0.1:1/db");
    #[cfg(feature = "postgres")]
    urls.push("postgres://u:p@127.0.0.1:1/db");
    for base in urls {
        for table in [
            "locks;%20DROP%20TABLE%20x",
            "a.b",
            "%22quoted%22",
            "1locks",
            "l%60x",
            "",
        ] {
            let e = lockkit::connect(&format!("{base}?table={table}"))
                .await
                .expect_err("refused");
            assert_eq!(config_part(e), "query parameter table", "{base} table={table}");
        }
        let e = lockkit::connect(&format!("{base}?sweep_interval=soon"))
            .await
            .expect_err("bad duration");
        assert_eq!(config_part(e), "query parameter sweep_interval");
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_existing_tables_are_checked_not_clobbered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY, what TEXT)")
        .execute(&pool)
        .await
        .unwrap();
    sqlx::query("INSERT INTO orders (what) VALUES ('keep me')")
        .execute(&pool)
        .await
        .unwrap();
    let url = format!("sqlite://{}", path.display());
    let e = lockkit::connect(&format!("{url}?tabel=locks")).await.expect_err("typo");
    assert_eq!(config_part(e), "query parameter tabel");
    let e = lockkit::connect(&format!("{url}?table=orders"))
        .await
        .expect_err("not a lock table");
    assert!(e.to_string().contains("missing columns"), "{e}");
    assert_eq!(config_part(e), "query parameter table");
    let kept: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM orders")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(kept, 1, "the existing table is untouched");

    let e = lockkit::connect(&format!("{url}?table=missing&create_table=false"))
        .await
        .expect_err("missing table");
    assert!(e.to_string().contains("does not exist"), "{e}");

    // A lock table made by one client is used by the next, tokens and all.
    let a = lockkit::connect(&format!("{url}?table=my_locks")).await.unwrap();
    let g = a.lock("x").await.unwrap();
    let token = g.fencing_token();
    g.unlock().await.unwrap();
    drop(a);
    let b = lockkit::connect(&format!("{url}?table=my_locks")).await.unwrap();
    assert!(b.capabilities().durable_tokens, "a SQLite file keeps its tokens");
    let g = b.lock("x").await.unwrap();
    assert!(g.fencing_token() > token, "tokens survive a reconnect");
    g.unlock().await.unwrap();

    // The memo (seed 000's `memo` column: who took the lock, and why).
    let c = lockkit::connect(&format!("{url}?table=my_locks&memo=trade-center-1%20order%2042"))
        .await
        .unwrap();
    let g = c.lock("memo").await.unwrap();
    let memo: Option<String> = sqlx::query_scalar("SELECT memo FROM my_locks WHERE name = ?1")
        .bind("memo".as_bytes())
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(memo.as_deref(), Some("trade-center-1 order 42"));
    g.unlock().await.unwrap();
    pool.close().await;

    let memory = lockkit::connect("sqlite::memory:").await.unwrap();
    assert!(!memory.capabilities().durable_tokens, "an in-memory database does not");
    let g = memory.lock("x").await.unwrap();
    assert!(
        memory.with_new_owner().try_lock("x").await.unwrap().is_none(),
        "one in-memory database per backend, shared by its connections"
    );
    g.unlock().await.unwrap();
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_names_compare_as_exact_bytes() {
    let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
        return;
    };
    // MariaDB's default collation is case- and accent-insensitive and pads
    // trailing spaces; lock names must not be.
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let t = tag();
    let ga = a.lock(&format!("Case/{t}")).await.unwrap();
    for other in [format!("case/{t}"), format!("Case/{t} "), format!("Cäse/{t}")] {
        let g = b
            .try_lock(&other)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{other:?} is a different lock"));
        g.unlock().await.unwrap();
    }
    ga.unlock().await.unwrap();

    // A table whose name column compares case-insensitively is refused.
    let table = format!("lockkit_ci_{}", &t[t.len() - 8..]);
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE `{table}` (name VARCHAR(255) PRIMARY KEY, owner VARBINARY(255), hold_count BIGINT, \
         token BIGINT, expires_at DATETIME(6), acquired_at DATETIME(6), memo TEXT) \
         CHARACTER SET utf8mb4 COLLATE utf8mb4_general_ci"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let e = lockkit::connect(&format!("{url}?table={table}"))
        .await
        .expect_err("case-insensitive names are refused");
    assert!(e.to_string().contains("exact bytes"), "{e}");
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE `{table}`")))
        .execute(&pool)
        .await
        .unwrap();
    pool.close().await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_connection_failures_are_typed() {
    let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
        return;
    };
    let e = lockkit::connect("mysql://lockkit:lockkit@127.0.0.1:1/lockkit?connect_timeout=2s")
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(e, LockError::Backend { retryable: true, .. }),
        "refused is retryable: {e:?}"
    );
    let wrong = url.replacen("lockkit:lockkit@", "lockkit:wrong@", 1);
    let e = lockkit::connect(&format!("{wrong}?connect_timeout=5s"))
        .await
        .expect_err("bad password");
    match &e {
        LockError::Backend { retryable, .. } => assert!(!retryable, "a bad password is not retryable"),
        other => panic!("expected a backend error, got {other:?}"),
    }
    let cause = std::error::Error::source(&e)
        .expect("the driver error is chained")
        .to_string();
    assert!(cause.contains("denied"), "the cause is given: {cause}");
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_names_keep_nul_bytes() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let t = tag();
    let name = format!("nul\0{t}");
    let g = a.lock(&name).await.unwrap();
    assert_eq!(a.inspect(&name).await.unwrap().unwrap().name, name);
    let cut = format!("nul\0{}", &t[..t.len() - 1]);
    let other = b.try_lock(&cut).await.unwrap().expect("a prefix is a different lock");
    other.unlock().await.unwrap();
    let listed = b.list("nul\0", 1000).await.unwrap();
    assert!(listed.iter().any(|i| i.name == name), "list by a prefix with NUL");
    g.unlock().await.unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(15), async {
        while a.inspect(&name).await.unwrap().is_some() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("released");
}

/// A lock table made by a lockkit that did not record attempt ids (no
/// `attempts` column): with `create_table=false` it is refused with the
/// statement that adds the column; a client that may create tables adds it,
/// and holds count by attempt from then on.
async fn old_table_gains_attempts<F, Fut>(url: &str, table: &str, create: String, exec: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    exec(create).await;
    let e = lockkit::connect(&format!("{url}?table={table}&create_table=false"))
        .await
        .expect_err("a table without the attempts column");
    let message = e.to_string();
    assert!(
        message.contains("attempts") && message.contains("ADD COLUMN"),
        "names the column and how to add it: {message}"
    );
    assert_eq!(config_part(e), "query parameter table");
    let locks = lockkit::connect(&format!("{url}?table={table}"))
        .await
        .expect("the column is added");
    let outer = locks.lock("x").await.unwrap();
    let inner = locks.lock("x").await.unwrap();
    assert_eq!((outer.hold_count(), inner.hold_count()), (1, 2));
    assert_eq!(inner.unlock().await.unwrap().remaining_holds, 1);
    assert_eq!(outer.unlock().await.unwrap().remaining_holds, 0);
    assert!(locks.inspect("x").await.unwrap().is_none());
    drop(locks);
    // A second client finds the column there.
    let again = lockkit::connect(&format!("{url}?table={table}&create_table=false"))
        .await
        .expect("the upgraded table is used as it is");
    again.lock("x").await.unwrap().unlock().await.unwrap();
}

#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_old_table_gains_attempts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    let create = "CREATE TABLE old_locks (name BLOB PRIMARY KEY NOT NULL, owner BLOB NOT NULL, \
                  hold_count INTEGER NOT NULL, token INTEGER NOT NULL, expires_at INTEGER NOT NULL, \
                  acquired_at INTEGER NOT NULL, memo TEXT) WITHOUT ROWID";
    let url = format!("sqlite://{}", path.display());
    old_table_gains_attempts(&url, "old_locks", create.to_owned(), |sql| {
        let pool = pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        }
    })
    .await;
    pool.close().await;
}

/// A lock table made before the fair line marked rows (`attempts`, no
/// `queued`): refused with the statement to run under `create_table=false`;
/// otherwise the column is added and waiters mark the name from then on.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_old_table_gains_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let opts = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true);
    let pool = sqlx::SqlitePool::connect_with(opts).await.unwrap();
    sqlx::query(
        "CREATE TABLE old_locks (name BLOB PRIMARY KEY NOT NULL, owner BLOB NOT NULL, \
         hold_count INTEGER NOT NULL, token INTEGER NOT NULL, expires_at INTEGER NOT NULL, \
         acquired_at INTEGER NOT NULL, memo TEXT, attempts TEXT NOT NULL DEFAULT '') WITHOUT ROWID",
    )
    .execute(&pool)
    .await
    .unwrap();
    let url = format!("sqlite://{}", path.display());
    let e = lockkit::connect(&format!("{url}?table=old_locks&create_table=false"))
        .await
        .expect_err("a table without the queued column");
    let message = e.to_string();
    assert!(
        message.contains("`queued`") && message.contains("ADD COLUMN queued"),
        "names the column and how to add it: {message}"
    );
    let locks = lockkit::connect(&format!("{url}?table=old_locks"))
        .await
        .expect("the column is added");
    let held = locks.lock("x").await.unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock_with("x", &locks.options().owner("other")).await })
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while locks.waiting("x").await.unwrap() != 1 {
        assert!(std::time::Instant::now() < deadline, "the waiter never joined");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let queued: i64 = sqlx::query_scalar("SELECT queued FROM old_locks WHERE name = CAST('x' AS BLOB)")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(queued, 1, "the joining waiter marked the name");
    held.unlock().await.unwrap();
    waiter.await.unwrap().unwrap().unlock().await.unwrap();
    pool.close().await;
}

#[cfg(feature = "mysql")]
#[tokio::test]
async fn mysql_old_table_gains_attempts() {
    let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
        return;
    };
    let t = tag();
    let table = format!("lockkit_old_{}", &t[t.len() - 8..]);
    let pool = sqlx::MySqlPool::connect(&url).await.unwrap();
    let create = format!(
        "CREATE TABLE `{table}` (name VARBINARY(255) NOT NULL, owner VARBINARY(255) NOT NULL, \
         hold_count BIGINT NOT NULL, token BIGINT NOT NULL, expires_at DATETIME(6) NOT NULL, \
         acquired_at DATETIME(6) NOT NULL, memo VARCHAR(1024) NULL, PRIMARY KEY (name)) ENGINE=InnoDB"
    );
    let exec = |sql: String| {
        let pool = pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        }
    };
    old_table_gains_attempts(&url, &table, create, exec).await;
    exec(format!(
        "DROP TABLE `{table}`, `{table}_tokens`, `{table}_waiters`, `{table}_kinds`, `{table}_holds`"
    ))
    .await;
    exec(format!("DROP SEQUENCE `{table}_token_seq`")).await;
    pool.close().await;
}

#[cfg(feature = "postgres")]
#[tokio::test]
async fn postgres_old_table_gains_attempts() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let t = tag();
    let table = format!("lockkit_old_{}", &t[t.len() - 8..]);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let create = format!(
        "CREATE TABLE \"{table}\" (name BYTEA PRIMARY KEY, owner BYTEA NOT NULL, hold_count BIGINT NOT NULL, \
         token BIGINT NOT NULL, expires_at TIMESTAMPTZ NOT NULL, acquired_at TIMESTAMPTZ NOT NULL, memo TEXT)"
    );
    let exec = |sql: String| {
        let pool = pool.clone();
        async move {
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&pool).await.unwrap();
        }
    };
    old_table_gains_attempts(&url, &table, create, exec).await;
    exec(format!(
        "DROP TABLE \"{table}\", \"{table}_waiters\", \"{table}_kinds\", \"{table}_holds\""
    ))
    .await;
    exec(format!("DROP SEQUENCE \"{table}_token_seq\"")).await;
    pool.close().await;
}
