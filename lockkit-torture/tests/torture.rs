//! Short torture runs, one per backend: 4 worker processes (2 for the
//! other lock kinds) × 2 tasks on 3 names for 18 s (40 s with server or
//! node restarts), with kills, pauses and worker restarts; server restarts
//! where the data survives and a restart is cheap (a private Redis with
//! `appendfsync always`, a private MariaDB and a private Postgres, each on
//! its own port and data directory, so no other test's server is touched);
//! network faults through a fault proxy (latency above the response
//! timeout, lost replies, connection resets) on every server backend but
//! ZooKeeper (see its test);
//! Redlock on five private nodes with node faults (one node paused, killed
//! and restarted empty, wiped); shared owners (worker pairs with the same
//! owner ids) on every backend but ZooKeeper, which runs against the
//! shared server without restarts. Every run
//! must show 0 violations, and each fault it was given at least once.
//!
//! Server-backed runs read the shared server URLs (`LOCKKIT_*_URL`, from
//! `scripts/services up`): skipped without them, a failure under
//! `LOCKKIT_REQUIRE_SERVICES=1`. Private ports: `LOCKKIT_TORTURE_REDIS_PORT`
//! (16479), `LOCKKIT_TORTURE_MYSQL_PORT` (13318),
//! `LOCKKIT_TORTURE_POSTGRES_PORT` (15443), `LOCKKIT_TORTURE_REDLOCK_PORT`
//! (16491, and the four above it; the semaphore run's nodes ten above).
//!
//! Semaphores (2 permits) and read-write locks (one write in five) run on
//! SQLite, on Redlock's private nodes with node faults, and behind the
//! fault proxy on the shared Redis, MariaDB, Postgres and ZooKeeper
//! servers: never more than 2 permits, never a writer beside another
//! owner's hold, readers carrying the last writer's token. Elections run
//! on ZooKeeper behind the proxy: never two valid leaderships at once.
//!
//! Crowds (`--crowd`: 4 processes × 64 tasks on 2 names): every kind on
//! SQLite, one kind on each shared server behind the proxy (Redis
//! semaphores of 3, MariaDB read-write locks, Postgres locks, ZooKeeper
//! read-write locks); long, every kind on each, Redis, MariaDB and
//! Postgres on their private servers with restarts.
//!
//! `LOCKKIT_TORTURE_LONG=1` makes each run a long one: 4 processes × 4 tasks
//! on 8 names with short critical sections until `LOCKKIT_TORTURE_GRANTS`
//! grants (default 100000; at most `LOCKKIT_TORTURE_SECONDS`, default 1800),
//! asserting that many grants. `LOCKKIT_TORTURE_SEED` fixes the seed (else
//! each run picks one and prints it).

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

/// What a run adds to the kills, pauses and worker restarts.
#[derive(Default)]
struct Extra<'a> {
    /// A shell command restarting the server with its data.
    restart_cmd: Option<&'a str>,
    /// Fault proxies in front of the servers.
    proxy: bool,
    /// Redlock node faults, with the command that kills the node on
    /// `{port}` and starts it empty.
    node_restart_cmd: Option<&'a str>,
    /// Worker pairs share their owner ids.
    shared_owners: bool,
    /// What the workers take (`--kind`): locks unless said.
    kind: Option<&'a str>,
    /// A crowd (`--crowd`): 4 processes × 64 tasks on 2 names.
    crowd: bool,
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| default.into())
}

/// How many more short runs a short run may take when it had no violation
/// but missed an event it must cover (a shared owner's re-entry, a fault):
/// on a loaded machine a run with server restarts makes few grants (9 in
/// 40 s once, beside two builds), and the re-entry of a shared owner needs
/// two processes of one owner to hold at once.
const COVERAGE_RUNS: usize = 2;

/// Runs the torture against `url`; the summary's counts. Panics on any
/// violation, a failed run, or a run without grants, kills, pauses or
/// any of the faults it was given — a short run that missed one of those
/// (and had no violation) runs again, up to [`COVERAGE_RUNS`] times with
/// new seeds, and the runs' counts add up.
fn torture(label: &str, url: &str, extra: Extra<'_>) -> HashMap<String, u64> {
    let mut counts = run(label, url, &extra);
    for again in 1..=COVERAGE_RUNS {
        if long() || missing(&counts, &extra).is_empty() {
            break;
        }
        eprintln!(
            "{label}: no {:?} in this run; running again ({again} of {COVERAGE_RUNS})",
            missing(&counts, &extra)
        );
        for (key, n) in run(label, url, &extra) {
            *counts.entry(key).or_default() += n;
        }
    }
    let summary: Vec<String> = counts.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let summary = summary.join(" ");
    if let Some(key) = missing(&counts, &extra).first() {
        panic!("{label}: no {key} in: {summary}");
    }
    counts
}

