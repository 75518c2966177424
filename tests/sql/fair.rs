//! The SQL backend's fair line (the contract's fair by default) where the conformance
//! kit does not reach: a place left in `<table>_waiters` by a process that
//! is gone (nobody renews it) is skipped once its lease ends; a fair
//! `try_lock` refuses a free name while somebody waits, `fair=false`
//! barges, and the holder re-enters at once; a table made before the line
//! existed gets its waiter table, or with `create_table=false` a typed
//! error naming the statement to run.
//!
//! The "other process" is a row written straight into the waiter table, as
//! a waiter elsewhere would have, so the tests do not depend on timing
//! between two live waiters.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::{Duration, Instant};

use lockkit::LockClient;

use crate::common::unique;
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

/// Runs one statement on the database behind `url` (no lockkit; also the
/// other files' tests).
pub(crate) async fn raw(url: &str, sql: String) {
    let sql = sqlx::AssertSqlSafe(sql);
    match url.split(':').next() {
        #[cfg(feature = "sqlite")]
        Some("sqlite") => {
            use sqlx::Connection;
            let path = url.trim_start_matches("sqlite://");
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
                .await
                .unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
        #[cfg(feature = "mysql")]
        Some("mysql") => {
            use sqlx::Connection;
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
        #[cfg(feature = "postgres")]
        Some("postgres") => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut c).await.unwrap();
            c.close().await.unwrap();
        }
        other => panic!("no raw access to {other:?}"),
    }
}

/// Runs one query giving one integer on the database behind `url`.
async fn raw_int(url: &str, sql: String) -> i64 {
    let sql = sqlx::AssertSqlSafe(sql);
    match url.split(':').next() {
        #[cfg(feature = "sqlite")]
        Some("sqlite") => {
            use sqlx::Connection;
            let path = url.trim_start_matches("sqlite://");
            let mut c = sqlx::SqliteConnection::connect(&format!("sqlite://{path}"))
                .await
                .unwrap();
            let v: i64 = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
            c.close().await.unwrap();
            v
        }
        #[cfg(feature = "mysql")]
        Some("mysql") => {
            use sqlx::Connection;
            let mut c = sqlx::MySqlConnection::connect(url).await.unwrap();
            let v: i64 = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
            c.close().await.unwrap();
            v
        }
        #[cfg(feature = "postgres")]
        Some("postgres") => {
            use sqlx::Connection;
            let mut c = sqlx::PgConnection::connect(url).await.unwrap();
            let v: i64 = sqlx::query_scalar(sql).fetch_one(&mut c).await.unwrap();
            c.close().await.unwrap();
            v
        }
        other => panic!("no raw access to {other:?}"),
    }
}

/// `name` as a byte-string literal of the database behind `url`.
fn literal(url: &str, name: &str) -> String {
    let n = hex(name.as_bytes());
    if url.starts_with("postgres") {
        format!("'\\x{n}'")
    } else {
        format!("X'{n}'")
    }
}

