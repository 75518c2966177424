//! Private `redis-server` processes for the Redis fault tests: each on its
//! own free loopback port, in its own temporary directory, without
//! persistence, killed when dropped. Used by the `redis`, `redlock` and
//! `facade` test binaries (`crate::common::redis`).
#![allow(dead_code)]
#![cfg(feature = "redis")]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lockkit_core::testkit::services_required;

/// Whether `redis-server` and `redis-cli` can be run. Without them a test
/// skips, or fails when `LOCKKIT_REQUIRE_SERVICES=1`.
pub fn available(test: &str) -> bool {
    let ok = ["redis-server", "redis-cli"].iter().all(|bin| {
        Command::new(bin)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !ok {
        if services_required() {
            panic!("{test}: redis-server/redis-cli are not installed and LOCKKIT_REQUIRE_SERVICES=1");
        }
        eprintln!("skipped {test}: redis-server/redis-cli are not installed (scripts/services up redis installs them)");
    }
    ok
}

/// A private server and two clients of it (two processes, as far as the
/// locks can tell), for the test named `test`; `None` when redis-server
/// cannot be run (the test skips, see [`available`]).
pub async fn two_clients(test: &str) -> Option<(Server, lockkit::LockClient, lockkit::LockClient)> {
    if !available(test) {
        return None;
    }
    let server = Server::start();
    let a = lockkit::connect(&server.url()).await.expect("connect");
    let b = lockkit::connect(&server.url()).await.expect("connect");
    Some((server, a, b))
}

/// One private Redis server.
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
    /// The server's environment on top of this process's.
    env: Vec<(String, String)>,
}

/// The quarantine a refused acquisition reports: the error is a
/// retryable backend error whose source is the restart guard's
/// [`Quarantined`](lockkit_redis::Quarantined), with the time left.
pub fn quarantine_of(e: &lockkit::LockError) -> Duration {
    assert!(
        matches!(e, lockkit::LockError::Backend { retryable: true, .. }),
        "{e:?}"
    );
    let q = std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<lockkit_redis::Quarantined>())
        .unwrap_or_else(|| panic!("not a quarantine: {e:?}"));
    q.left.expect("the quarantine set")
}

