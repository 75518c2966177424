//! The watchdog's renewals under the client's own load: a client whose
//! pooled connections are all busy with its acquisitions still renews the
//! locks it holds.
//!
//! The bench's w4 (10,000 holds taken 64 at a time, 3 s lease) lost
//! thousands of holds on Postgres, and the suite's 5,000-hold test lost
//! one: the holds' renewals waited for a pooled connection behind the
//! client's own acquisitions, longer than the lease (seen as `PoolTimedOut`
//! after the 5 s `connect_timeout` on a loaded machine). Here the
//! acquisitions are made to block in the server, holding every connection,
//! for three leases of a hold the client already has.

#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::time::{Duration, Instant};

use lockkit::raw::{ExtendOutcome, Hold};

use lockkit_core::testkit::server_url;

/// Names the blocked acquisitions ask for: more than the pool has
/// connections, so that some wait for the pool too.
const BLOCKED: usize = 8;

async fn renewals_outlast_a_busy_pool(url: &str, table: &str) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let client = lockkit::connect(&format!("{url}{sep}table={table}&max_connections=4"))
        .await
        .unwrap();
    let other = lockkit::connect(&format!("{url}{sep}table={table}")).await.unwrap();
    let run = crate::common::tag();
    let ttl = Duration::from_secs(1);
    let held = client
        .lock_with(&format!("lockkit-test/renewals/{run}/held"), &client.options().ttl(ttl))
        .await
        .unwrap();
    // Names another owner holds, whose rows a transaction then locks: the
    // client's claims of them wait in the server, each on a connection.
    let names: Vec<String> = (0..BLOCKED)
        .map(|i| format!("lockkit-test/renewals/{run}/busy{i}"))
        .collect();
    let long = other.options().ttl(Duration::from_secs(60));
    let mut theirs = Vec::new();
    for name in &names {
        theirs.push(other.lock_with(name, &long).await.unwrap());
    }
    let blocker = RowBlocker::lock(url, table, &names).await;
    let waiting: Vec<_> = names
        .iter()
        .map(|name| {
            let (client, name) = (client.clone(), name.clone());
            let opts = client.options().wait(Duration::from_secs(60));
            tokio::spawn(async move { client.lock_with(&name, &opts).await })
        })
        .collect();
    // Three leases of the held lock, with every connection of its client
    // taken by a claim waiting for a row.
    tokio::time::sleep(ttl * 3).await;
    let lost = held.is_lost();
    let on_server = other.inspect(held.name()).await.unwrap().map(|i| (i.owner, i.token));
    blocker.release().await;
    for g in theirs {
        g.unlock().await.unwrap();
    }
    for w in waiting {
        w.await.unwrap().unwrap().unlock().await.unwrap();
    }
    assert!(
        !lost,
        "the held lock was lost while its client's connections were busy: {:?}",
        held.lost_reason()
    );
    assert_eq!(
        on_server,
        Some((client.owner().to_owned(), held.fencing_token())),
        "the server still has the hold"
    );
    held.unlock().await.unwrap();
}

/// A connection whose open transaction holds the row locks of some names
/// in a table
/// (one equality each: a list can be planned as a scan that, at MariaDB's
/// default isolation, locks every row of the table).
enum RowBlocker {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

impl RowBlocker {
    async fn lock(url: &str, table: &str, names: &[String]) -> Self {
        use sqlx::{Connection, Executor};
        match url.split(':').next() {
            #[cfg(feature = "mysql")]
            Some("mysql" | "mariadb") => {
                let mut conn = sqlx::MySqlConnection::connect(url).await.unwrap();
                conn.execute("BEGIN").await.unwrap();
                let sql = format!("SELECT name FROM `{table}` WHERE name = ? FOR UPDATE");
                for n in names {
                    let q = sqlx::query(sqlx::AssertSqlSafe(sql.clone())).bind(n.as_bytes());
                    assert!(!q.fetch_all(&mut conn).await.unwrap().is_empty(), "{n} has a row");
                }
                RowBlocker::Mysql(conn)
            }
            #[cfg(feature = "postgres")]
            Some("postgres" | "postgresql") => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                conn.execute("BEGIN").await.unwrap();
                let sql = format!("SELECT name FROM \"{table}\" WHERE name = $1 FOR UPDATE");
                for n in names {
                    let q = sqlx::query(sqlx::AssertSqlSafe(sql.clone())).bind(n.as_bytes());
                    assert!(!q.fetch_all(&mut conn).await.unwrap().is_empty(), "{n} has a row");
                }
                RowBlocker::Postgres(conn)
            }
            other => panic!("no row blocker for {other:?}"),
        }
    }

