//! A server of `scripts/services` in a private state directory, on a
//! private port, for the tests that restart, crash or step the clock of
//! their database (no other test's server is touched).

#![cfg(any(feature = "mysql", feature = "postgres"))]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use lockkit_core::testkit::services_required;

/// A server of `scripts/services` (`mysql` or `postgres`) in a private
/// state directory, on a private port.
pub(crate) struct PrivateServer {
    service: &'static str,
    dir: PathBuf,
    port: String,
    /// The variable that sets `port`.
    port_var: String,
    /// The file whose number of ms the server's wall clock is shifted by
    /// (`None`: a server whose clock keeps time).
    shift_file: Option<PathBuf>,
}

impl PrivateServer {
    /// The restart tests' server: its state under `target/services-restart`,
    /// on `LOCKKIT_RESTART_<SERVICE>_PORT` or `default_port`.
    pub(crate) fn new(service: &'static str, default_port: &str) -> Self {
        Self::in_dir(service, "restart", default_port, None)
    }

    /// A server with its state under `target/services-<purpose>`, on
    /// `LOCKKIT_<PURPOSE>_<SERVICE>_PORT` or `default_port`.
    fn in_dir(service: &'static str, purpose: &str, default_port: &str, shift: Option<&str>) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("target/services-{purpose}"));
        let port_var = format!(
            "LOCKKIT_{}_{}_PORT",
            purpose.to_ascii_uppercase(),
            service.to_ascii_uppercase()
        );
        PrivateServer {
            service,
            port: std::env::var(&port_var).unwrap_or_else(|_| default_port.to_owned()),
            port_var,
            shift_file: shift.map(|file| dir.join(file)),
            dir,
        }
    }

    /// A server whose wall clock a test steps: its state under
    /// `target/services-clock`, on `LOCKKIT_CLOCK_<SERVICE>_PORT` or
    /// `default_port`, with `scripts/clock_shift.c` preloaded reading the
    /// shift from [`PrivateServer::shift_clock`]'s file.
    pub(crate) fn with_clock(service: &'static str, default_port: &str) -> Self {
        Self::in_dir(service, "clock", default_port, Some(&format!("{service}-shift_ms")))
    }

    /// Steps the server's wall clock to `ms` from true time.
    pub(crate) fn shift_clock(&self, ms: i64) {
        let file = self.shift_file.as_ref().expect("a server started with_clock");
        std::fs::create_dir_all(&self.dir).expect("the server's state directory");
        crate::common::write_clock_shift(file, ms);
    }

    fn services(&self, action: &str) -> (bool, String, String) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let upper = self.service.to_ascii_uppercase();
        let mut command = Command::new(root.join("scripts/services"));
        command
            .args([action, self.service])
            .env("LOCKKIT_SERVICES_DIR", &self.dir)
            .env(format!("LOCKKIT_{upper}_PORT"), &self.port);
        if let Some(file) = &self.shift_file {
            command.env("LOCKKIT_CLOCK_SHIFT_FILE", file);
        }
        let out = command.output().expect("run scripts/services");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts it; the URL. Refuses to reuse a server it did not start.
    pub(crate) fn up(&self) -> String {
        let (ok, stdout, stderr) = self.services("up");
        assert!(ok, "starting the private {} failed:\n{stderr}", self.service);
        assert!(
            !stderr.contains("reusing the server"),
            "port {} is taken by another server; set {}",
            self.port,
            self.port_var
        );
        let prefix = format!("export LOCKKIT_{}_URL=", self.service.to_ascii_uppercase());
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .expect("scripts/services prints the URL")
            .to_owned()
    }

    /// A clean shutdown.
    pub(crate) fn down(&self) {
        let (ok, _, stderr) = self.services("down");
        assert!(ok, "stopping the private {} failed:\n{stderr}", self.service);
    }

    /// A crash: no clean shutdown, the database recovers from its log at the
    /// next start. MariaDB gets SIGKILL; Postgres SIGQUIT ("immediate"
    /// shutdown: no checkpoint, crash recovery at restart), because after a
    /// SIGKILL its lock file would name a PID that lingers as a zombie where
    /// nothing reaps it, and a new postmaster refuses to start.
    pub(crate) fn crash(&self) {
        let pid = std::fs::read_to_string(self.dir.join(self.service).join("ours.pid"))
            .expect("pid file of the private server");
        let pid = pid.trim();
        let signal = if self.service == "postgres" { "-QUIT" } else { "-KILL" };
        let status = Command::new("kill").args([signal, pid]).status().unwrap();
        assert!(status.success(), "kill {signal} {pid}");
        let stat = format!("/proc/{pid}/stat");
        while std::fs::read_to_string(&stat).is_ok_and(|s| !s.contains(") Z ")) {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        let _ = self.services("down");
    }
}

/// Whether the database `var` names is set up here (or required).
pub(crate) fn available(var: &str) -> bool {
    if std::env::var(var).is_err() && !services_required() {
        eprintln!("skipped: {var} is unset, so this database is not set up here");
        return false;
    }
    true
}
