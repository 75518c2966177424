//! The bad-input matrix of the API (issue 8): every bad input gets its typed
//! [`LockError`] and one clear line (no repeated causes, no debug dumps, no
//! password), returns within a bound (no hang, no panic), and leaves nothing
//! held (another owner can take the name at once).
//!
//! Table-driven: each case is `(id, input, expected variant, message
//! substring)`, and a failure names the case id. Cases needing a server use
//! the `LOCKKIT_*_URL` of `scripts/services` (skipped without it, failing
//! under `LOCKKIT_REQUIRE_SERVICES=1`). The CLI's matrix is
//! `lockkit-cli/tests/cli_bad_input.rs`.

#[cfg(feature = "redis")]
use crate::common::redis;

use std::future::Future;
use std::time::{Duration, Instant};

use lockkit::{LockClient, LockError, LockOptions};
#[allow(unused_imports)]
use lockkit_core::testkit::server_url;

/// No case may take longer than this (the longest wait bound in the cases is
/// a few seconds; connect timeouts are at most 5 s).
const BOUND: Duration = Duration::from_secs(20);

/// The expected variant.
#[derive(Debug, Clone, Copy)]
enum Want {
    /// `InvalidConfig` with exactly this part.
    Config(&'static str),
    /// `InvalidName`.
    Name,
    /// `FeatureDisabled` naming this feature.
    #[allow(dead_code)]
    Feature(&'static str),
    /// `Backend` for this operation; `Some(r)`: with this retryability.
    #[allow(dead_code)]
    Backend(&'static str, Option<bool>),
    /// `WaitTimeout`.
    WaitTimeout,
}

/// Checks one error against its case: variant, message, one clean line.
fn check(id: &str, e: &LockError, want: Want, needle: &str, secret: Option<&str>) {
    let ok = match (want, e) {
        (Want::Config(p), LockError::InvalidConfig { part, reason }) => part == p && !reason.is_empty(),
        (Want::Name, LockError::InvalidName { .. }) => true,
        (Want::Feature(f), LockError::FeatureDisabled { feature, .. }) => *feature == f,
        (
            Want::Backend(op, r),
            LockError::Backend {
                operation, retryable, ..
            },
        ) => *operation == op && r.is_none_or(|r| r == *retryable),
        (Want::WaitTimeout, LockError::WaitTimeout { .. }) => true,
        _ => false,
    };
    assert!(ok, "case {id}: expected {want:?}, got {e:?}");
    // As the CLI prints it: the error and its causes on one line.
    let line = lockkit::one_line(e);
    let parts: Vec<&str> = line.split(": ").collect();
    assert!(
        line.contains(needle),
        "case {id}: the message {line:?} does not say {needle:?}"
    );
    assert!(
        !e.to_string().contains(['\n', '\r']) && !line.contains(['\n', '\r']),
        "case {id}: not one line: {line:?}"
    );
    for junk in ["Error: Error", "Error {", "Os {", "kind: ", "Some(", "panicked"] {
        assert!(
            !line.contains(junk),
            "case {id}: debug output or a repeated chain in {line:?}"
        );
    }
    for w in parts.windows(2) {
        assert!(
            !w[1].is_empty() && w[0] != w[1],
            "case {id}: a cause is repeated in the message: {line:?}"
        );
    }
    if let Some(secret) = secret {
        assert!(!line.contains(secret), "case {id}: the password shows in {line:?}");
        assert!(
            !format!("{e:?}").contains(secret),
            "case {id}: the password shows in the Debug form {e:?}"
        );
    }
}

/// Runs `fut` under [`BOUND`]; a hang fails the case.
async fn bounded<T>(id: &str, fut: impl Future<Output = T>) -> (T, Duration) {
    let started = Instant::now();
    let out = tokio::time::timeout(BOUND, fut)
        .await
        .unwrap_or_else(|_| panic!("case {id}: no answer within {BOUND:?} (hang)"));
    (out, started.elapsed())
}

async fn connect_err(id: &str, url: &str) -> (LockError, Duration) {
    let (r, took) = bounded(id, lockkit::connect(url)).await;
    match r {
        Ok(c) => panic!("case {id}: {url:?} was accepted: {c:?}"),
        Err(e) => (e, took),
    }
}

/// A TCP port on 127.0.0.1 where nothing listens.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn temp_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Malformed URLs, per scheme. They are refused while parsing: before any
/// network I/O, so at once.
#[tokio::test]
async fn malformed_urls() {
    let cases: &[(&str, &str, Want, &str)] = &[
        ("empty", "", Want::Config("url"), "not a URL"),
        ("blank", "   ", Want::Config("url"), "not a URL"),
        (
            "no scheme",
            "127.0.0.1:6379",
            Want::Config("url scheme"),
            "unknown scheme",
        ),
        ("etcd", "etcd://127.0.0.1:2379", Want::Config("url scheme"), "\"etcd\""),
        ("http", "http://localhost/", Want::Config("url scheme"), "\"http\""),
        (
            "redis port too big",
            "redis://:99999",
            Want::Config("url"),
            "empty host",
        ),
        ("redis no host", "redis://", Want::Config("url host"), "needs a host"),
        (
            "redis db not a number",
            "redis://127.0.0.1:6379/zero",
            Want::Config("url path"),
            "database number",
        ),
        (
            "redis two hosts",
            "redis://127.0.0.1:1,127.0.0.1:2",
            Want::Config("url host"),
            "one host",
        ),
        (
            "redis fragment",
            "redis://127.0.0.1#what",
            Want::Config("url fragment"),
            "#insecure",
        ),
        (
            "cluster with a db",
            "redis+cluster://127.0.0.1:1,127.0.0.1:2/1",
            Want::Config("url path"),
            "database 0",
        ),
        (
            "sentinel without master name",
            "redis+sentinel://127.0.0.1:26379",
            Want::Config("url path"),
            "group's name",
        ),
        (
            "redlock no nodes",
            "redlock://",
            Want::Config("url host"),
            "needs a host",
        ),
        (
            "redlock empty node",
            "redlock://127.0.0.1:1,,127.0.0.1:3",
            Want::Config("url host list"),
            "empty host",
        ),
        (
            "redlock port zero",
            "redlock://127.0.0.1:0,127.0.0.1:1",
            Want::Config("url host list"),
            "invalid port",
        ),
        ("mysql nothing", "mysql://", Want::Config("url host"), "needs a host"),
        (
            "mysql no db",
            "mysql://app:s3cret-pw@127.0.0.1:3306",
            Want::Config("url path"),
            "database",
        ),
        (
            "mysql empty db",
            "mariadb://app:s3cret-pw@127.0.0.1:3306/",
            Want::Config("url path"),
            "database",
        ),
        (
            "mysql db and more",
            "mysql://app@127.0.0.1:3306/db/x",
            Want::Config("url path"),
            "database",
        ),
        (
            "postgres port not a number",
            "postgres://h:notaport/db",
            Want::Config("url"),
            "port",
        ),
        (
            "postgres no host",
            "postgres:///db",
            Want::Config("url host"),
            "needs a host",
        ),
        ("zk nothing", "zk://", Want::Config("url host"), "at least one server"),
        (
            "zk no host",
            "zk:///lockkit",
            Want::Config("url host"),
            "at least one server",
        ),
        (
            "zk empty segment",
            "zk://127.0.0.1:2181/a//b",
            Want::Config("url path"),
            "empty segment",
        ),
        (
            "zk dot-dot",
            "zk://127.0.0.1:2181/a/../b",
            Want::Config("url path"),
            "`.` and `..`",
        ),
        (
            "zk encoded dot-dot",
            "zk://127.0.0.1:2181/a/%2e%2e",
            Want::Config("url path"),
            "`.` and `..`",
        ),
        (
            "zk user without password",
            "zk://app@127.0.0.1:2181/x",
            Want::Config("url credentials"),
            "user:password",
        ),
        (
            "zk trailing slash",
            "zk://127.0.0.1:2181/not a path/",
            Want::Config("url path"),
            "trailing",
        ),
        (
            "zk reserved",
            "zk://127.0.0.1:2181/zookeeper",
            Want::Config("url path"),
            "reserved",
        ),
        (
            "zk control char",
            "zk://127.0.0.1:2181/a%01b",
            Want::Config("url path"),
            "refuses",
        ),
        ("sqlite no path", "sqlite://", Want::Config("url path"), "name a file"),
        ("memory with a path", "memory://store/sub", Want::Config("url path"), ""),
    ];
    for &(id, url, want, needle) in cases {
        if !scheme_enabled(url) {
            continue;
        }
        let (e, took) = connect_err(id, url).await;
        check(id, &e, want, needle, Some("s3cret-pw"));
        assert!(
            took < Duration::from_secs(1),
            "case {id}: a malformed URL is refused without I/O, took {took:?}"
        );
    }
}

/// Whether `url`'s backend is compiled in (otherwise the case is one of
/// [`features_compiled_out`]).
#[allow(clippy::match_like_matches_macro)] // (every arm is a constant in some builds)
fn scheme_enabled(url: &str) -> bool {
    let scheme = url.split_once(':').map_or("", |(s, _)| s).trim();
    match scheme {
        "redis" | "rediss" | "redis+sentinel" | "redis+cluster" | "redlock" => cfg!(feature = "redis"),
        "mysql" | "mariadb" => cfg!(feature = "mysql"),
        "postgres" | "postgresql" => cfg!(feature = "postgres"),
        "zk" | "zookeeper" => cfg!(feature = "zookeeper"),
        "sqlite" => cfg!(feature = "sqlite"),
        _ => true,
    }
}

/// Unknown parameters (typos) and bad parameter values, on URLs whose
/// servers are unreachable: the parameter is reported, not the connection.
#[tokio::test]
async fn bad_parameters_are_reported_before_connecting() {
    let c = closed_port();
    let dir = temp_dir();
    let db = dir.path().join("params.db");
    let db = db.display();
    let cases: Vec<(&str, String, Want, &str)> = vec![
        (
            "redis typo",
            format!("redis://127.0.0.1:{c}?tll=5s"),
            Want::Config("query parameter tll"),
            "not a parameter",
        ),
        (
            "redlock typo",
            format!("redlock://127.0.0.1:{c},127.0.0.1:{c},127.0.0.1:{c}?ttl=5s&nodetimeout=1s"),
            Want::Config("query parameter nodetimeout"),
            "not a parameter",
        ),
        (
            "sentinel typo",
            format!("redis+sentinel://127.0.0.1:{c}/m?sentinel_pasword=x"),
            Want::Config("query parameter sentinel_pasword"),
            "not a parameter",
        ),
        (
            "mysql typo",
            format!("mysql://u:s3cret-pw@127.0.0.1:{c}/db?tabel=x"),
            Want::Config("query parameter tabel"),
            "not a parameter",
        ),
        (
            "postgres typo",
            format!("postgres://u:s3cret-pw@127.0.0.1:{c}/db?sweep_intervall=1s"),
            Want::Config("query parameter sweep_intervall"),
            "not a parameter",
        ),
        (
            "zk typo",
            format!("zk://127.0.0.1:{c}/x?sesion_timeout=4s"),
            Want::Config("query parameter sesion_timeout"),
            "not a parameter",
        ),
        (
            "sqlite typo",
            format!("sqlite://{db}?tll=5s"),
            Want::Config("query parameter tll"),
            "not a parameter",
        ),
        (
            "memory typo",
            "memory://?wiat=1s".to_owned(),
            Want::Config("query parameter wiat"),
            "not a parameter",
        ),
        (
            "ttl not a duration",
            format!("redis://127.0.0.1:{c}?ttl=abc"),
            Want::Config("query parameter ttl"),
            "not a duration",
        ),
        (
            "ttl zero",
            format!("mysql://u@127.0.0.1:{c}/db?ttl=0"),
            Want::Config("query parameter ttl"),
            "between",
        ),
        (
            "ttl over 7 days",
            format!("zk://127.0.0.1:{c}?ttl=8days"),
            Want::Config("query parameter ttl"),
            "between",
        ),
        (
            "wait over 7 days",
            format!("postgres://u@127.0.0.1:{c}/db?wait=8d"),
            Want::Config("query parameter wait"),
            "at most",
        ),
        (
            "wait negative",
            "memory://?wait=-1s".to_owned(),
            Want::Config("query parameter wait"),
            "not a duration",
        ),
        (
            "auto_extend not a bool",
            format!("redis://127.0.0.1:{c}?auto_extend=maybe"),
            Want::Config("query parameter auto_extend"),
            "true or false",
        ),
        (
            "owner with a newline",
            "memory://?owner=a%0Ab".to_owned(),
            Want::Config("query parameter owner"),
            "control characters",
        ),
        (
            "owner too long",
            format!("memory://?owner={}", "o".repeat(256)),
            Want::Config("query parameter owner"),
            "1 to 255",
        ),
        (
            "max_connections zero",
            format!("mysql://u:s3cret-pw@127.0.0.1:{c}/db?max_connections=0"),
            Want::Config("query parameter max_connections"),
            "between 1 and 1000",
        ),
        (
            "max_connections not a number",
            format!("postgres://u@127.0.0.1:{c}/db?max_connections=ten"),
            Want::Config("query parameter max_connections"),
            "whole number",
        ),
        (
            "injected table",
            format!("mysql://u:s3cret-pw@127.0.0.1:{c}/db?table=locks;DROP TABLE x"),
            Want::Config("query parameter table"),
            "not a table name",
        ),
        (
            "quoted table",
            format!("postgres://u@127.0.0.1:{c}/db?table=a%22b"),
            Want::Config("query parameter table"),
            "not a table name",
        ),
        (
            "sqlite injected table",
            format!("sqlite://{db}?table=x%27%3B%20DROP%20TABLE%20y"),
            Want::Config("query parameter table"),
            "not a table name",
        ),
        (
            "sweep_batch zero",
            format!("sqlite://{db}?sweep_batch=0"),
            Want::Config("query parameter sweep_batch"),
            "between",
        ),
        (
            "redis prefix with a hash tag",
            format!("redis://127.0.0.1:{c}?prefix=a%7Bb"),
            Want::Config("query parameter prefix"),
            "must not contain",
        ),
        (
            "redis connect_timeout zero",
            format!("redis://127.0.0.1:{c}?connect_timeout=0s"),
            Want::Config("query parameter connect_timeout"),
            "above zero",
        ),
        (
            "redis tls_insecure without tls",
            format!("redis://127.0.0.1:{c}?tls_insecure=true"),
            Want::Config("query parameter tls_insecure"),
            "only meaningful",
        ),
        (
            "redlock node_timeout on redis",
            format!("redis://127.0.0.1:{c}?node_timeout=1s"),
            Want::Config("query parameter node_timeout"),
            "only redlock",
        ),
        (
            "zk session_timeout zero",
            format!("zk://127.0.0.1:{c}?session_timeout=0s"),
            Want::Config("query parameter session_timeout"),
            "more than 0",
        ),
        (
            "zk connect_timeout absurd",
            format!("zk://127.0.0.1:{c}?connect_timeout=2h"),
            Want::Config("query parameter connect_timeout"),
            "at most 1h",
        ),
    ];
    for (id, url, want, needle) in &cases {
        if !scheme_enabled(url) {
            continue;
        }
        let (e, took) = connect_err(id, url).await;
        check(id, &e, *want, needle, Some("s3cret-pw"));
        assert!(
            took < Duration::from_secs(1),
            "case {id}: a bad parameter is refused before connecting, took {took:?}"
        );
    }
}

/// Unreachable servers (a closed port on loopback): a typed, retryable
/// connection error within the connect timeout, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_servers() {
    #[cfg_attr(
        not(any(feature = "redis", feature = "mysql", feature = "postgres")),
        allow(unused_variables)
    )]
    let c = closed_port();
    let dir = temp_dir();
    let not_a_dir = dir.path().join("a-file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    #[allow(unused_mut)]
    let mut cases: Vec<(&str, String, Want, &str)> = vec![];
    #[cfg(feature = "redis")]
    cases.extend([
        (
            "redis closed port",
            format!("redis://:s3cret-pw@127.0.0.1:{c}?connect_timeout=2s"),
            Want::Backend("connect", Some(true)),
            "connect",
        ),
        (
            "rediss closed port",
            format!("rediss://127.0.0.1:{c}?connect_timeout=2s"),
            Want::Backend("connect", Some(true)),
            "connect",
        ),
        (
            "redlock all nodes closed",
            format!("redlock://127.0.0.1:{c},127.0.0.1:{c},127.0.0.1:{c}?connect_timeout=2s"),
            Want::Backend("connect", Some(true)),
            "connect",
        ),
        (
            "cluster closed port",
            format!("redis+cluster://127.0.0.1:{c}?connect_timeout=2s"),
            Want::Backend("connect", Some(true)),
            "connect",
        ),
        (
            "sentinel closed port",
            format!("redis+sentinel://127.0.0.1:{c}/mymaster?connect_timeout=2s"),
            Want::Backend("connect", Some(true)),
            "connect",
        ),
    ]);
    #[cfg(feature = "mysql")]
    cases.push((
        "mysql closed port",
        format!("mysql://app:s3cret-pw@127.0.0.1:{c}/db?connect_timeout=2s"),
        Want::Backend("connect", Some(true)),
        "connect",
    ));
    #[cfg(feature = "postgres")]
    cases.push((
        "postgres closed port",
        format!("postgres://app:s3cret-pw@127.0.0.1:{c}/db?connect_timeout=2s"),
        Want::Backend("connect", Some(true)),
        "connect",
    ));
    #[cfg(feature = "zookeeper")]
    cases.push((
        "zk closed port",
        format!("zk://127.0.0.1:{c}/lockkit?connect_timeout=2s"),
        Want::Backend("connect", Some(true)),
        "connect",
    ));
    #[cfg(feature = "sqlite")]
    cases.extend([
        (
            "sqlite missing directory",
            format!("sqlite://{}/no-such-dir/sub/locks.db", dir.path().display()),
            Want::Config("url path"),
            "does not exist",
        ),
        (
            "sqlite parent is a file",
            format!("sqlite://{}/locks.db", not_a_dir.display()),
            Want::Config("url path"),
            "not a directory",
        ),
    ]);
    for (id, url, want, needle) in &cases {
        let (e, took) = connect_err(id, url).await;
        check(id, &e, *want, needle, Some("s3cret-pw"));
        assert!(
            took < Duration::from_secs(8),
            "case {id}: must fail within the 2 s connect timeout (plus slack), took {took:?}"
        );
    }
}

/// A scheme whose backend is compiled out names its cargo feature. It
/// checks the schemes whose features are off, so a build with every
/// backend has nothing to check and reports it as not run; `scripts/test`
/// runs it in a build without backends
/// (`cargo test --no-default-features --test facade features_compiled_out`).
#[tokio::test]
#[cfg_attr(
    all(
        feature = "redis",
        feature = "mysql",
        feature = "postgres",
        feature = "zookeeper",
        feature = "sqlite"
    ),
    ignore = "every backend is compiled in: nothing is compiled out"
)]
async fn features_compiled_out() {
    let cases: &[(&str, &str, &str)] = &[
        ("redis off", "redis://127.0.0.1:6379", "redis"),
        ("rediss off", "rediss://127.0.0.1:6379", "redis"),
        ("redlock off", "redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3", "redis"),
        ("mysql off", "mysql://u:s3cret-pw@127.0.0.1/db", "mysql"),
        ("postgres off", "postgres://u:s3cret-pw@127.0.0.1/db", "postgres"),
        ("zk off", "zk://127.0.0.1:2181/lockkit", "zookeeper"),
        ("sqlite off", "sqlite::memory:", "sqlite"),
    ];
    let mut ran = 0;
    for &(id, url, feature) in cases {
        if scheme_enabled(url) {
            continue;
        }
        ran += 1;
        let (e, _) = connect_err(id, url).await;
        check(
            id,
            &e,
            Want::Feature(feature),
            &format!("`{feature}` cargo feature"),
            Some("s3cret-pw"),
        );
    }
    assert!(ran > 0, "no scheme is compiled out in this build: nothing was checked");
    eprintln!("{ran} compiled-out schemes checked");
}

