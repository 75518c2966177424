//! Tests of reading URLs into configurations.

use lockkit_core::raw::ConnectUrl;

use super::*;

fn parse(url: &str) -> Result<RedisConfig, LockError> {
    let mut u = ConnectUrl::parse(url)?;
    let cfg = RedisConfig::from_url(&mut u)?;
    u.finish()?;
    Ok(cfg)
}

fn part(e: LockError) -> String {
    match e {
        LockError::InvalidConfig { part, .. } => part,
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[test]
fn single() {
    let c = parse("redis://127.0.0.1:16379").unwrap();
    assert_eq!(c.mode, Mode::Single);
    assert_eq!(
        c.nodes,
        [Node {
            host: "127.0.0.1".into(),
            port: 16379
        }]
    );
    assert_eq!((c.tls, c.db, c.prefix.as_str()), (Tls::Off, 0, "lockkit:"));
    let c = parse("rediss://app:s%40cret+x@redis.example/3?prefix=app:&response_timeout=2s#insecure").unwrap();
    assert_eq!(c.tls, Tls::Insecure);
    assert_eq!(c.nodes[0].port, 6379);
    assert_eq!(c.username.as_deref(), Some("app"));
    assert_eq!(c.password.as_deref(), Some("s@cret+x"));
    assert_eq!((c.db, c.prefix.as_str()), (3, "app:"));
    assert_eq!(c.response_timeout, Duration::from_secs(2));
    let shown = format!("{c:?}");
    assert!(!shown.contains("cret") && shown.contains("***"), "{shown}");
    let c = parse("redis://:only-password@h").unwrap();
    assert_eq!((c.username, c.password.as_deref()), (None, Some("only-password")));
}

#[test]
fn multi_host_modes() {
    let c = parse("redlock://127.0.0.1:16380,127.0.0.1:16381,[::1]:16382/2?node_timeout=50ms&drift=5ms").unwrap();
    assert_eq!(c.mode, Mode::Redlock);
    assert_eq!(c.nodes.len(), 3);
    assert_eq!(c.nodes[2].to_string(), "[::1]:16382");
    assert_eq!((c.db, c.quorum()), (2, 2));
    assert_eq!(c.node_timeout, Duration::from_millis(50));
    assert_eq!(c.drift, Duration::from_millis(5));
    let c = parse("redis+cluster://h1,h2:7001,h3").unwrap();
    assert_eq!(c.mode, Mode::Cluster);
    assert_eq!(c.nodes[1].port, 7001);
    assert_eq!(c.nodes[0].port, 6379);
    let c = parse("redis+sentinel://:pw@s1,s2:26380/mymaster/4?sentinel_password=spw").unwrap();
    assert_eq!(
        c.mode,
        Mode::Sentinel {
            service: "mymaster".into()
        }
    );
    assert_eq!(c.nodes[0].port, 26379);
    assert_eq!(c.db, 4);
    assert!(!format!("{c:?}").contains("spw"));
    let c = parse("redlock://a,b,c?tls=true&tls_ca=/etc/ca.pem&tls_cert=c.pem&tls_key=k.pem").unwrap();
    assert_eq!(c.tls, Tls::On);
    assert_eq!(c.tls_ca, Some(PathBuf::from("/etc/ca.pem")));
    assert_eq!(c.tls_client, Some(("c.pem".into(), "k.pem".into())));
}

#[test]
fn bad_urls() {
    assert_eq!(
        part(parse("redis://h?prefix=a{b").unwrap_err()),
        "query parameter prefix"
    );
    assert_eq!(part(parse("redis://h/x").unwrap_err()), "url path");
    assert_eq!(part(parse("redis+cluster://a,b/1").unwrap_err()), "url path");
    assert_eq!(part(parse("redis+sentinel://a,b").unwrap_err()), "url path");
    assert_eq!(
        part(parse("redis://h?node_timeout=1s").unwrap_err()),
        "query parameter node_timeout"
    );
    assert_eq!(part(parse("redis://h?tls=true").unwrap_err()), "query parameter tls");
    assert_eq!(
        part(parse("redis://h?tls_insecure=true").unwrap_err()),
        "query parameter tls_insecure"
    );
    assert_eq!(part(parse("redis://h?bogus=1").unwrap_err()), "query parameter bogus");
    assert_eq!(part(parse("redis://h#what").unwrap_err()), "url fragment");
    assert_eq!(
        part(parse("redis://h?tls_ca=x.pem").unwrap_err()),
        "query parameter tls_ca"
    );
    assert_eq!(
        part(parse("rediss://h?tls_cert=x.pem").unwrap_err()),
        "query parameter tls_cert"
    );
    assert_eq!(
        part(parse("redlock://a,b,c?node_timeout=0s").unwrap_err()),
        "query parameter node_timeout"
    );
}

#[test]
fn wait_replicas() {
    let c = parse("redis://h").unwrap();
    assert_eq!((c.wait_replicas, c.wait_replicas_timeout), (0, Duration::from_secs(1)));
    assert_eq!(
        c,
        RedisConfig {
            nodes: c.nodes.clone(),
            ..RedisConfig::single("h", 6379)
        }
    );
    let c = parse("redis://h?wait_replicas=2&wait_replicas_timeout=250ms").unwrap();
    assert_eq!(
        (c.wait_replicas, c.wait_replicas_timeout),
        (2, Duration::from_millis(250))
    );
    let c = parse("redis+sentinel://s/m?wait_replicas=1").unwrap();
    assert_eq!((c.wait_replicas, c.wait_replicas_timeout), (1, Duration::from_secs(1)));
    // The default stays below a short response timeout.
    let c = parse("redis+cluster://a,b?wait_replicas=1&response_timeout=300ms").unwrap();
    assert_eq!(
        (c.wait_replicas, c.wait_replicas_timeout),
        (1, Duration::from_millis(150))
    );
    assert!(format!("{c:?}").contains("wait_replicas: 1"));
    // Off, explicitly, is fine anywhere.
    assert_eq!(parse("redlock://a,b,c?wait_replicas=0").unwrap().wait_replicas, 0);

    let bad = |url: &str| {
        let e = parse(url).unwrap_err();
        let shown = e.to_string();
        (part(e), shown)
    };
    for url in [
        "redis://h?wait_replicas=-1",
        "redis://h?wait_replicas=one",
        "redis://h?wait_replicas=1.5",
        "redis://h?wait_replicas=",
        "redis://h?wait_replicas=4294967296",
    ] {
        assert_eq!(bad(url).0, "query parameter wait_replicas", "{url}");
    }
    let (p, why) = bad("redlock://a,b,c?wait_replicas=1");
    assert_eq!(p, "query parameter wait_replicas");
    assert!(why.contains("redlock"), "{why}");
    for url in [
        "redis://h?wait_replicas=1&wait_replicas_timeout=0s",
        "redis://h?wait_replicas=1&wait_replicas_timeout=soon",
        "redis://h?wait_replicas=1&wait_replicas_timeout=5s",
        "redis://h?wait_replicas=1&wait_replicas_timeout=1s&response_timeout=500ms",
        "redis://h?wait_replicas_timeout=1s",
        "redis://h?wait_replicas=0&wait_replicas_timeout=1s",
    ] {
        assert_eq!(bad(url).0, "query parameter wait_replicas_timeout", "{url}");
    }
    // A configuration built in code is checked the same way.
    let mut c = RedisConfig::single("h", 6379);
    c.wait_replicas = 1;
    assert!(c.check_wait_replicas().is_ok());
    c.wait_replicas_timeout = c.response_timeout;
    assert_eq!(
        part(c.check_wait_replicas().unwrap_err()),
        "query parameter wait_replicas_timeout"
    );
    c.wait_replicas_timeout = Duration::from_millis(10);
    c.mode = Mode::Redlock;
    assert_eq!(
        part(c.check_wait_replicas().unwrap_err()),
        "query parameter wait_replicas"
    );
}

#[test]
fn restart_guard() {
    let floor = |url: &str| parse(url).unwrap().guard_floor();
    assert_eq!(floor("redlock://a,b,c"), Some(Duration::ZERO), "on for Redlock");
    assert_eq!(floor("redlock://a,b,c?restart_guard=off"), None);
    assert_eq!(floor("redis://a"), None, "off for one server");
    assert_eq!(floor("redis://a?restart_guard=on"), Some(Duration::ZERO));
    assert_eq!(floor("redis://a?restart_guard=30s"), Some(Duration::from_secs(30)));
    assert_eq!(
        floor("redis+sentinel://s/m?restart_guard=1m"),
        Some(Duration::from_secs(60))
    );
    assert_eq!(floor("redis+cluster://a,b?restart_guard=off"), None);
    assert_eq!(
        part(parse("redis+cluster://a,b?restart_guard=on").unwrap_err()),
        "query parameter restart_guard"
    );
    assert_eq!(
        part(parse("redis://a?restart_guard=later").unwrap_err()),
        "query parameter restart_guard"
    );
}