/// What a run must cover that `counts` lack.
fn missing(counts: &HashMap<String, u64>, extra: &Extra<'_>) -> Vec<&'static str> {
    let mut expected = vec![
        "grants",
        "holds",
        "kills",
        "pauses",
        "worker_restarts",
        "unlocks",
        "inspected",
    ];
    if extra.restart_cmd.is_some() {
        expected.push("server_restarts");
    }
    if extra.proxy {
        expected.extend(["latency", "lose_replies", "reset"]);
    }
    if extra.node_restart_cmd.is_some() {
        expected.extend(["pause", "kill", "wipe"]);
    }
    if extra.shared_owners {
        expected.push("shared_reentries");
    }
    expected.retain(|key| counts.get(*key).copied().unwrap_or(0) == 0);
    expected
}

/// One run of the torture; its summary's counts. Panics on a violation or
/// a failed run, and (long runs) on fewer grants than asked for.
fn run(label: &str, url: &str, extra: &Extra<'_>) -> HashMap<String, u64> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("torture-{label}-"))
        .tempdir()
        .expect("temp dir");
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "--backend", url]).args(["--slack", "5s"]);
    let target: Option<u64> = if long() {
        // Throughput: short critical sections, rare long holds, chaos every few seconds.
        let grants = env_or("LOCKKIT_TORTURE_GRANTS", "100000");
        cmd.args(["--procs", "4", "--tasks", "4", "--names", "8", "--ttl", "1s"])
            .args(["--short-hold", "2ms", "--long-holds", "0.001", "--gap", "2ms"])
            .args(["--chaos-every", "4s", "--fault-every", "3s", "--grants", &grants])
            .args(["--seconds", &format!("{}s", env_or("LOCKKIT_TORTURE_SECONDS", "1800"))]);
        Some(grants.parse().expect("LOCKKIT_TORTURE_GRANTS is a number"))
    } else {
        // Node faults need longer: a node that rejoins empty sits out its
        // quarantine, and a killed one restarts; 30 s fits one of every
        // kind even on a loaded machine. So do
        // server restarts: Postgres's crash recovery takes seconds, and 18 s
        // with two of them beside the other backends' runs gave 15-17 grants
        // and, twice, no re-entry of a shared owner at all; 30 s beside the
        // runs of the other lock kinds gave 19 grants and no re-entry once,
        // so those runs take two processes (they have no shared owners to
        // pair) and restarts take 40 s.
        let slow = extra.node_restart_cmd.is_some() || extra.restart_cmd.is_some();
        let seconds = if slow {
            "40s"
        } else if extra.crowd {
            // 256 tasks in four processes: enough for the line to form,
            // turn over and meet each fault once; the kinds run in turn.
            "12s"
        } else {
            "18s"
        };
        let procs = if extra.kind.is_some() { "2" } else { "4" };
        cmd.args(["--procs", procs, "--tasks", "2", "--names", "3", "--ttl", "2s"])
            .args(["--seconds", seconds, "--chaos-every", "1500ms", "--fault-every", "1s"]);
        None
    };
    if extra.crowd {
        // At least 4 processes × 64 tasks on at most 2 names (over the
        // counts above), each call waiting up to 120 s.
        cmd.arg("--crowd");
    }
    cmd.arg("--log-dir").arg(dir.path());
    if extra.proxy {
        cmd.arg("--proxy");
    }
    if let Some(restart) = extra.node_restart_cmd {
        cmd.args(["--node-faults", "--node-restart-cmd", restart]);
    }
    if extra.shared_owners {
        cmd.arg("--shared-owners");
    }
    if let Some(kind) = extra.kind {
        cmd.args(["--kind", kind]);
    }
    if let Ok(seed) = std::env::var("LOCKKIT_TORTURE_SEED") {
        cmd.args(["--seed", &seed]);
    }
    if let Some(restart) = extra.restart_cmd {
        let every = if long() { "20s" } else { "6s" };
        cmd.args(["--restart-cmd", restart, "--restart-every", every]);
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
    if let Some(target) = target {
        assert!(
            counts["grants"] >= target,
            "{label}: {} grants, not {target}: {summary}",
            counts["grants"]
        );
    }
    counts
}

