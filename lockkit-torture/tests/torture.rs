//! Short torture runs, one per backend: 3 worker processes × 2 tasks on 3
//! names for 15 s, with kills, pauses and worker restarts; server restarts
//! where the data survives and a restart is cheap (a private Redis with
//! `appendfsync always`, a private MariaDB and a private Postgres, each on
//! its own port and data directory, so no other test's server is touched).
//! Redlock and ZooKeeper run against the shared servers without restarts.
//! Every run must show 0 violations, and grants, kills and pauses (> 0).
//!
//! Server-backed runs read the shared server URLs (`LOCKKIT_*_URL`, from
//! `scripts/services up`): skipped without them, a failure under
//! `LOCKKIT_REQUIRE_SERVICES=1`. Private ports: `LOCKKIT_TORTURE_REDIS_PORT`
//! (16479), `LOCKKIT_TORTURE_MYSQL_PORT` (13318),
//! `LOCKKIT_TORTURE_POSTGRES_PORT` (15443).
//!
//! `LOCKKIT_TORTURE_LONG=1` makes each run `LOCKKIT_TORTURE_SECONDS` long
//! (default 120); `LOCKKIT_TORTURE_SEED` fixes the seed (else each run picks
//! one and prints it).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lockkit-torture");

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

fn long() -> bool {
    std::env::var("LOCKKIT_TORTURE_LONG").is_ok_and(|v| v == "1")
}

/// Runs the torture against `url`; the summary's counts. Panics on any
/// violation, a failed run, or a run without grants, kills or pauses.
fn torture(label: &str, url: &str, restart_cmd: Option<&str>) -> HashMap<String, u64> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("torture-{label}-"))
        .tempdir()
        .expect("temp dir");
    let seconds = if long() {
        std::env::var("LOCKKIT_TORTURE_SECONDS").unwrap_or_else(|_| "120".into())
    } else {
        "15".into()
    };
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--backend", url])
        .args(["--procs", "3", "--tasks", "2", "--names", "3", "--ttl", "2s"])
        .args([
            "--seconds",
            &format!("{seconds}s"),
            "--chaos-every",
            "1500ms",
            "--slack",
            "5s",
        ])
        .arg("--log-dir")
        .arg(dir.path());
    if let Ok(seed) = std::env::var("LOCKKIT_TORTURE_SEED") {
        cmd.args(["--seed", &seed]);
    }
    if let Some(restart) = restart_cmd {
        cmd.args(["--restart-cmd", restart, "--restart-every", "6s"]);
    }
    let out = cmd.output().expect("run lockkit-torture");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{label}:\n{stderr}{stdout}");
    let summary = stdout
        .lines()
        .find(|l| l.starts_with("torture: backend="))
        .unwrap_or("");
    let counts: HashMap<String, u64> = summary
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .filter_map(|(k, v)| Some((k.to_owned(), v.parse().ok()?)))
        .collect();
    if !out.status.success() || counts.get("violations") != Some(&0) {
        let kept = dir.keep();
        panic!(
            "{label}: torture failed ({}); logs kept in {}",
            out.status,
            kept.display()
        );
    }
    for key in ["grants", "holds", "kills", "pauses", "worker_restarts"] {
        assert!(
            counts.get(key).is_some_and(|&n| n > 0),
            "{label}: no {key} in: {summary}"
        );
    }
    if restart_cmd.is_some() {
        assert!(
            counts["server_restarts"] > 0,
            "{label}: no server restart in: {summary}"
        );
    }
    counts
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = format!("sqlite://{}?sweep_interval=1s", dir.path().join("torture.db").display());
    torture("sqlite", &url, None);
}

/// A private server of `scripts/services` (its own state directory and
/// port), stopped when dropped.
#[cfg(any(feature = "mysql", feature = "postgres"))]
struct PrivateServer {
    service: &'static str,
    env: Vec<(String, String)>,
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
impl PrivateServer {
    fn start(service: &'static str, default_port: &str) -> (Self, String) {
        let upper = service.to_ascii_uppercase();
        let port = std::env::var(format!("LOCKKIT_TORTURE_{upper}_PORT")).unwrap_or_else(|_| default_port.into());
        let server = PrivateServer {
            service,
            env: vec![
                (
                    "LOCKKIT_SERVICES_DIR".into(),
                    repo().join("target/services-torture").display().to_string(),
                ),
                (format!("LOCKKIT_{upper}_PORT"), port.clone()),
            ],
        };
        let out = Command::new(repo().join("scripts/services"))
            .args(["up", service])
            .envs(server.env.iter().map(|(k, v)| (k, v)))
            .output()
            .expect("run scripts/services");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "starting the private {service} failed:\n{stderr}");
        assert!(
            !stderr.contains("reusing the server"),
            "port {port} is taken by another server; set LOCKKIT_TORTURE_{upper}_PORT"
        );
        let prefix = format!("export LOCKKIT_{upper}_URL=");
        let url = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()).map(str::to_owned))
            .expect("scripts/services prints the URL");
        (server, url)
    }

    /// The shell command that restarts it (clean stop, start on the same data).
    fn restart_cmd(&self) -> String {
        let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}='{v}'")).collect();
        let services = repo().join("scripts/services");
        format!(
            "export {env}; '{s}' down {svc} && '{s}' up {svc} >/dev/null",
            env = env.join(" "),
            s = services.display(),
            svc = self.service
        )
    }
}

