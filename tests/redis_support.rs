//! Private `redis-server` processes for the Redis fault tests: each on its
//! own free loopback port, in its own temporary directory, without
//! persistence, killed when dropped. Included by the `redis_*` test files
//! with `#[path = "redis_support.rs"] mod support;` (as a test target of its
//! own it has no tests).
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

/// One private Redis server.
pub struct Server {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
    extra: Vec<String>,
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
    /// `--cluster-enabled`, …).
    pub fn start_with(extra: &[&str]) -> Server {
        let port = free_port();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = std::env::temp_dir().join(format!("lockkit-redis-test-{}-{port}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let mut server = Server {
            port,
            dir,
            child: None,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--enable-debug-command", "local"])
            .arg("--dir")
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.extra)
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
                return;
            }
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                let log = std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default();
                panic!("redis-server on port {} exited ({status}):\n{log}", self.port);
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
        self.launch();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.pid().is_some() {
            self.thaw();
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
