//! The SQL backends under a least-privilege database user (issue 8):
//! `lockkit_app` (made by `scripts/services`) has no rights of its own; the
//! table owner creates the lock table (by connecting once) and grants the
//! app user only SELECT, INSERT, UPDATE, DELETE on it, its waiter table
//! (`<table>_waiters`, the fair line) and its token counter (MariaDB:
//! SELECT and INSERT on the `<table>_token_seq` sequence, `NEXTVAL` being an
//! insert — MySQL: the `<table>_tokens` table; Postgres: USAGE on the
//! `<table>_token_seq` sequence), and the tables of semaphores and read-write locks
//! (`<table>_kinds`, `<table>_holds`). With that, the app user locks, extends,
//! unlocks, gets growing fencing tokens and runs the sweeper, but cannot
//! create, alter or drop tables; before the table exists it gets a typed
//! error naming the missing table.
#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::time::{Duration, Instant};

use lockkit::{LockError, LockOptions};
use lockkit_core::testkit::server_url;

fn unique_table() -> String {
    format!("priv_{}", &crate::common::tag()[..12])
}

/// What differs between the two databases: running one statement as a user.
trait Raw {
    async fn exec(url: &str, sql: &str) -> Result<(), String>;
    async fn count(url: &str, table: &str) -> i64;
    fn grants(table: &str) -> Vec<String>;
    /// The grants on the tables of semaphores and read-write locks.
    fn kind_grants(table: &str) -> Vec<String>;
    fn cleanup(table: &str) -> Vec<String>;
    fn quote(table: &str) -> String;
}

#[cfg(feature = "mysql")]
struct Mysql;

#[cfg(feature = "mysql")]
impl Raw for Mysql {
    async fn exec(url: &str, sql: &str) -> Result<(), String> {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(url).await.map_err(|e| e.to_string())?;
        let r = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut c).await;
        let _ = c.close().await;
        r.map(|_| ()).map_err(|e| e.to_string())
    }
    async fn count(url: &str, table: &str) -> i64 {
        let pool = sqlx::MySqlPool::connect(url).await.unwrap();
        let n = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM `{table}`")))
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }
    fn grants(t: &str) -> Vec<String> {
        let seq =
            format!("GRANT SELECT, INSERT ON `{t}_token_seq` TO 'lockkit_app'@'127.0.0.1', 'lockkit_app'@'localhost'");
        [t.to_owned(), format!("{t}_waiters")]
            .iter()
            .map(|obj| Self::dml(obj))
            .chain([seq])
            .collect()
    }
    fn kind_grants(t: &str) -> Vec<String> {
        [format!("{t}_kinds"), format!("{t}_holds")]
            .iter()
            .map(|obj| Self::dml(obj))
            .collect()
    }
    fn cleanup(t: &str) -> Vec<String> {
        vec![
            format!("DROP TABLE IF EXISTS `{t}`, `{t}_tokens`, `{t}_waiters`, `{t}_kinds`, `{t}_holds`"),
            format!("DROP SEQUENCE IF EXISTS `{t}_token_seq`"),
        ]
    }
    fn quote(t: &str) -> String {
        format!("`{t}`")
    }
}

#[cfg(feature = "mysql")]
impl Mysql {
    fn dml(obj: &str) -> String {
        format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON `{obj}` TO 'lockkit_app'@'127.0.0.1', 'lockkit_app'@'localhost'"
        )
    }
}

#[cfg(feature = "postgres")]
struct Postgres;