#[cfg(any(feature = "mysql", feature = "postgres"))]
impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = Command::new(repo().join("scripts/services"))
            .args(["down", self.service])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .output();
    }
}

#[cfg(feature = "mysql")]
#[test]
fn mysql() {
    // The shared server's URL says the packages are installed (or skips).
    if lockkit_core::testkit::server_url("LOCKKIT_MYSQL_URL").is_none() {
        return;
    }
    let (server, url) = PrivateServer::start("mysql", "13318");
    torture(
        "mysql",
        &format!("{url}?sweep_interval=1s"),
        Some(&server.restart_cmd()),
    );
}

#[cfg(feature = "postgres")]
#[test]
fn postgres() {
    if lockkit_core::testkit::server_url("LOCKKIT_POSTGRES_URL").is_none() {
        return;
    }
    let (server, url) = PrivateServer::start("postgres", "15443");
    torture(
        "postgres",
        &format!("{url}?sweep_interval=1s"),
        Some(&server.restart_cmd()),
    );
}

/// A private redis-server that keeps its data (AOF, fsync on every write),
/// killed when dropped. Restarts are crashes (SIGKILL) and a new start on
/// the same directory.
#[cfg(feature = "redis")]
struct PrivateRedis {
    dir: tempfile::TempDir,
    start: String,
}

#[cfg(feature = "redis")]
impl PrivateRedis {
    fn start() -> (Self, String) {
        let port = std::env::var("LOCKKIT_TORTURE_REDIS_PORT").unwrap_or_else(|_| "16479".into());
        let dir = tempfile::Builder::new()
            .prefix("torture-redis-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path().display();
        let start = format!(
            "redis-server --bind 127.0.0.1 --port {port} --dir '{d}' --appendonly yes --appendfsync always \
             --save '' --daemonize yes --pidfile '{d}/redis.pid' --logfile '{d}/redis.log' && \
             for i in $(seq 100); do [ \"$(redis-cli -p {port} ping 2>/dev/null)\" = PONG ] && exit 0; sleep 0.1; done; exit 1"
        );
        let busy = Command::new("redis-cli").args(["-p", &port, "ping"]).output();
        assert!(
            !busy.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG")),
            "port {port} is taken by another server; set LOCKKIT_TORTURE_REDIS_PORT"
        );
        let ok = Command::new("sh")
            .args(["-c", &start])
            .status()
            .expect("start redis-server");
        assert!(
            ok.success(),
            "the private redis-server did not start (see {d}/redis.log)"
        );
        (PrivateRedis { dir, start }, format!("redis://127.0.0.1:{port}"))
    }

    fn kill(&self) -> String {
        let d = self.dir.path().display();
        format!("pid=$(cat '{d}/redis.pid') && kill -KILL $pid && while kill -0 $pid 2>/dev/null; do sleep 0.05; done")
    }

    fn restart_cmd(&self) -> String {
        format!("{} && {}", self.kill(), self.start)
    }
}

#[cfg(feature = "redis")]
impl Drop for PrivateRedis {
    fn drop(&mut self) {
        let _ = Command::new("sh").args(["-c", &self.kill()]).status();
    }
}

#[cfg(feature = "redis")]
#[test]
fn redis() {
    if lockkit_core::testkit::server_url("LOCKKIT_REDIS_URL").is_none() {
        return;
    }
    let (server, url) = PrivateRedis::start();
    torture("redis", &url, Some(&server.restart_cmd()));
}

#[cfg(feature = "redis")]
#[test]
fn redlock() {
    // The shared masters: no restarts (Redlock without persistence would need
    // delayed restarts to stay safe).
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_REDLOCK_URL") else {
        return;
    };
    torture("redlock", &url, None);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper() {
    // The shared server: no restarts; a 4 s session (the server's minimum is 2 s).
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_ZK_URL") else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    torture("zookeeper", &format!("{url}{sep}session_timeout=4s"), None);
}