/// Wrong passwords and unknown databases on the shared servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_credentials() {
    #[allow(unused_mut)]
    let mut cases: Vec<(&str, String, Want, &str)> = vec![];
    #[cfg(feature = "mysql")]
    if let Some(url) = server_url("LOCKKIT_MYSQL_URL") {
        cases.push((
            "mysql wrong password",
            with_password(&url, "s3cret-pw"),
            Want::Backend("connect", Some(false)),
            "Access denied",
        ));
        cases.push((
            "mysql unknown database",
            with_path(&url, "/lockkit_no_such_db"),
            Want::Backend("connect", Some(false)),
            "lockkit_no_such_db",
        ));
    }
    #[cfg(feature = "postgres")]
    if let Some(url) = server_url("LOCKKIT_POSTGRES_URL") {
        cases.push((
            "postgres wrong password",
            with_password(&url, "s3cret-pw"),
            Want::Backend("connect", Some(false)),
            "password authentication failed",
        ));
        cases.push((
            "postgres unknown database",
            with_path(&url, "/lockkit_no_such_db"),
            Want::Backend("connect", Some(false)),
            "lockkit_no_such_db",
        ));
    }
    for (id, url, want, needle) in &cases {
        let (e, _) = connect_err(id, url).await;
        check(id, &e, *want, needle, Some("s3cret-pw"));
    }
}