/// The rows the lock table has for `name`, held or not.
async fn rows_for(url: &str, name: &str) -> i64 {
    let n = literal(url, name);
    raw_int(url, format!("SELECT COUNT(*) FROM lockkit_locks WHERE name = {n}")).await
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Puts a waiter of another (unseen) process in line for `name` in the
/// default table, with a lease of `lease` that nobody renews — as lockkit's
/// join does: the waiter row, and the name's row marked `queued` (a free one
/// if there is none; SQLite: the table's trigger does it).
async fn foreign_waiter(url: &str, name: &str, attempt: &str, lease: Duration) {
    let (n, us) = (hex(name.as_bytes()), lease.as_micros());
    let sql = match url.split(':').next() {
        Some("sqlite") => format!(
            "INSERT INTO lockkit_locks_waiters (name, owner, attempt, expires_at) VALUES (X'{n}', X'6f', '{attempt}', \
             CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER) + {us})"
        ),
        Some("mysql") => format!(
            "INSERT INTO lockkit_locks (name, owner, hold_count, token, expires_at, acquired_at, attempts, queued) \
             VALUES (X'{n}', X'', 0, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6), '', 1) ON DUPLICATE KEY UPDATE queued = 1; \
             INSERT INTO lockkit_locks_waiters (name, owner, attempt, expires_at) VALUES (X'{n}', X'6f', '{attempt}', \
             UTC_TIMESTAMP(6) + INTERVAL {us} MICROSECOND)"
        ),
        _ => format!(
            "INSERT INTO lockkit_locks (name, owner, hold_count, token, expires_at, acquired_at, attempts, queued) \
             VALUES ('\\x{n}', '', 0, 0, now(), now(), '', true) ON CONFLICT (name) DO UPDATE SET queued = true; \
             INSERT INTO lockkit_locks_waiters (name, owner, attempt, expires_at) VALUES ('\\x{n}', '\\x6f', '{attempt}', \
             now() + {us} * interval '1 microsecond')"
        ),
    };
    raw(url, sql).await;
}

async fn waiting(client: &LockClient, name: &str) -> usize {
    client.waiting(name).await.expect("waiting")
}

/// A place left by a process that is gone keeps the line only for its
/// lease: a fair `try_lock` is refused while it lasts, and a waiting `lock`
/// gets the free name soon after it ends (its first renewal tick looks again).
async fn dead_place_expires(url: String) {
    let client = lockkit::connect(&url).await.unwrap();
    let name = unique("dead_place");
    let lease = Duration::from_secs(2);
    foreign_waiter(&url, &name, &lockkit_core::raw::new_attempt_id(), lease).await;
    let joined = Instant::now();
    assert_eq!(waiting(&client, &name).await, 1, "the foreign place counts while live");
    assert!(
        client.try_lock(&name).await.unwrap().is_none(),
        "a fair try_lock does not take a free name somebody waits for"
    );
    let guard = client
        .lock_with(&name, &client.options().wait(Duration::from_secs(30)))
        .await
        .expect("served once the dead place expires");
    let waited = joined.elapsed();
    assert!(
        waited >= lease - Duration::from_millis(300),
        "served ahead of a live place ({waited:?})"
    );
    assert!(
        waited < lease + Duration::from_secs(10),
        "the dead place held the line for {waited:?}"
    );
    assert_eq!(waiting(&client, &name).await, 0, "expired places are not counted");
    guard.unlock().await.unwrap();
}

/// With somebody in line and the name free: a fair `try_lock` is refused,
/// an unfair one barges in; the holder re-enters at once (fair or not),
/// and once the line is empty a fair `try_lock` takes the name again.
async fn barging_and_reentry(url: String) {
    let client = lockkit::connect(&url).await.unwrap();
    let name = unique("barging");
    let attempt = lockkit_core::raw::new_attempt_id();
    foreign_waiter(&url, &name, &attempt, Duration::from_secs(60)).await;
    assert!(client.try_lock(&name).await.unwrap().is_none(), "fair: refused");
    let unfair = client.options().fair(false);
    let outer = client
        .try_lock_with(&name, &unfair)
        .await
        .unwrap()
        .expect("fair=false takes a free name whoever waits");
    let inner = client
        .try_lock(&name)
        .await
        .unwrap()
        .expect("the holder re-enters at once, even with others in line");
    assert_eq!((inner.hold_count(), inner.fencing_token()), (2, outer.fencing_token()));
    let waited = client
        .lock_with(&name, &client.options().wait(Duration::from_secs(5)))
        .await
        .expect("a waiting lock of the holder re-enters too");
    assert_eq!(waited.hold_count(), 3);
    assert_eq!(waiting(&client, &name).await, 1, "re-entries never queue");
    for g in [waited, inner, outer] {
        g.unlock().await.unwrap();
    }
    raw(
        &url,
        format!("DELETE FROM lockkit_locks_waiters WHERE attempt = '{attempt}'"),
    )
    .await;
    assert_eq!(waiting(&client, &name).await, 0);
    client
        .try_lock(&name)
        .await
        .unwrap()
        .expect("nobody waits: taken")
        .unlock()
        .await
        .unwrap();
}

/// A `lock` that gives up (its wait ran out, or its future is dropped)
/// leaves the line at once, not after its lease.
async fn givers_up_leave(url: String) {
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("give_up");
    let held = a.lock(&name).await.unwrap();
    let timed_out = b
        .lock_with(&name, &b.options().wait(Duration::from_millis(300)))
        .await
        .unwrap_err();
    assert!(
        matches!(timed_out, lockkit::LockError::WaitTimeout { .. }),
        "{timed_out:?}"
    );
    assert_eq!(waiting(&a, &name).await, 0, "the timed-out waiter left");
    let dropped = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.lock(&name).await })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while waiting(&a, &name).await != 1 {
        assert!(Instant::now() < deadline, "the waiter never joined the line");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    dropped.abort();
    let _ = dropped.await;
    // Well within the 5 s lease: the cancelled waiter's row went at once.
    let deadline = Instant::now() + Duration::from_secs(3);
    while waiting(&a, &name).await != 0 {
        assert!(Instant::now() < deadline, "the cancelled waiter's place stayed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.unlock().await.unwrap();
    assert!(b.try_lock(&name).await.unwrap().is_some(), "the line is empty");
}

/// Nobody waiting: a release deletes the row. Somebody in line: the
/// release leaves the row, free and marked, so that a fair `try_lock` of a
/// newcomer asks the line (and is refused while a live place is ahead of it)
/// instead of taking a name that has no row.
async fn release_leaves_the_line_a_row(url: String) {
    let client = lockkit::connect(&url).await.unwrap();
    let name = unique("line_row");
    client.lock(&name).await.unwrap().unlock().await.unwrap();
    assert_eq!(rows_for(&url, &name).await, 0, "nobody waited: the row went");
    let held = client.lock(&name).await.unwrap();
    let attempt = lockkit_core::raw::new_attempt_id();
    foreign_waiter(&url, &name, &attempt, Duration::from_secs(60)).await;
    held.unlock().await.unwrap();
    assert_eq!(rows_for(&url, &name).await, 1, "the line's row stays, free");
    assert!(client.inspect(&name).await.unwrap().is_none(), "and nobody holds it");
    assert!(client.try_lock(&name).await.unwrap().is_none(), "the waiter is first");
    raw(
        &url,
        format!("DELETE FROM lockkit_locks_waiters WHERE attempt = '{attempt}'"),
    )
    .await;
    let g = client.try_lock(&name).await.unwrap().expect("the line is empty");
    g.unlock().await.unwrap();
    assert_eq!(rows_for(&url, &name).await, 0, "the mark went with the line");
}

/// The sweeper deletes expired rows, but not the free row of a name whose
/// line has a live waiter.
async fn sweeper_spares_the_line(url: String) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let client = lockkit::connect(&format!("{url}{sep}sweep_interval=100ms"))
        .await
        .unwrap();
    let (name, stale) = (unique("swept_line"), unique("swept_stale"));
    foreign_waiter(
        &url,
        &name,
        &lockkit_core::raw::new_attempt_id(),
        Duration::from_secs(60),
    )
    .await;
    // A stale row of a crashed holder: the sweeper's sign of life.
    let held = client
        .lock_with(
            &stale,
            &client.options().ttl(Duration::from_millis(200)).auto_extend(false),
        )
        .await
        .unwrap();
    std::mem::forget(held);
    let deadline = Instant::now() + Duration::from_secs(30);
    while rows_for(&url, &stale).await != 0 {
        assert!(Instant::now() < deadline, "the sweeper never deleted the stale row");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(rows_for(&url, &name).await, 1, "the line's free row was spared");
    assert!(
        client.try_lock(&name).await.unwrap().is_none(),
        "the waiter is still first"
    );
}

/// A mark lost to a statement that ran on an older snapshot (here: the row
/// deleted by hand under a waiter) comes back with the next fair claim that
/// finds the name held (MySQL, Postgres; SQLite runs one writer at a time
/// and cannot lose one): at most one newcomer gets ahead of the line.
#[cfg(any(feature = "mysql", feature = "postgres"))]
async fn lost_mark_comes_back(url: String) {
    let (a, b) = (
        lockkit::connect(&url).await.unwrap(),
        lockkit::connect(&url).await.unwrap(),
    );
    let name = unique("lost_mark");
    let attempt = lockkit_core::raw::new_attempt_id();
    foreign_waiter(&url, &name, &attempt, Duration::from_secs(60)).await;
    let n = literal(&url, &name);
    raw(&url, format!("DELETE FROM lockkit_locks WHERE name = {n}")).await;
    let held = a.try_lock(&name).await.unwrap().expect("no row: nobody seems to wait");
    assert!(b.try_lock(&name).await.unwrap().is_none(), "held");
    held.unlock().await.unwrap();
    assert!(
        b.try_lock(&name).await.unwrap().is_none(),
        "b's busy claim marked the name again: the line decides"
    );
    raw(
        &url,
        format!("DELETE FROM lockkit_locks_waiters WHERE attempt = '{attempt}'"),
    )
    .await;
    b.try_lock(&name)
        .await
        .unwrap()
        .expect("the line is empty")
        .unlock()
        .await
        .unwrap();
}

#[cfg(feature = "sqlite")]
fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}", dir.path().join("fair.db").display())
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_fair_line() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    dead_place_expires(url.clone()).await;
    barging_and_reentry(url.clone()).await;
    release_leaves_the_line_a_row(url.clone()).await;
    sweeper_spares_the_line(url.clone()).await;
    givers_up_leave(url).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_fair_line() {
    let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
        return;
    };
    dead_place_expires(url.clone()).await;
    barging_and_reentry(url.clone()).await;
    release_leaves_the_line_a_row(url.clone()).await;
    sweeper_spares_the_line(url.clone()).await;
    lost_mark_comes_back(url.clone()).await;
    givers_up_leave(url).await;
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_fair_line() {
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    dead_place_expires(url.clone()).await;
    barging_and_reentry(url.clone()).await;
    release_leaves_the_line_a_row(url.clone()).await;
    sweeper_spares_the_line(url.clone()).await;
    lost_mark_comes_back(url.clone()).await;
    givers_up_leave(url).await;
}

/// A lock table made before the fair line existed: with
/// `create_table=false` the connect fails naming the waiter table and the
/// statement that creates it; a client that may create tables adds it.
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn sqlite_missing_waiter_table() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(&dir);
    drop(lockkit::connect(&url).await.unwrap());
    raw(&url, "DROP TABLE lockkit_locks_waiters".to_owned()).await;
    let e = lockkit::connect(&format!("{url}?create_table=false"))
        .await
        .expect_err("no waiter table and create_table=false");
    let message = e.to_string();
    assert!(
        message.contains("lockkit_locks_waiters") && message.contains("CREATE TABLE"),
        "names the table and how to create it: {message}"
    );
    assert!(matches!(e, lockkit::LockError::InvalidConfig { .. }), "{e:?}");
    let again = lockkit::connect(&url).await.expect("the waiter table is created");
    again.lock("x").await.unwrap().unlock().await.unwrap();
    drop(again);
    lockkit::connect(&format!("{url}?create_table=false"))
        .await
        .expect("now complete");
}
