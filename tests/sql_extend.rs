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
