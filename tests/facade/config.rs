//! `LockConfig` from an application's config: a URL string or a table.
#![cfg(feature = "serde")]

use std::time::Duration;

use lockkit::{LockConfig, LockError};
use serde::Deserialize;

#[derive(Deserialize)]
struct AppConfig {
    lock: LockConfig,
}

#[tokio::test]
async fn a_url_string_or_a_table() {
    let plain: AppConfig = toml::from_str(r#"lock = "memory://cfg?ttl=7s""#).unwrap();
    let client = plain.lock.connect().await.unwrap();
    assert_eq!(client.options().ttl_value(), Duration::from_secs(7));

    let table: AppConfig = toml::from_str(
        r#"
        [lock]
        url = "memory://cfg?ttl=7s&wait=1s"
        ttl = "2s"
        wait = "forever"
        auto_extend = false
        owner = "trade-center-1"
        "#,
    )
    .unwrap();
    let client = table.lock.connect().await.unwrap();
    let opts = client.options();
    assert_eq!(opts.ttl_value(), Duration::from_secs(2), "the table wins over the URL");
    assert_eq!(opts.wait_value(), None);
    assert!(!opts.auto_extend_value());
    assert_eq!(client.owner(), "trade-center-1");
    let g = client.lock("configured").await.unwrap();
    g.unlock().await.unwrap();
}

#[test]
fn bad_configs_are_refused_with_the_field() {
    let bad = toml::from_str::<AppConfig>("[lock]\nurl = \"memory://\"\nttl = \"soon\"\n");
    let msg = bad.err().expect("an invalid duration is refused").to_string();
    assert!(msg.contains("ttl") && msg.contains("not a duration"), "{msg}");
    let unknown = toml::from_str::<AppConfig>("[lock]\nurl = \"memory://\"\ntll = \"5s\"\n");
    assert!(unknown.is_err(), "unknown fields are refused");
}

#[test]
fn debug_hides_the_password_and_json_works_too() {
    let c: LockConfig = serde_json::from_str(r#"{"url": "mysql://app:hunter2@db/app", "ttl": "5s"}"#).unwrap();
    let shown = format!("{c:?}");
    assert!(!shown.contains("hunter2") && shown.contains("app:***@db"), "{shown}");
    assert_eq!(c.url(), "mysql://app:hunter2@db/app?ttl=5s");
}

#[tokio::test]
async fn invalid_urls_fail_at_connect_with_the_part() {
    let c = LockConfig::new("memory://?ttl=0s");
    assert!(matches!(c.connect().await, Err(LockError::InvalidConfig { .. })));
}
