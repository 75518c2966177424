//! The bad-input matrix of the real `lockkit` binary (issue 8): every bad
//! input exits 1 (75 for a lock it could not have in time) with one line on
//! stderr that names the problem, no panic, no password, within a time
//! bound; and nothing is left held afterwards. The API's matrix is
//! `tests/facade/bad_input.rs` at the workspace root.
#![cfg(feature = "sqlite")]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// No run of the binary may take longer than this.
const BOUND: Duration = Duration::from_secs(20);
const SECRET: &str = "s3cret-pw";

struct Run {
    code: Option<i32>,
    stderr: String,
    took: Duration,
}

/// Runs `lockkit ARGS` (no `LOCKKIT_URL` unless `env` sets one), killing it
/// after [`BOUND`].
fn lockkit(id: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockkit"));
    cmd.args(args)
        .env_remove("LOCKKIT_URL")
        .env("XDG_CONFIG_HOME", "/nonexistent-lockkit-config")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let started = Instant::now();
    let mut child = cmd.spawn().expect("run lockkit");
    let mut pipe = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > BOUND {
            let _ = child.kill();
            let _ = child.wait();
            panic!("case {id}: lockkit {args:?} did not finish within {BOUND:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        code: status.code(),
        stderr: reader.join().unwrap(),
        took: started.elapsed(),
    }
}

/// Checks the exit code and that stderr is one clean line saying `needle`.
fn check(id: &str, run: &Run, code: i32, needle: &str) {
    let err = &run.stderr;
    assert_eq!(run.code, Some(code), "case {id}: exit code; stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "case {id}: not one line: {err:?}");
    assert!(err.starts_with("lockkit: "), "case {id}: {err:?}");
    assert!(err.contains(needle), "case {id}: {err:?} does not say {needle:?}");
    for junk in ["panicked", "backtrace", "Error: Error", "Error {", "Os {", "kind: "] {
        assert!(!err.contains(junk), "case {id}: {junk:?} in {err:?}");
    }
    assert!(!err.contains(SECRET), "case {id}: the password shows: {err:?}");
    let parts: Vec<&str> = err.trim_end().split(": ").collect();
    for w in parts.windows(2) {
        assert_ne!(w[0], w[1], "case {id}: a cause is repeated: {err:?}");
    }
}

/// A TCP port on 127.0.0.1 where nothing listens.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `needle` when the scheme's feature is compiled in, else the
/// feature-disabled message naming `feature`.
fn if_enabled(enabled: bool, needle: &'static str, feature: &'static str) -> String {
    if enabled {
        needle.to_owned()
    } else {
        format!("needs the `{feature}` cargo feature")
    }
}

#[test]
fn bad_urls_and_parameters() {
    let c = closed_port();
    let dir = tempfile_dir("urls");
    let db = dir.join("locks.db");
    let db = db.display();
    let redis = cfg!(feature = "redis");
    let mysql = cfg!(feature = "mysql");
    let postgres = cfg!(feature = "postgres");
    let zk = cfg!(feature = "zookeeper");
    let long_name = "n".repeat(256);
    let cases: Vec<(&str, Vec<String>, String)> = vec![
        ("empty url", args(&["--url", "", "status", "a"]), "not a URL".into()),
        (
            "etcd",
            args(&["--url", "etcd://127.0.0.1:2379", "status", "a"]),
            "unknown scheme \"etcd\"".into(),
        ),
        (
            "http",
            args(&["--url", "http://localhost/", "list"]),
            "unknown scheme \"http\"".into(),
        ),
        (
            "redis port too big",
            args(&["--url", "redis://:99999", "status", "a"]),
            "empty host".into(),
        ),
        (
            "postgres port not a number",
            args(&["--url", "postgres://h:notaport/db", "status", "a"]),
            "invalid port".into(),
        ),
        (
            "memory typo",
            args(&["--url", "memory://?tll=5s", "status", "a"]),
            "query parameter tll".into(),
        ),
        (
            "ttl not a duration",
            args(&["--url", "memory://?ttl=abc", "exec", "a", "--", "true"]),
            "query parameter ttl".into(),
        ),
        (
            "ttl zero in url",
            args(&["--url", "memory://?ttl=0", "exec", "a", "--", "true"]),
            "query parameter ttl".into(),
        ),
        (
            "ttl over 7 days in url",
            args(&["--url", "memory://?ttl=8days", "exec", "a", "--", "true"]),
            "query parameter ttl".into(),
        ),
        (
            "wait over 7 days in url",
            args(&["--url", "memory://?wait=8d", "exec", "a", "--", "true"]),
            "query parameter wait".into(),
        ),
        (
            "over-long name",
            args(&["--url", "memory://", "exec", &long_name, "--", "true"]),
            "at most 255 bytes".into(),
        ),
        (
            "--ttl 0s",
            args(&["--url", "memory://", "exec", "a", "--ttl", "0s", "--", "true"]),
            "invalid configuration: ttl".into(),
        ),
        (
            "--ttl 8 days",
            args(&["--url", "memory://", "exec", "a", "--ttl", "8d", "--", "true"]),
            "invalid configuration: ttl".into(),
        ),
        (
            "--wait 8 days",
            args(&["--url", "memory://", "exec", "a", "--wait", "8d", "--", "true"]),
            "invalid configuration: wait".into(),
        ),
        (
            "--owner empty",
            args(&["--url", "memory://", "exec", "a", "--owner", "", "--", "true"]),
            "invalid configuration: owner".into(),
        ),
        (
            "--owner newline",
            args(&["--url", "memory://", "exec", "a", "--owner", "a\nb", "--", "true"]),
            "control characters".into(),
        ),
        (
            "sqlite missing directory",
            args(&[
                "--url",
                &format!("sqlite://{}/no/such/dir.db", dir.display()),
                "status",
                "a",
            ]),
            "does not exist".into(),
        ),
        (
            "sqlite injected table",
            args(&[
                "--url",
                &format!("sqlite://{db}?table=locks;DROP TABLE x"),
                "status",
                "a",
            ]),
            "not a table name".into(),
        ),
        (
            "sqlite max_connections zero",
            args(&["--url", &format!("sqlite://{db}?max_connections=0"), "status", "a"]),
            "query parameter max_connections".into(),
        ),
        (
            "config file missing",
            args(&["--config", "/nonexistent/lockkit.toml", "status", "a"]),
            "cannot read config".into(),
        ),
        (
            "redis typo, unreachable",
            args(&[
                "--url",
                &format!("redis://:{SECRET}@127.0.0.1:{c}?tll=5s"),
                "status",
                "a",
            ]),
            if_enabled(redis, "query parameter tll", "redis"),
        ),
        (
            "redlock no nodes",
            args(&["--url", "redlock://", "status", "a"]),
            if_enabled(redis, "needs a host", "redis"),
        ),
        (
            "sentinel without master name",
            args(&["--url", "redis+sentinel://127.0.0.1:1", "status", "a"]),
            if_enabled(redis, "url path", "redis"),
        ),
        (
            "redis unreachable",
            args(&[
                "--url",
                &format!("redis://:{SECRET}@127.0.0.1:{c}?connect_timeout=2s"),
                "status",
                "a",
            ]),
            if_enabled(redis, "redis: connect failed", "redis"),
        ),
        (
            "mysql without database",
            args(&["--url", &format!("mysql://app:{SECRET}@127.0.0.1:3306"), "status", "a"]),
            if_enabled(mysql, "names exactly one database", "mysql"),
        ),
        (
            "mysql injected table",
            args(&[
                "--url",
                &format!("mysql://app:{SECRET}@127.0.0.1:{c}/db?table=locks;DROP TABLE x"),
                "status",
                "a",
            ]),
            if_enabled(mysql, "not a table name", "mysql"),
        ),
        (
            "mysql unreachable",
            args(&[
                "--url",
                &format!("mysql://app:{SECRET}@127.0.0.1:{c}/db?connect_timeout=2s"),
                "status",
                "a",
            ]),
            if_enabled(mysql, "mysql: connect failed", "mysql"),
        ),
        (
            "postgres unreachable",
            args(&[
                "--url",
                &format!("postgres://app:{SECRET}@127.0.0.1:{c}/db?connect_timeout=2s"),
                "status",
                "a",
            ]),
            if_enabled(postgres, "postgres: connect failed", "postgres"),
        ),
        (
            "zk unreachable",
            args(&[
                "--url",
                &format!("zk://127.0.0.1:{c}/lockkit?connect_timeout=2s"),
                "status",
                "a",
            ]),
            if_enabled(zk, "zookeeper: connect failed", "zookeeper"),
        ),
        (
            "zk chroot with an empty segment",
            args(&["--url", "zk://127.0.0.1:2181/a//b", "status", "a"]),
            if_enabled(zk, "empty segment", "zookeeper"),
        ),
        (
            "zk without host",
            args(&["--url", "zk:///lockkit", "status", "a"]),
            if_enabled(zk, "at least one server", "zookeeper"),
        ),
    ];
    for (id, argv, needle) in &cases {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        let run = lockkit(id, &argv, &[]);
        check(id, &run, 1, needle);
        assert!(run.took < Duration::from_secs(10), "case {id}: took {:?}", run.took);
    }
    // The URL from the environment is checked the same way.
    let run = lockkit(
        "etcd from LOCKKIT_URL",
        &["status", "a"],
        &[("LOCKKIT_URL", "etcd://h:2379")],
    );
    check("etcd from LOCKKIT_URL", &run, 1, "unknown scheme");
    // Nothing of the refused runs is held.
    let url = format!("sqlite://{db}");
    let run = lockkit(
        "free after",
        &["--url", &url, "exec", "a", "--no-wait", "--", "true"],
        &[],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A lock held by another process: `--no-wait` and a short `--wait` exit 75
/// within their bound, with one line; afterwards the name is free.
#[test]
fn busy_locks_exit_75_within_the_wait() {
    let dir = tempfile_dir("busy");
    let url = format!("sqlite://{}", dir.join("busy.db").display());
    let marker = dir.join("holding");
    let mut holder = Command::new(env!("CARGO_BIN_EXE_lockkit"))
        .args([
            "--url",
            &url,
            "exec",
            "busy",
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 4", marker.display()),
        ])
        .env_remove("LOCKKIT_URL")
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !marker.exists() {
        assert!(started.elapsed() < BOUND, "the holder never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let run = lockkit(
        "no-wait on a held lock",
        &["--url", &url, "exec", "busy", "--no-wait", "--", "true"],
        &[],
    );
    check("no-wait on a held lock", &run, 75, "held by another owner");
    let run = lockkit(
        "short wait on a held lock",
        &["--url", &url, "exec", "busy", "--wait", "300ms", "--", "true"],
        &[],
    );
    check("short wait on a held lock", &run, 75, "timed out after 300ms");
    assert!(run.took < Duration::from_secs(3), "the wait is bounded: {:?}", run.took);
    let run = lockkit(
        "bad ttl on a held lock",
        &["--url", &url, "exec", "busy", "--ttl", "0s", "--", "true"],
        &[],
    );
    check("bad ttl on a held lock", &run, 1, "invalid configuration: ttl");
    assert!(holder.wait().unwrap().success());
    // The timed-out and refused runs left nothing behind.
    let run = lockkit(
        "free after the holder",
        &["--url", &url, "exec", "busy", "--no-wait", "--", "true"],
        &[],
    );
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let _ = std::fs::remove_dir_all(&dir);
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lockkit-cli-bad-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}
