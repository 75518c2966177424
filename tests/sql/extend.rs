//! `extend_many` on the SQL backends: 300 holds with two ttls (more than one
//! statement's chunk) and some that are not held, extended in batches, one
//! outcome per hold, in order.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use lockkit::LockClient;
use lockkit::raw::{ExtendOutcome, Hold};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

async fn extend_many(client: LockClient) {
    assert!(client.capabilities().batch_extend);
    let run = crate::common::tag();
    // Long enough to outlast taking 300 locks one after another on a busy
    // machine (5 s once ran out on MySQL before the batch extend came),
    // short enough that the extensions to 30 and 45 s lengthen it.
    let opts = client.options().ttl(Duration::from_secs(20)).auto_extend(false);
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(
            client
                .lock_with(&format!("lockkit-test/extend_many/{run}/{i:03}"), &opts)
                .await
                .unwrap(),
        );
    }
    let mut holds: Vec<(Hold, Duration)> = guards
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let ttl = if i % 2 == 0 { 30 } else { 45 };
            let hold = Hold {
                name: g.name().to_owned(),
                owner: client.owner().to_owned(),
                token: g.fencing_token(),
                kind: lockkit_core::LockKind::Mutex,
            };
            (hold, Duration::from_secs(ttl))
        })
        .collect();
    // Not held: a wrong token, a wrong owner, a name nobody holds.
    let bogus = [7, 150, 299];
    for &i in &bogus[..2] {
        let mut h = holds[i].0.clone();
        if i == 7 {
            h.token += 1;
        } else {
            h.owner = "somebody-else".to_owned();
        }
        holds.insert(i, (h, Duration::from_secs(30)));
    }
    holds.push((
        Hold {
            name: format!("lockkit-test/extend_many/{run}/never"),
            owner: client.owner().to_owned(),
            token: 1,
            kind: lockkit_core::LockKind::Mutex,
        },
        Duration::from_secs(30),
    ));
    let results = client.backend().extend_many(&holds).await;
    assert_eq!(results.len(), holds.len(), "one outcome per hold");
    for ((hold, ttl), result) in holds.iter().zip(&results) {
        let real = guards
            .iter()
            .any(|g| g.name() == hold.name && g.fencing_token() == hold.token && hold.owner == client.owner());
        match result {
            Ok(ExtendOutcome::Extended { valid_until }) => {
                assert!(real, "{hold:?} is not held but was extended");
                let left = valid_until.expect("ttl lease") - std::time::Instant::now();
                assert!(
                    left > *ttl - Duration::from_secs(5),
                    "{hold:?} extended to {ttl:?}, {left:?} left"
                );
            }
            Ok(ExtendOutcome::NotHeld) => assert!(!real, "{hold:?} is held but was not extended"),
            Err(e) => panic!("extend_many: {e}"),
        }
    }
    for g in guards {
        let info = client.inspect(g.name()).await.unwrap().expect("still held");
        assert!(
            info.remaining.unwrap() > Duration::from_secs(20),
            "the lease was extended"
        );
        g.unlock().await.unwrap();
    }
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_extend_many() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    extend_many(lockkit::connect(&url).await.unwrap()).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_extend_many() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        extend_many(lockkit::connect(&url).await.unwrap()).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_extend_many() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        extend_many(lockkit::connect(&url).await.unwrap()).await;
    }
}

/// The watchdog keeps thousands of holds alive: held while
/// they are being taken (the first ones wait for the last) and for several
/// renewal periods after, none lost, each still held by us at the end.
async fn many_held_stay_held(client: LockClient, n: usize) {
    let run = format!("{:08x}", rand_u32());
    // Renewed every third of it: 5,000 holds are 20 batched statements per
    // period. Each commits, and a commit waits for the disk: a machine
    // busy with a torture run and a build beside the suite delayed them
    // past a 3 s lease's last third (MariaDB, twice), and a disk flushing
    // a freshly built test binary past a 5 s one's (Postgres in CI; 2.5 s
    // per extension with a large write beside the test). The lease is long
    // so that what fails here is the watchdog, not the disk.
    let ttl = Duration::from_secs(12);
    let opts = client.options().ttl(ttl);
    let mut guards = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        let batch = chunk.iter().map(|i| {
            let (client, name, opts) = (
                client.clone(),
                format!("lockkit-test/many_held/{run}/{i}"),
                opts.clone(),
            );
            async move { client.lock_with(&name, &opts).await }
        });
        for g in futures_util::future::join_all(batch).await {
            guards.push(g.expect("lock"));
        }
    }
    // Three renewals of every hold (and more of the first ones, renewed
    // while the last were taken).
    tokio::time::sleep(ttl).await;
    let lost: Vec<String> = guards
        .iter()
        .filter(|g| g.is_lost())
        .map(|g| format!("{} ({:?})", g.name(), g.lost_reason()))
        .take(5)
        .collect();
    assert!(lost.is_empty(), "lost while auto-extended, e.g. {lost:?}");
    // Released one at a time, a while on a busy machine: each is looked
    // at again as its release goes out. A guard not lost then whose
    // release finds no hold would mean the server let go first.
    for g in guards {
        let name = g.name().to_owned();
        assert!(!g.is_lost(), "{name} lost while auto-extended ({:?})", g.lost_reason());
        g.unlock()
            .await
            .unwrap_or_else(|e| panic!("{name} was not lost as its release went out, so it is released: {e}"));
    }
}