/// `url` with its password replaced.
#[allow(dead_code)]
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let (userinfo, hosts) = rest.split_once('@').expect("the URL has a user");
    let user = userinfo.split(':').next().unwrap();
    format!("{scheme}://{user}:{password}@{hosts}")
}

/// `url` with its path replaced.
#[allow(dead_code)]
fn with_path(url: &str, path: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let authority = rest.split(['/', '?']).next().unwrap();
    format!("{scheme}://{authority}{path}")
}

/// Wrong passwords and a user without the rights, on a private Redis with
/// `requirepass` and ACL users (as tests/redis/auth.rs sets one up).
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_wrong_password_and_missing_rights() {
    if !redis::available("redis_wrong_password_and_missing_rights") {
        return;
    }
    let server = redis::Server::start_with(&["--requirepass", "right-pw"]);
    let p = server.port;
    // Keys of another application only; and the right keys but no scripts.
    server.cli(&["ACL", "SETUSER", "other", "on", ">other-pw", "~other:*", "&*", "+@all"]);
    server.cli(&[
        "ACL",
        "SETUSER",
        "noscript",
        "on",
        ">noscript-pw",
        "~lockkit:*",
        "&*",
        "+@all",
        "-@scripting",
    ]);
    for (id, url) in [
        ("redis wrong password", format!("redis://:s3cret-pw@127.0.0.1:{p}")),
        (
            "redis acl user wrong password",
            format!("redis://other:s3cret-pw@127.0.0.1:{p}"),
        ),
        ("redis unknown user", format!("redis://nobody:s3cret-pw@127.0.0.1:{p}")),
        ("redis no password", format!("redis://127.0.0.1:{p}")),
        (
            "redlock wrong password",
            format!("redlock://:s3cret-pw@127.0.0.1:{p},127.0.0.1:{p},127.0.0.1:{p}"),
        ),
    ] {
        let (e, _) = connect_err(id, &url).await;
        check(
            id,
            &e,
            Want::Backend("connect", Some(false)),
            "connect",
            Some("s3cret-pw"),
        );
    }
    for (id, user) in [
        ("redis user without the lock keys", "other:other-pw"),
        ("redis user without scripts", "noscript:noscript-pw"),
    ] {
        let url = format!("redis://{user}@127.0.0.1:{p}?wait=2s");
        let (r, _) = bounded(id, async {
            let client = lockkit::connect(&url).await?;
            client.lock("rights").await
        })
        .await;
        let e = r.expect_err(id);
        assert!(
            matches!(e, LockError::Backend { retryable: false, .. }),
            "case {id}: a permission error is typed and permanent, got {e:?}"
        );
        check(
            id,
            &e,
            Want::Backend(backend_op(&e), Some(false)),
            "NoPerm",
            Some("-pw"),
        );
    }
    // Nothing was left held by the refused users.
    let admin = lockkit::connect(&format!("redis://:right-pw@127.0.0.1:{p}"))
        .await
        .unwrap();
    let g = admin.try_lock("rights").await.unwrap().expect("the name is free");
    g.unlock().await.unwrap();
}