/// A SQLite database in `dir`, swept every second.
#[cfg(feature = "sqlite")]
fn sqlite_url(dir: &tempfile::TempDir) -> String {
    format!("sqlite://{}?sweep_interval=1s", dir.path().join("torture.db").display())
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(&dir);
    torture(
        "sqlite",
        &url,
        Extra {
            shared_owners: true,
            ..Extra::default()
        },
    );
}

/// Semaphores of 2 permits on SQLite: never more than 2 permits valid at
/// once, crashed holders' permits back after their lease.
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_semaphore() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(&dir);
    torture(
        "sqlite-semaphore",
        &url,
        Extra {
            kind: Some("semaphore:2"),
            ..Extra::default()
        },
    );
}

/// Read-write locks on SQLite, one write in five: never a writer beside
/// another owner's hold, readers' tokens the last writer's.
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_rw() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(&dir);
    torture(
        "sqlite-rw",
        &url,
        Extra {
            kind: Some("rw:200"),
            ..Extra::default()
        },
    );
}

/// The crowd kinds a run takes: all three in a long run (each to its own
/// `LOCKKIT_TORTURE_GRANTS`), `short` in a short one.
fn crowd_kinds(short: &'static [&'static str]) -> &'static [&'static str] {
    if long() { &["mutex", "semaphore:3", "rw"] } else { short }
}

/// Crowds on `url`: for each kind, 4 processes × 64 tasks on 2 names
/// with kills, pauses and worker restarts and what `extra` adds: the
/// kind's bound never broken (one holder, at most 3 permits, readers xor
/// one writer), tokens growing.
fn crowd(label: &str, url: &str, extra: &Extra<'_>, short: &'static [&'static str]) {
    for kind in crowd_kinds(short) {
        torture(
            &format!("{label}-crowd-{}", kind.replace(':', "")),
            url,
            Extra {
                restart_cmd: extra.restart_cmd,
                node_restart_cmd: extra.node_restart_cmd,
                proxy: extra.proxy,
                kind: Some(kind),
                crowd: true,
                ..Extra::default()
            },
        );
    }
}

/// Crowds on SQLite (the embedded default), every kind in turn.
#[cfg(feature = "sqlite")]
#[test]
fn sqlite_crowd() {
    let dir = tempfile::tempdir().expect("temp dir");
    let url = sqlite_url(&dir);
    crowd("sqlite", &url, &Extra::default(), &["mutex", "semaphore:3", "rw"]);
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
        Extra {
            restart_cmd: Some(&server.restart_cmd()),
            proxy: true,
            shared_owners: true,
            ..Extra::default()
        },
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
        Extra {
            restart_cmd: Some(&server.restart_cmd()),
            proxy: true,
            shared_owners: true,
            ..Extra::default()
        },
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
    torture(
        "redis",
        &format!("{url}?response_timeout=300ms"),
        Extra {
            restart_cmd: Some(&server.restart_cmd()),
            proxy: true,
            shared_owners: true,
            ..Extra::default()
        },
    );
}

/// Five private, empty redis-servers (no persistence) as Redlock masters,
/// killed when dropped; `restart_cmd` kills the one on `{port}` and starts
/// it again empty at once: the client's restart guard (on by default for
/// Redlock) keeps it out of every quorum until the leases it carried have
/// ended, so no delayed restart is needed.
#[cfg(feature = "redis")]
struct PrivateRedlock {
    dir: tempfile::TempDir,
    ports: Vec<u16>,
}

#[cfg(feature = "redis")]
impl PrivateRedlock {
    /// Five nodes on the ports from `LOCKKIT_TORTURE_REDLOCK_PORT` +
    /// `offset` (two runs at once need their own).
    fn start(offset: u16) -> (Self, String) {
        let base: u16 = env_or("LOCKKIT_TORTURE_REDLOCK_PORT", "16491")
            .parse::<u16>()
            .expect("LOCKKIT_TORTURE_REDLOCK_PORT is a port")
            + offset;
        let dir = tempfile::Builder::new()
            .prefix("torture-redlock-")
            .tempdir()
            .expect("temp dir");
        let d = dir.path().display();
        let script = format!(
            "#!/bin/sh\n\
             # start.sh PORT [restart]: an empty redis-server on PORT (killing the one there first)\n\
             p=$1; d='{d}'\n\
             if [ \"$2\" = restart ]; then pid=$(cat \"$d/$p.pid\") && kill -KILL $pid && \
             while kill -0 $pid 2>/dev/null; do sleep 0.05; done; fi\n\
             redis-server --bind 127.0.0.1 --port $p --save '' --appendonly no --daemonize yes \
             --pidfile \"$d/$p.pid\" --dir \"$d\" --logfile \"$d/$p.log\" || exit 1\n\
             for i in $(seq 100); do [ \"$(redis-cli -p $p ping 2>/dev/null)\" = PONG ] && exit 0; sleep 0.05; done; exit 1\n"
        );
        std::fs::write(dir.path().join("start.sh"), script).expect("write start.sh");
        let ports: Vec<u16> = (base..base + 5).collect();
        let node = PrivateRedlock { dir, ports };
        for p in &node.ports {
            let busy = Command::new("redis-cli").args(["-p", &p.to_string(), "ping"]).output();
            assert!(
                !busy.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("PONG")),
                "port {p} is taken by another server; set LOCKKIT_TORTURE_REDLOCK_PORT"
            );
            let ok = Command::new("sh")
                .arg(node.dir.path().join("start.sh"))
                .arg(p.to_string())
                .status()
                .expect("start redis-server");
            assert!(ok.success(), "the private redis-server on {p} did not start");
        }
        let hosts: Vec<String> = node.ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let url = format!("redlock://{}", hosts.join(","));
        (node, url)
    }

    fn restart_cmd(&self) -> String {
        format!("sh '{}' {{port}} restart", self.dir.path().join("start.sh").display())
    }
}

