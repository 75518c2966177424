//! `lockkit demo` against the real servers of `scripts/services`: the split
//! adds up on every backend. A missing server URL skips with a message, or
//! fails under LOCKKIT_REQUIRE_SERVICES=1.

use std::process::Command;

use lockkit_core::testkit::server_url;

fn demo_on(var: &str) {
    let Some(url) = server_url(var) else { return };
    let o = Command::new(env!("CARGO_BIN_EXE_lockkit"))
        .args(["--url", &url, "demo", "--workers", "3", "--budget", "2000"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{var}: {out}{}", String::from_utf8_lossy(&o.stderr));
    assert!(out.contains("== budget 20.00"), "{var}: {out}");
}

#[cfg(feature = "redis")]
#[test]
fn demo_on_redis() {
    demo_on("LOCKKIT_REDIS_URL");
}

#[cfg(feature = "mysql")]
#[test]
fn demo_on_mariadb() {
    demo_on("LOCKKIT_MYSQL_URL");
}

#[cfg(feature = "postgres")]
#[test]
fn demo_on_postgres() {
    demo_on("LOCKKIT_POSTGRES_URL");
}

#[cfg(feature = "zookeeper")]
#[test]
fn demo_on_zookeeper() {
    demo_on("LOCKKIT_ZK_URL");
}
