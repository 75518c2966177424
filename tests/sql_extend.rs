//! `extend_many` on the SQL backends: 300 holds with two ttls (more than one
//! statement's chunk) and some that are not held, extended in batches, one
//! outcome per hold, in order.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::time::Duration;

use lockkit::LockClient;
use lockkit::backend::{ExtendOutcome, Hold};
#[cfg(any(feature = "mysql", feature = "postgres"))]
use lockkit_core::testkit::server_url;

async fn extend_many(client: LockClient) {
    assert!(client.capabilities().batch_extend);
    let run = format!(
        "{:x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let opts = client.options().ttl(Duration::from_secs(5)).auto_extend(false);
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

/// The watchdog keeps thousands of holds alive at a short ttl: held while
/// they are being taken (the first ones wait for the last) and for several
/// renewal periods after, none lost, each still held by us at the end.
async fn many_held_stay_held(client: LockClient, n: usize) {
    let run = format!("{:08x}", rand_u32());
    // Renewed every third of it: 5,000 holds are 20 batched statements per
    // period, which a machine busy with a torture run and a build beside
    // the suite delayed past a 3 s lease's last third (MariaDB, twice).
    let ttl = Duration::from_secs(5);
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
    tokio::time::sleep(ttl * 2).await;
    let lost: Vec<String> = guards
        .iter()
        .filter(|g| g.is_lost())
        .map(|g| format!("{} ({:?})", g.name(), g.lost_reason()))
        .take(5)
        .collect();
    assert!(lost.is_empty(), "lost while auto-extended, e.g. {lost:?}");
    for g in guards {
        g.unlock().await.expect("still held, so released");
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