#[cfg(feature = "redis")]
impl Drop for PrivateRedlock {
    fn drop(&mut self) {
        for p in &self.ports {
            let pid = self.dir.path().join(format!("{p}.pid"));
            let _ = Command::new("sh")
                .args(["-c", &format!("kill -KILL $(cat '{}')", pid.display())])
                .status();
        }
    }
}

#[cfg(feature = "redis")]
#[test]
fn redlock() {
    // Private masters: node kills and wipes must not touch the shared ones.
    // The shared URL says redis-server is installed (or skips).
    if lockkit_core::testkit::server_url("LOCKKIT_REDLOCK_URL").is_none() {
        return;
    }
    let (nodes, url) = PrivateRedlock::start(0);
    torture(
        "redlock",
        &url,
        Extra {
            proxy: true,
            node_restart_cmd: Some(&nodes.restart_cmd()),
            shared_owners: true,
            ..Extra::default()
        },
    );
}

/// Semaphores of 2 permits on Redlock, with node faults and the fault
/// proxy: a permit is one of two slots held on a quorum, so never more
/// than 2 stand, whichever nodes pause, restart empty or lose their keys.
#[cfg(feature = "redis")]
#[test]
fn redlock_semaphore() {
    if lockkit_core::testkit::server_url("LOCKKIT_REDLOCK_URL").is_none() {
        return;
    }
    let (nodes, url) = PrivateRedlock::start(10);
    torture(
        "redlock-semaphore",
        &url,
        Extra {
            proxy: true,
            node_restart_cmd: Some(&nodes.restart_cmd()),
            kind: Some("semaphore:2"),
            ..Extra::default()
        },
    );
}

/// Crowds on Redlock: private masters with node kills and wipes (each
/// rejoining at once) and the fault proxy.
#[cfg(feature = "redis")]
#[test]
fn redlock_crowd() {
    if lockkit_core::testkit::server_url("LOCKKIT_REDLOCK_URL").is_none() {
        return;
    }
    let (nodes, url) = PrivateRedlock::start(20);
    let extra = Extra {
        proxy: true,
        node_restart_cmd: Some(&nodes.restart_cmd()),
        ..Extra::default()
    };
    crowd("redlock", &url, &extra, &["semaphore:3"]);
}