/// A loopback port nobody listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Server {
    /// Starts a server on a free port.
    pub fn start() -> Server {
        Self::start_with(&[])
    }

    /// Starts a server with extra `redis-server` arguments (`--requirepass`,
    /// `--cluster-enabled`, …) on a free port. Another process may take a
    /// free port before the server binds it; then the server starts again
    /// on other ports.
    pub fn start_with(extra: &[&str]) -> Server {
        Self::start_with_env(extra, &[])
    }

    /// [`start_with`](Self::start_with), the server's environment also
    /// holding `env`.
    pub fn start_with_env(extra: &[&str], env: &[(&str, &str)]) -> Server {
        let mut tries = 0;
        loop {
            tries += 1;
            match Self::try_start_on(free_port(), extra, env) {
                Ok(server) => return server,
                Err(e) if e.contains("Address already in use") && tries < 10 => continue,
                Err(e) => panic!("{e}"),
            }
        }
    }

    /// Starts a server on `port`.
    pub fn start_on(port: u16, extra: &[&str]) -> Server {
        Self::try_start_on(port, extra, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn try_start_on(port: u16, extra: &[&str], env: &[(&str, &str)]) -> Result<Server, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("lockkit-redis-test-{}-{port}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        // A cluster node also listens on its bus port, by default port +
        // 10000: in the ephemeral range, where any outgoing connection may
        // hold it. Name a free one.
        if extra.iter().any(|a| a == "--cluster-enabled") && !extra.iter().any(|a| a == "--cluster-port") {
            extra.extend(["--cluster-port".to_owned(), free_port().to_string()]);
        }
        let mut server = Server {
            port,
            dir,
            child: None,
            extra,
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        server.launch()?;
        Ok(server)
    }

    /// Starts `redis-server` and waits until it answers; the server's log
    /// when it exits instead.
    fn launch(&mut self) -> Result<(), String> {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self
                .try_cli(&["PING"])
                .is_some_and(|r| r.trim() == "PONG" || r.contains("NOAUTH"))
            {
                return Ok(());
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                return Err(format!("redis-server on port {} exited ({status}):\n{log}", self.port));
            }
            assert!(
                Instant::now() < deadline,
                "redis-server on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The server's own temporary directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn try_cli(&self, args: &[&str]) -> Option<String> {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1", "-p", &self.port.to_string()]);
        // A server started with --requirepass: redis-cli logs in as default.
        if let Some(i) = self.extra.iter().position(|a| a == "--requirepass") {
            cmd.args(["--no-auth-warning", "-a", &self.extra[i + 1]]);
        }
        let out = cmd.args(args).stdin(Stdio::null()).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs one `redis-cli` command and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        self.try_cli(args)
            .unwrap_or_else(|| panic!("redis-cli -p {} {args:?} failed", self.port))
    }

    /// The server's clock (`TIME`) in ms.
    pub fn time_ms(&self) -> u64 {
        time_ms_of(&self.cli(&["TIME"]))
    }

    /// Runs the commands in `input` (one a line) on one `redis-cli`
    /// connection, so a `READONLY` first lets a cluster replica answer reads.
    pub fn cli_session(&self, input: &str) -> String {
        use std::io::Write;
        let mut child = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-cli");
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write to redis-cli");
        let out = child.wait_with_output().expect("redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Starts a replica of `master` and waits until it has synchronised.
    pub fn replica_of(master: &Server) -> Server {
        let replica = Self::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]);
        let deadline = Instant::now() + Duration::from_secs(30);
        while !replica.cli(&["INFO", "replication"]).contains("master_link_status:up") {
            assert!(
                Instant::now() < deadline,
                "the replica on port {} did not synchronise with {}",
                replica.port,
                master.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        replica
    }

    /// The `calls` of every command in `INFO commandstats`, by command name.
    pub fn command_calls(&self) -> std::collections::BTreeMap<String, u64> {
        self.cli(&["INFO", "commandstats"])
            .lines()
            .filter_map(|l| {
                let (name, rest) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
                Some((name.to_owned(), calls.parse().ok()?))
            })
            .collect()
    }

    /// Kills the server (SIGKILL): clients see refused connections.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open, nothing answers.
    pub fn freeze(&self) {
        self.signal("STOP");
    }

    /// Resumes a frozen server.
    pub fn thaw(&self) {
        self.signal("CONT");
    }

    fn signal(&self, sig: &str) {
        if let Some(pid) = self.pid() {
            let ok = Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "kill -{sig} {pid}");
        }
    }

    /// Starts the server again on the same port, with an empty data set (a
    /// restart without persistence).
    pub fn restart(&mut self) {
        self.stop();
        if let Err(e) = self.launch() {
            panic!("{e}");
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // SIGKILL ends a frozen server too; no signal here may panic, as a
        // panic while a failed test unwinds aborts the whole binary.
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A private sentinel monitoring `master` as the group `m` (quorum 1,
/// down after 1 s), in a directory of the master's.
pub struct Sentinel {
    pub port: u16,
    child: Child,
    dir: PathBuf,
}

impl Sentinel {
    /// Starts it on a free port.
    pub fn start(master: &Server) -> Sentinel {
        let settings = "sentinel down-after-milliseconds m 1000\nsentinel failover-timeout m 5000\n";
        Sentinel::spawn(master.dir().join("sentinel"), master.port, settings)
    }

    /// Starts one on a free port with its files in `dir`, monitoring the
    /// master on `master` as `m` (quorum 1), with the `settings` lines
    /// added to its configuration.
    pub fn spawn(dir: PathBuf, master: u16, settings: &str) -> Sentinel {
        let port = free_port();
        std::fs::create_dir_all(&dir).expect("dir");
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "bind 127.0.0.1\nport {port}\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor m 127.0.0.1 {master} 1\n{settings}",
                dir = dir.display(),
            ),
        )
        .expect("sentinel.conf");
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn sentinel");
        Sentinel { port, child, dir }
    }

    /// Runs one `redis-cli` command against the sentinel.
    pub fn cli(&self, args: &[&str]) -> String {
        String::from_utf8_lossy(&cli_on(self.port, args).stdout).into_owned()
    }

    /// The port of the master the sentinel names for `m`.
    pub fn master_port(&self) -> Option<u16> {
        self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", "m"])
            .lines()
            .nth(1)
            .and_then(|p| p.trim().parse().ok())
    }
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A failed run shows what the sentinel decided, and why.
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("the sentinel's log, last lines:");
            tail.iter().rev().for_each(|l| eprintln!("  {l}"));
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The key lockkit keeps `name`'s hold in under the default prefix (see
/// lockkit-redis' key layout): `lockkit:{TAG}:NAME`.
pub fn lock_key(name: &str) -> String {
    let h = name
        .bytes()
        .fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("lockkit:{{{:03x}}}:{name}", h % 4096)
}

/// The token and hold count of a mutex hold as its lock key stores it
/// (layout 2: `2|TOKEN|COUNT|W|SHARES|OWNER`), or `None` for no hold
/// (nothing stored, or a free name a line waits for).
pub fn stored_hold(value: &str) -> Option<(String, u32)> {
    let mut fields = value.trim().split('|');
    if fields.next() != Some("2") {
        return None;
    }
    let token = fields.next()?.to_owned();
    let count = fields.next()?.parse().ok()?;
    Some((token, count))
}

/// The fencing counter of `name`'s bucket under the default prefix:
/// `lockkit:{TAG}fence`.
pub fn counter_key(name: &str) -> String {
    let lock = lock_key(name);
    format!("{}fence", &lock[..lock.find('}').expect("a hash tag") + 1])
}

/// Where a waiting client's channel differs from a lock key under the
/// default prefix (the scripts' waiter mark): after `lockkit:{TAG}`.
pub const WAITER_MARK: &str = "13";

/// Retries `f` until it gives a value, for at most 30 s.
pub async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(t) = f().await {
            return t;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One test at a time on the `redis-clock` service's clock (per test
/// binary; cargo runs the binaries one after another).
static CLOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The `redis-clock` service (`scripts/services up redis-clock`): a
/// `redis-server` whose wall clock the file `LOCKKIT_REDIS_CLOCK_SHIFT_FILE`
/// shifts. This test's alone while the value lives; the shift goes back to
/// 0 when it is dropped.
pub struct SteppedClock {
    /// `redis://127.0.0.1:PORT`.
    pub url: String,
    port: u16,
    shift_file: PathBuf,
    _one: tokio::sync::MutexGuard<'static, ()>,
}

impl SteppedClock {
    /// The service, once no other test of this binary steps it (`None`:
    /// not configured, and not required).
    pub async fn from_env() -> Option<SteppedClock> {
        let url = lockkit_core::testkit::server_url("LOCKKIT_REDIS_CLOCK_URL")?;
        let shift_file = std::env::var("LOCKKIT_REDIS_CLOCK_SHIFT_FILE").expect(
            "LOCKKIT_REDIS_CLOCK_SHIFT_FILE comes with LOCKKIT_REDIS_CLOCK_URL (scripts/services up redis-clock)",
        );
        let port = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("LOCKKIT_REDIS_CLOCK_URL ends with a port");
        let one = CLOCK.lock().await;
        let clock = SteppedClock {
            url,
            port,
            shift_file: shift_file.into(),
            _one: one,
        };
        clock.shift(0);
        Some(clock)
    }

    /// Sets the server's clock `ms` away from the real time.
    pub fn shift(&self, ms: i64) {
        super::write_clock_shift(&self.shift_file, ms);
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// A private server whose clock this value steps too: the service's
    /// shim (built beside the shift file) preloaded, reading the same file.
    pub fn start_server(&self) -> Server {
        let shim = self.shift_file.with_file_name("clock_shift.so");
        let (shim, file) = (shim.display().to_string(), self.shift_file.display().to_string());
        Server::start_with_env(&[], &[("LD_PRELOAD", &shim), ("LOCKKIT_CLOCK_SHIFT_FILE", &file)])
    }

    /// Runs one `redis-cli` command on the server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = cli_on(self.port, args);
        assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for SteppedClock {
    fn drop(&mut self) {
        self.shift(0);
    }
}

/// One `redis-cli` command against the server on `port`.
fn cli_on(port: u16, args: &[&str]) -> std::process::Output {
    Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli")
}

/// One line of `CLUSTER NODES`.
pub struct ClusterNode {
    pub id: String,
    pub port: u16,
    pub flags: String,
    /// The master's id (`-` for a master).
    pub master: String,
    /// The slot ranges it serves, inclusive.
    pub slots: Vec<(u16, u16)>,
}

/// The nodes of a `CLUSTER NODES` answer.
pub fn parse_cluster_nodes(text: &str) -> Vec<ClusterNode> {
    text.lines().filter_map(parse_cluster_node).collect()
}

fn parse_cluster_node(line: &str) -> Option<ClusterNode> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let addr = f.get(1)?.split(['@', ',']).next()?;
    let slots = f
        .get(8..)
        .unwrap_or_default()
        .iter()
        .filter_map(|s| match s.split_once('-') {
            Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
            None => s.parse().ok().map(|s| (s, s)),
        });
    Some(ClusterNode {
        id: f.first()?.to_string(),
        port: addr.rsplit(':').next()?.parse().ok()?,
        flags: f.get(2)?.to_string(),
        master: f.get(3)?.to_string(),
        slots: slots.collect(),
    })
}

/// The time in ms of a `TIME` answer as `redis-cli` prints it.
pub fn time_ms_of(time: &str) -> u64 {
    let mut parts = time.lines().map(|l| l.trim().parse::<u64>().expect("TIME"));
    parts.next().expect("s") * 1000 + parts.next().expect("µs") / 1000
}