    async fn release(self) {
        use sqlx::Executor;
        match self {
            #[cfg(feature = "mysql")]
            RowBlocker::Mysql(mut conn) => drop(conn.execute("ROLLBACK").await.unwrap()),
            #[cfg(feature = "postgres")]
            RowBlocker::Postgres(mut conn) => drop(conn.execute("ROLLBACK").await.unwrap()),
        }
    }
}

/// A renewal batch of a mutex and a semaphore permit is two statements
/// (the kinds keep their holds in `<table>_holds`). Each hold's deadline
/// must count from its own statement: counted from the batch's last one,
/// the mutex's ran past its expiry on the server by as long as the
/// permit's statement waited — here, for a row lock, a second.
async fn each_part_of_a_renewal_counts_from_its_own_statement(url: &str, table: &str) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let client = lockkit::connect(&format!("{url}{sep}table={table}")).await.unwrap();
    let run = crate::common::tag();
    let ttl = Duration::from_secs(20);
    let opts = client.options().ttl(ttl).auto_extend(false);
    let mutex = client
        .lock_with(&format!("lockkit-test/renewal_parts/{run}/mutex"), &opts)
        .await
        .unwrap();
    let permits = client
        .semaphore(&format!("lockkit-test/renewal_parts/{run}/permits"), 2)
        .unwrap();
    let permit = permits.acquire_with(&opts).await.unwrap();
    let hold = |g: &lockkit::LockGuard| Hold {
        name: g.name().to_owned(),
        owner: g.owner().to_owned(),
        token: g.fencing_token(),
        kind: g.kind(),
    };
    let blocker = RowBlocker::lock(url, &format!("{table}_holds"), &[permit.name().to_owned()]).await;
    let unblock = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        blocker.release().await;
    });
    let outcomes = client
        .backend()
        .extend_many(&[(hold(&mutex), ttl), (hold(&permit), ttl)])
        .await;
    unblock.await.unwrap();
    let Ok(ExtendOutcome::Extended {
        valid_until: Some(deadline),
    }) = outcomes[0]
    else {
        panic!("the mutex was extended: {:?}", outcomes[0]);
    };
    assert!(
        matches!(outcomes[1], Ok(ExtendOutcome::Extended { .. })),
        "{:?}",
        outcomes[1]
    );
    let remaining = client.inspect(mutex.name()).await.unwrap().unwrap().remaining.unwrap();
    let expires_by = Instant::now() + remaining;
    assert!(
        deadline <= expires_by,
        "the mutex's deadline is {:?} past its expiry on the server",
        deadline - expires_by
    );
    mutex.unlock().await.unwrap();
    permit.unlock().await.unwrap();
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_renewals_outlast_a_busy_pool() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        renewals_outlast_a_busy_pool(&url, "lockkit_test_renewals").await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_renewals_outlast_a_busy_pool() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        renewals_outlast_a_busy_pool(&url, "lockkit_test_renewals").await;
    }
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_each_part_of_a_renewal_counts_from_its_own_statement() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        each_part_of_a_renewal_counts_from_its_own_statement(&url, "lockkit_test_renewal_parts").await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_each_part_of_a_renewal_counts_from_its_own_statement() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        each_part_of_a_renewal_counts_from_its_own_statement(&url, "lockkit_test_renewal_parts").await;
    }
}