fn rand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

#[cfg(feature = "sqlite")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_many_held_stay_held() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/locks.db", dir.path().display());
    many_held_stay_held(lockkit::connect(&url).await.unwrap(), 5_000).await;
}

#[cfg(feature = "mysql")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_many_held_stay_held() {
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        many_held_stay_held(lockkit::connect(&url).await.unwrap(), 5_000).await;
    }
}

#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_many_held_stay_held() {
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        many_held_stay_held(lockkit::connect(&url).await.unwrap(), 5_000).await;
    }
}

/// A lease counts from when its statement went out, not from when the
/// call began: a `lock` that first waited for a pooled connection for
/// longer than its ttl was granted already lost. The bench's w4 (1,000
/// auto-extended holds at a 900 ms ttl, taken 64 at a time) lost 7 of the
/// first 10 on a busy machine: those calls waited while the pool opened
/// its connections.
///
/// Here the backend has one connection, and it is busy: its statement
/// waits for a table lock another session holds for twice the ttl. A
/// second `lock`, of another name, waits for that connection meanwhile.
#[cfg(feature = "postgres")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_lease_counts_from_the_statement_not_the_pool_wait() {
    use sqlx::Connection;
    let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
        return;
    };
    let table = "lockkit_test_pool_wait";
    let client = lockkit::connect(&format!("{url}?table={table}&max_connections=1"))
        .await
        .unwrap();
    let ttl = Duration::from_secs(1);
    let opts = client.options().ttl(ttl).auto_extend(false);
    // The table exists once one lock went through.
    drop(client.lock_with("lockkit-test/pool_wait/setup", &opts).await.unwrap());

    let mut blocker = sqlx::PgConnection::connect(&url).await.unwrap();
    let mut tx = blocker.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE"
    )))
    .execute(&mut *tx)
    .await
    .unwrap();
    let run = format!("{:x}", std::process::id());
    let busy = {
        let (client, opts) = (client.clone(), opts.clone());
        let name = format!("lockkit-test/pool_wait/{run}/busy");
        tokio::spawn(async move { client.lock_with(&name, &opts).await })
    };
    // The busy call's statement holds the connection, waiting in the server.
    let mut probe = sqlx::PgConnection::connect(&url).await.unwrap();
    let blocked = format!("SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = '{table}'::regclass");
    let bound = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (n,): (i64,) = sqlx::query_as(sqlx::AssertSqlSafe(blocked.clone()))
            .fetch_one(&mut probe)
            .await
            .unwrap();
        if n > 0 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < bound,
            "the busy call's statement never waited"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let waiting = {
        let (client, opts) = (client.clone(), opts.clone());
        let name = format!("lockkit-test/pool_wait/{run}/waiting");
        tokio::spawn(async move { client.lock_with(&name, &opts).await })
    };
    // Three renewals of every hold (and more of the first ones, renewed
    // while the last were taken).
    tokio::time::sleep(ttl).await;
    tx.rollback().await.unwrap();

    let busy = busy.await.unwrap().unwrap();
    let waiting = waiting.await.unwrap().unwrap();
    assert!(
        !waiting.is_lost(),
        "the lock that waited for the pool was granted lost; valid until {:?}",
        waiting.valid_until()
    );
    waiting.unlock().await.unwrap();
    // The busy call's statement waited in the server: when it ran is not
    // known, so its lease may well be over (nothing asserted of it).
    let _ = busy.unlock().await;
}