#[allow(dead_code)]
fn backend_op(e: &LockError) -> &'static str {
    match e {
        LockError::Backend { operation, .. } => operation,
        _ => "",
    }
}

/// Bad names, ttls, waits and owners through the API, on every backend at
/// hand: typed errors, nothing held afterwards, waits within their bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_names_ttls_waits_and_owners() {
    let dir = temp_dir();
    let mut urls: Vec<(&str, String)> = vec![("memory", "memory://bad-input".to_owned())];
    #[cfg(feature = "sqlite")]
    urls.push(("sqlite", format!("sqlite://{}", dir.path().join("names.db").display())));
    let _ = &dir;
    for (label, var) in [
        ("redis", "LOCKKIT_REDIS_URL"),
        ("redlock", "LOCKKIT_REDLOCK_URL"),
        ("mysql", "LOCKKIT_MYSQL_URL"),
        ("postgres", "LOCKKIT_POSTGRES_URL"),
        ("zookeeper", "LOCKKIT_ZK_URL"),
    ] {
        let enabled = match label {
            "redis" | "redlock" => cfg!(feature = "redis"),
            "mysql" => cfg!(feature = "mysql"),
            "postgres" => cfg!(feature = "postgres"),
            _ => cfg!(feature = "zookeeper"),
        };
        if enabled && let Some(url) = server_url(var) {
            urls.push((label, url));
        }
    }
    for (label, url) in &urls {
        bad_calls_on(label, url).await;
    }
}