#[cfg(feature = "postgres")]
impl Raw for Postgres {
    async fn exec(url: &str, sql: &str) -> Result<(), String> {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(url).await.map_err(|e| e.to_string())?;
        let r = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned())).execute(&mut c).await;
        let _ = c.close().await;
        r.map(|_| ()).map_err(|e| e.to_string())
    }
    async fn count(url: &str, table: &str) -> i64 {
        let pool = sqlx::PgPool::connect(url).await.unwrap();
        let n = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM \"{table}\"")))
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        n
    }
    fn grants(t: &str) -> Vec<String> {
        vec![
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON \"{t}\" TO lockkit_app"),
            format!("GRANT USAGE ON SEQUENCE \"{t}_token_seq\" TO lockkit_app"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE ON \"{t}_waiters\" TO lockkit_app"),
        ]
    }
    fn kind_grants(t: &str) -> Vec<String> {
        vec![format!(
            "GRANT SELECT, INSERT, UPDATE, DELETE ON \"{t}_kinds\", \"{t}_holds\" TO lockkit_app"
        )]
    }
    fn cleanup(t: &str) -> Vec<String> {
        vec![
            format!("DROP TABLE IF EXISTS \"{t}\""),
            format!("DROP TABLE IF EXISTS \"{t}_waiters\""),
            format!("DROP TABLE IF EXISTS \"{t}_kinds\""),
            format!("DROP TABLE IF EXISTS \"{t}_holds\""),
            format!("DROP SEQUENCE IF EXISTS \"{t}_token_seq\""),
        ]
    }
    fn quote(t: &str) -> String {
        format!("\"{t}\"")
    }
}

async fn least_privilege<R: Raw>(label: &str, admin: &str, app: &str) {
    let t = unique_table();
    let result = scenario::<R>(label, admin, app, &t).await;
    for stmt in R::cleanup(&t) {
        R::exec(admin, &stmt)
            .await
            .unwrap_or_else(|e| panic!("{label}: cleanup: {e}"));
    }
    result.unwrap_or_else(|e| panic!("{label}: {e}"));
}