/// A kind of lock other than the mutex on the shared server of `var`
/// (with `params` added to its URL), behind the fault proxy. No server
/// restarts: those are the mutex runs', on private servers.
fn shared_kind(label: &str, var: &str, params: &str, kind: &str) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    torture(
        label,
        &format!("{url}{sep}{params}"),
        Extra {
            proxy: true,
            kind: Some(kind),
            ..Extra::default()
        },
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_rw() {
    shared_kind("redis-rw", "LOCKKIT_REDIS_URL", "response_timeout=300ms", "rw:200");
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_rw() {
    shared_kind("mysql-rw", "LOCKKIT_MYSQL_URL", "sweep_interval=1s", "rw:200");
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_semaphore() {
    shared_kind(
        "postgres-semaphore",
        "LOCKKIT_POSTGRES_URL",
        "sweep_interval=1s",
        "semaphore:2",
    );
}

/// A crowd on the shared server of `var` (with `params` added to its
/// URL) behind the fault proxy: the short runs. Long runs of Redis,
/// MariaDB and Postgres restart a private server as well (their tests).
fn shared_crowd(label: &str, var: &str, params: &str, short: &'static [&'static str]) {
    let Some(url) = lockkit_core::testkit::server_url(var) else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    let extra = Extra {
        proxy: true,
        ..Extra::default()
    };
    crowd(label, &format!("{url}{sep}{params}"), &extra, short);
}

#[cfg(feature = "redis")]
#[test]
fn redis_crowd() {
    if !long() {
        return shared_crowd("redis", "LOCKKIT_REDIS_URL", "response_timeout=300ms", &["semaphore:3"]);
    }
    if lockkit_core::testkit::server_url("LOCKKIT_REDIS_URL").is_none() {
        return;
    }
    let (server, url) = PrivateRedis::start();
    let extra = Extra {
        restart_cmd: Some(&server.restart_cmd()),
        proxy: true,
        ..Extra::default()
    };
    crowd("redis", &format!("{url}?response_timeout=300ms"), &extra, &[]);
}

/// A crowd's long run on a private server of `scripts/services` with
/// restarts (`service` as `PrivateServer::start` takes it).
#[cfg(any(feature = "mysql", feature = "postgres"))]
fn private_crowd(label: &str, var: &str, service: &'static str, port: &str) {
    if lockkit_core::testkit::server_url(var).is_none() {
        return;
    }
    let (server, url) = PrivateServer::start(service, port);
    let extra = Extra {
        restart_cmd: Some(&server.restart_cmd()),
        proxy: true,
        ..Extra::default()
    };
    crowd(label, &format!("{url}?sweep_interval=1s"), &extra, &[]);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql_crowd() {
    if long() {
        return private_crowd("mysql", "LOCKKIT_MYSQL_URL", "mysql", "13318");
    }
    shared_crowd("mysql", "LOCKKIT_MYSQL_URL", "sweep_interval=1s", &["rw"]);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_crowd() {
    if long() {
        return private_crowd("postgres", "LOCKKIT_POSTGRES_URL", "postgres", "15443");
    }
    shared_crowd("postgres", "LOCKKIT_POSTGRES_URL", "sweep_interval=1s", &["mutex"]);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_crowd() {
    // The shared server, as the other ZooKeeper runs: no restarts.
    shared_crowd("zookeeper", "LOCKKIT_ZK_URL", "session_timeout=4s", &["rw"]);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_semaphore() {
    shared_kind(
        "zookeeper-semaphore",
        "LOCKKIT_ZK_URL",
        "session_timeout=4s",
        "semaphore:2",
    );
}

/// Elections on ZooKeeper: each task a candidate that campaigns, leads
/// and resigns, while leaders are killed and paused past their session:
/// never two valid leaderships at once, epochs growing.
#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_election() {
    shared_kind("zookeeper-election", "LOCKKIT_ZK_URL", "session_timeout=4s", "election");
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_rw() {
    shared_kind("zookeeper-rw", "LOCKKIT_ZK_URL", "session_timeout=4s", "rw:200");
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper() {
    // The shared server: no restarts; a 4 s session (the server's minimum is 2 s).
    let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_ZK_URL") else {
        return;
    };
    let sep = if url.contains('?') { '&' } else { '?' };
    torture(
        "zookeeper",
        &format!("{url}{sep}session_timeout=4s"),
        // Behind the fault proxy (latency past the client's patience, lost
        // replies, resets): the long runs found abandoned sessions' late
        // creates (seed 75586693816923, fenced since), an old session's
        // contender node outliving its call (seed 73134003798754, taken
        // back since), a stalled holder without a session deadline (seed
        // 64249392244715), failed calls' nodes outliving their session on
        // the client (seeds 37544394040939, 114708323089444) and a failed
        // call's node outliving the call on a slow connection (seed
        // 97591562308555); see the README's torture table. The long run on
        // c0bcf9d (seed 108422569455836) was clean: 100,007 grants.
        Extra {
            proxy: true,
            shared_owners: true,
            ..Extra::default()
        },
    );
}