async fn bad_calls_on(label: &str, url: &str) {
    let a = lockkit::connect(url).await.unwrap_or_else(|e| panic!("{label}: {e}"));
    let b = a.with_new_owner();
    let name = format!("bad-input:{}", lockkit_core::raw::random_owner());
    let days8 = Duration::from_secs(8 * 86_400);
    let ok = LockOptions::new();
    type Call = (&'static str, String, LockOptions, Want, &'static str);
    let calls: Vec<Call> = vec![
        ("empty name", String::new(), ok.clone(), Want::Name, "must not be empty"),
        (
            "256-byte name",
            "x".repeat(256),
            ok.clone(),
            Want::Name,
            "at most 255 bytes",
        ),
        (
            "258-byte UTF-8 name",
            "锁".repeat(86),
            ok.clone(),
            Want::Name,
            "at most 255 bytes",
        ),
        (
            "ttl zero",
            name.clone(),
            ok.clone().ttl(Duration::ZERO),
            Want::Config("ttl"),
            "between",
        ),
        (
            "ttl 1ns below 1ms",
            name.clone(),
            ok.clone().ttl(Duration::from_nanos(1)),
            Want::Config("ttl"),
            "between",
        ),
        (
            "ttl over 7 days",
            name.clone(),
            ok.clone().ttl(days8),
            Want::Config("ttl"),
            "between",
        ),
        (
            "ttl Duration::MAX",
            name.clone(),
            ok.clone().ttl(Duration::MAX),
            Want::Config("ttl"),
            "between",
        ),
        (
            "wait over 7 days",
            name.clone(),
            ok.clone().wait(days8),
            Want::Config("wait"),
            "at most",
        ),
        (
            "wait Duration::MAX",
            name.clone(),
            ok.clone().wait(Duration::MAX),
            Want::Config("wait"),
            "at most",
        ),
        (
            "empty owner",
            name.clone(),
            ok.clone().owner(""),
            Want::Config("owner"),
            "1 to 255",
        ),
        (
            "owner with a newline",
            name.clone(),
            ok.clone().owner("a\nb"),
            Want::Config("owner"),
            "control characters",
        ),
        (
            "owner too long",
            name.clone(),
            ok.clone().owner("o".repeat(256)),
            Want::Config("owner"),
            "1 to 255",
        ),
    ];
    for (what, lock_name, opts, want, needle) in &calls {
        for (how, blocking) in [("lock", true), ("try_lock", false)] {
            let id = format!("{label}: {how} with {what}");
            let (r, _) = bounded(&id, async {
                if blocking {
                    a.lock_with(lock_name, opts).await.map(Some)
                } else {
                    a.try_lock_with(lock_name, opts).await
                }
            })
            .await;
            let e = r.err().unwrap_or_else(|| panic!("case {id}: accepted"));
            check(&id, &e, *want, needle, None);
        }
        let id = format!("{label}: inspect with {what}");
        if matches!(want, Want::Name) {
            let (r, _) = bounded(&id, a.inspect(lock_name)).await;
            check(&id, &r.expect_err(&id), *want, needle, None);
            let (r, _) = bounded(&id, a.force_release(lock_name)).await;
            check(&id, &r.expect_err(&id), *want, needle, None);
        }
        assert_free(label, &b, &name).await;
    }
    // Bad owner ids for a client.
    for (what, owner) in [
        ("empty", String::new()),
        ("control", "a\tb".to_owned()),
        ("long", "o".repeat(256)),
    ] {
        let id = format!("{label}: with_owner {what}");
        check(
            &id,
            &a.with_owner(owner).expect_err(&id),
            Want::Config("owner"),
            "owner",
            None,
        );
    }
    // Extending a held lock with a bad ttl: refused, the hold kept.
    let g = a.lock(&name).await.unwrap();
    for (what, ttl) in [("zero", Duration::ZERO), ("over 7 days", days8), ("MAX", Duration::MAX)] {
        let id = format!("{label}: extend with ttl {what}");
        let (r, _) = bounded(&id, g.extend(ttl)).await;
        check(&id, &r.expect_err(&id), Want::Config("ttl"), "between", None);
    }
    assert!(!g.is_lost(), "{label}: a refused extend leaves the hold alone");
    // Zero and short waits on a held name: WaitTimeout within the bound.
    for (what, wait) in [("zero", Duration::ZERO), ("300ms", Duration::from_millis(300))] {
        let id = format!("{label}: wait {what} on a held name");
        let (r, took) = bounded(&id, b.lock_with(&name, &b.options().wait(wait))).await;
        check(&id, &r.expect_err(&id), Want::WaitTimeout, "timed out", None);
        assert!(
            took < wait + Duration::from_secs(5),
            "case {id}: took {took:?} for a {wait:?} wait"
        );
        let id = format!("{label}: try_lock after wait {what}");
        let (r, _) = bounded(&id, b.try_lock(&name)).await;
        assert!(r.expect(&id).is_none(), "case {id}: still held by the first owner");
    }
    g.unlock().await.unwrap();
    // The timed-out waiters left nothing queued or held.
    assert_free(label, &b, &name).await;
    assert_free(label, &a, &name).await;
}

/// Another owner can take `name` at once (and gives it back).
async fn assert_free(label: &str, client: &LockClient, name: &str) {
    let id = format!("{label}: {name} is free");
    let (r, _) = bounded(&id, client.try_lock(name)).await;
    let g = r
        .unwrap_or_else(|e| panic!("case {id}: {e}"))
        .unwrap_or_else(|| panic!("case {id}: the name is held after a refused call"));
    g.unlock().await.unwrap();
}