async fn scenario<R: Raw>(label: &str, admin: &str, app: &str, t: &str) -> Result<(), String> {
    // Before any grant: refused, typed and permanent (MariaDB refuses the
    // database itself to a user with no rights in it; Postgres the CREATE).
    let e = lockkit::connect(&format!("{app}?table={t}"))
        .await
        .expect_err("no table and no CREATE right");
    assert!(
        matches!(e, LockError::Backend { retryable: false, .. }),
        "{label}: {e:?}"
    );

    // The owner creates it by connecting once, and grants the app user DML.
    let owner = lockkit::connect(&format!("{admin}?table={t}"))
        .await
        .map_err(|e| e.to_line())?;
    drop(owner);
    for grant in R::grants(t) {
        R::exec(admin, &grant).await?;
    }

    // Granted what an older lockkit needed only: the app user keeps its
    // mutexes; semaphores fail, typed and permanent.
    let older = lockkit::connect(&format!("{app}?table={t}"))
        .await
        .map_err(|e| e.to_line())?;
    let g = older.lock("older").await.map_err(|e| e.to_line())?;
    g.unlock().await.map_err(|e| e.to_line())?;
    let sem = older.semaphore("older", 1).map_err(|e| e.to_line())?;
    let e = sem
        .try_acquire()
        .await
        .expect_err("no rights on the semaphores' tables");
    assert!(
        matches!(e, LockError::Backend { retryable: false, .. }),
        "{label}: {e:?}"
    );
    drop(older);
    for grant in R::kind_grants(t) {
        R::exec(admin, &grant).await?;
    }

    // A table that does not exist: the app user may not create it, and the
    // error names it.
    let missing = format!("{t}_none");
    let e = lockkit::connect(&format!("{app}?table={missing}"))
        .await
        .expect_err("no table and no CREATE right");
    let line = lockkit::one_line(&e);
    assert!(
        matches!(
            e,
            LockError::Backend {
                operation: "create table",
                retryable: false,
                ..
            }
        ),
        "{label}: {e:?}"
    );
    assert!(
        line.contains(&format!("{missing:?} does not exist")) && line.contains("may not create"),
        "{label}: {line}"
    );

    // The app user: lock, extend, re-enter, unlock, tokens, waiting.
    let url = format!("{app}?table={t}&sweep_interval=200ms");
    let a = lockkit::connect(&url).await.map_err(|e| e.to_line())?;
    let b = lockkit::connect(&url).await.map_err(|e| e.to_line())?;
    let g = a.lock("order:42").await.map_err(|e| e.to_line())?;
    let t1 = g.fencing_token();
    assert!(b.try_lock("order:42").await.map_err(|e| e.to_line())?.is_none());
    g.extend(Duration::from_secs(20)).await.map_err(|e| e.to_line())?;
    let again = a.lock("order:42").await.map_err(|e| e.to_line())?;
    assert_eq!(
        (again.hold_count(), again.fencing_token()),
        (2, t1),
        "{label}: re-entry"
    );
    again.unlock().await.map_err(|e| e.to_line())?;
    let waiter = tokio::spawn({
        let b = b.clone();
        async move {
            b.lock_with("order:42", &b.options().wait(Duration::from_secs(15)))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(g.unlock().await.map_err(|e| e.to_line())?.is_free());
    let g2 = waiter.await.unwrap().map_err(|e| e.to_line())?;
    assert!(g2.fencing_token() > t1, "{label}: tokens grow");
    g2.unlock().await.map_err(|e| e.to_line())?;

    // Semaphores and read-write locks (`<table>_kinds`, `<table>_holds`).
    let sem = a.semaphore("pool", 2).map_err(|e| e.to_line())?;
    let p1 = sem.acquire().await.map_err(|e| e.to_line())?;
    let p2 = sem.acquire().await.map_err(|e| e.to_line())?;
    assert!(p2.fencing_token() > p1.fencing_token(), "{label}: permit tokens grow");
    let sem_b = b.semaphore("pool", 2).map_err(|e| e.to_line())?;
    assert!(
        sem_b.try_acquire().await.map_err(|e| e.to_line())?.is_none(),
        "{label}: 2 permits"
    );
    p1.unlock().await.map_err(|e| e.to_line())?;
    p2.unlock().await.map_err(|e| e.to_line())?;
    let (rw_a, rw_b) = (
        a.rw_lock("doc").map_err(|e| e.to_line())?,
        b.rw_lock("doc").map_err(|e| e.to_line())?,
    );
    let w = rw_a.write().await.map_err(|e| e.to_line())?;
    assert!(
        rw_b.try_read().await.map_err(|e| e.to_line())?.is_none(),
        "{label}: written"
    );
    let written = w.fencing_token();
    w.unlock().await.map_err(|e| e.to_line())?;
    let r = rw_b.read().await.map_err(|e| e.to_line())?;
    assert_eq!(r.fencing_token(), written, "{label}: readers carry the write token");
    r.unlock().await.map_err(|e| e.to_line())?;

    // The sweeper, run by the app user, deletes abandoned expired rows (a
    // mutex's, a permit's).
    let short = LockOptions::new().ttl(Duration::from_millis(300)).auto_extend(false);
    a.lock_with("abandoned", &short)
        .await
        .map_err(|e| e.to_line())?
        .abandon();
    a.semaphore("abandoned", 1)
        .map_err(|e| e.to_line())?
        .acquire_with(&short)
        .await
        .map_err(|e| e.to_line())?
        .abandon();
    let holds = format!("{t}_holds");
    assert_eq!(R::count(admin, t).await, 1, "{label}: the abandoned row is there");
    assert_eq!(
        R::count(admin, &holds).await,
        1,
        "{label}: the abandoned permit is there"
    );
    let started = Instant::now();
    while R::count(admin, t).await + R::count(admin, &holds).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{label}: the app user's sweeper did not delete the expired rows"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop((a, b));

    // And nothing else: the server refuses DDL from the app user.
    let q = R::quote(t);
    for stmt in [
        format!("DROP TABLE {q}"),
        format!("ALTER TABLE {q} ADD COLUMN extra INT"),
        format!("CREATE TABLE {t}_x (a INT)"),
        format!("TRUNCATE TABLE {q}"),
    ] {
        let e = R::exec(app, &stmt)
            .await
            .expect_err(&format!("{label}: the app user ran {stmt}"));
        assert!(
            e.contains("denied") || e.contains("must be owner") || e.contains("permission"),
            "{label}: {stmt}: {e}"
        );
    }
    // The table is still there for the owner.
    assert_eq!(R::count(admin, t).await, 0);
    Ok(())
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_least_privilege_user() {
    let (Some(admin), Some(app)) = (server_url("LOCKKIT_MYSQL_URL"), server_url("LOCKKIT_MYSQL_APP_URL")) else {
        return;
    };
    least_privilege::<Mysql>("mariadb", &admin, &app).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_least_privilege_user() {
    let (Some(admin), Some(app)) = (
        server_url("LOCKKIT_POSTGRES_URL"),
        server_url("LOCKKIT_POSTGRES_APP_URL"),
    ) else {
        return;
    };
    least_privilege::<Postgres>("postgres", &admin, &app).await;
}
