//! The facade: URL dispatch and its typed errors, and guards that outlive
//! their runtime.

use std::time::Duration;

use lockkit::{Connect, LockClient, LockError};

fn config_part(r: Result<LockClient, LockError>) -> String {
    match r {
        Err(LockError::InvalidConfig { part, reason }) => {
            assert!(!reason.is_empty());
            part
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn bad_urls_name_the_wrong_part() {
    assert_eq!(config_part(lockkit::connect("").await), "url");
    assert_eq!(config_part(lockkit::connect("localhost:6379").await), "url scheme");
    assert_eq!(config_part(lockkit::connect("ftp://host/").await), "url scheme");
    assert_eq!(
        config_part(lockkit::connect("memory://?ttl=soon").await),
        "query parameter ttl"
    );
    assert_eq!(
        config_part(lockkit::connect("memory://?ttl=0s").await),
        "query parameter ttl"
    );
    assert_eq!(
        config_part(lockkit::connect("memory://?ttl=1000d").await),
        "query parameter ttl"
    );
    assert_eq!(
        config_part(lockkit::connect("memory://?wait=-1s").await),
        "query parameter wait"
    );
    assert_eq!(
        config_part(lockkit::connect("memory://?owner=").await),
        "query parameter owner"
    );
    assert_eq!(
        config_part(lockkit::connect("memory://?tll=5s").await),
        "query parameter tll"
    );
    assert_eq!(config_part(lockkit::connect("memory://store/path").await), "url path");
}

#[tokio::test]
async fn schemes_without_their_feature_say_which_feature() {
    let mut off = vec![];
    if !cfg!(feature = "zookeeper") {
        off.push(("zk://127.0.0.1:2181/x", "zookeeper"));
    }
    if !cfg!(feature = "redis") {
        off.push(("redis://127.0.0.1:1", "redis"));
        off.push(("redlock://127.0.0.1:1,127.0.0.1:2", "redis"));
    }
    if !cfg!(feature = "mysql") {
        off.push(("mysql://u:p@127.0.0.1:1/db", "mysql"));
    }
    if !cfg!(feature = "postgres") {
        off.push(("postgres://u:p@127.0.0.1:1/db", "postgres"));
    }
    if !cfg!(feature = "sqlite") {
        off.push(("sqlite::memory:", "sqlite"));
    }
    for (url, feature) in off {
        match lockkit::connect(url).await {
            Err(e @ LockError::FeatureDisabled { .. }) => {
                assert!(e.to_string().contains(&format!("`{feature}`")), "{e}");
            }
            other => panic!("{url}: expected FeatureDisabled, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn url_options_become_client_defaults() {
    let client = LockClient::connect("memory://facade-defaults?ttl=5s&wait=1s&owner=trade-center-1")
        .await
        .unwrap();
    assert_eq!(client.owner(), "trade-center-1");
    assert_eq!(client.options().ttl_value(), Duration::from_secs(5));
    assert_eq!(client.options().wait_value(), Some(Duration::from_secs(1)));
    let g = client.lock("x").await.unwrap();
    let info = client.inspect("x").await.unwrap().unwrap();
    assert!(info.remaining.unwrap() <= Duration::from_secs(5));
    // Same store, another owner: waits its 1 s default bound and times out.
    let other = lockkit::connect("memory://facade-defaults?wait=200ms").await.unwrap();
    assert!(matches!(other.lock("x").await, Err(LockError::WaitTimeout { .. })));
    g.unlock().await.unwrap();
}

/// A guard dropped after its runtime is gone neither panics nor releases:
/// its lease runs out after the ttl, and then another owner acquires.
#[test]
fn guard_dropped_without_a_runtime() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (client, guard) = rt.block_on(async {
        let client = lockkit::connect("memory://no-runtime?ttl=300ms").await.unwrap();
        let guard = client.lock("orphan").await.unwrap();
        (client, guard)
    });
    drop(rt);
    drop(guard);
    drop(client);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let other = lockkit::connect("memory://no-runtime?wait=10s").await.unwrap();
        let g = other.lock("orphan").await.expect("free after the ttl");
        g.unlock().await.unwrap();
    });
}

/// Dropping a guard in a runtime releases at once, in the background.
#[tokio::test]
async fn dropped_guard_releases_promptly() {
    let a = lockkit::connect("memory://drop?ttl=60s").await.unwrap();
    let b = lockkit::connect("memory://drop?wait=15s").await.unwrap();
    let g = a.lock("dropped").await.unwrap();
    let token = g.fencing_token();
    drop(g);
    let g = b
        .lock("dropped")
        .await
        .expect("released by the drop, long before the 60 s ttl");
    assert!(g.fencing_token() > token);
    g.unlock().await.unwrap();
}
