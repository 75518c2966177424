//! Fencing tokens and clients across MariaDB restarts, on a private MariaDB
//! (its own data directory under `target/` and its own port, started and
//! stopped with `scripts/services`), so no other test's server is touched.
//!
//! Runs where MariaDB is available: when `LOCKKIT_MYSQL_URL` is set (the
//! shared server is up, so the packages are installed) or
//! `LOCKKIT_REQUIRE_SERVICES=1`; skipped otherwise. The port is 13317 unless
//! `LOCKKIT_RESTART_MYSQL_PORT` says otherwise.

#![cfg(feature = "mysql")]

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use lockkit::{LockClient, LockError};
use lockkit_core::testkit::services_required;

struct PrivateMariaDb {
    dir: PathBuf,
    port: String,
}

impl PrivateMariaDb {
    fn services(&self, action: &str) -> (bool, String, String) {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let out = Command::new(root.join("scripts/services"))
            .args([action, "mysql"])
            .env("LOCKKIT_SERVICES_DIR", &self.dir)
            .env("LOCKKIT_MYSQL_PORT", &self.port)
            .output()
            .expect("run scripts/services");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Starts it; the URL. Refuses to reuse a server it did not start.
    fn up(&self) -> String {
        let (ok, stdout, stderr) = self.services("up");
        assert!(ok, "starting the private MariaDB failed:\n{stderr}");
        assert!(
            !stderr.contains("reusing the server"),
            "port {} is taken by another server; set LOCKKIT_RESTART_MYSQL_PORT",
            self.port
        );
        stdout
            .lines()
            .find_map(|l| l.strip_prefix("export LOCKKIT_MYSQL_URL="))
            .expect("scripts/services prints the URL")
            .to_owned()
    }

    /// A clean shutdown.
    fn down(&self) {
        let (ok, _, stderr) = self.services("down");
        assert!(ok, "stopping the private MariaDB failed:\n{stderr}");
    }

    /// SIGKILL: no clean shutdown, InnoDB recovers from its redo log.
    fn crash(&self) {
        let pid = std::fs::read_to_string(self.dir.join("mysql/ours.pid")).expect("pid file of the private server");
        let pid = pid.trim();
        let status = Command::new("kill").args(["-KILL", pid]).status().unwrap();
        assert!(status.success(), "kill -KILL {pid}");
        while std::path::Path::new(&format!("/proc/{pid}/stat")).exists()
            && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PrivateMariaDb {
    fn drop(&mut self) {
        let _ = self.services("down");
    }
}

async fn cycle(client: &LockClient, name: &str, last: &mut u64) {
    let guard = client
        .lock_with(name, &client.options().wait(Duration::from_secs(60)))
        .await
        .unwrap_or_else(|e| panic!("lock after a restart: {e:?}"));
    assert!(
        guard.fencing_token() > *last,
        "token {} after {last}: tokens must grow across restarts",
        guard.fencing_token()
    );
    *last = guard.fencing_token();
    guard.unlock().await.unwrap();
    assert!(
        client.inspect(name).await.unwrap().is_none(),
        "released rows are deleted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_grow_across_mariadb_restarts() {
    if std::env::var("LOCKKIT_MYSQL_URL").is_err() && !services_required() {
        eprintln!("skipped: MariaDB is not set up here (LOCKKIT_MYSQL_URL unset)");
        return;
    }
    let server = PrivateMariaDb {
        dir: PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/services-restart"),
        port: std::env::var("LOCKKIT_RESTART_MYSQL_PORT").unwrap_or_else(|_| "13317".to_owned()),
    };
    let url = format!("{}?connect_timeout=2s&sweep_interval=200ms", server.up());
    let client = lockkit::connect(&url).await.expect("connect to the private MariaDB");
    let names = ["restart/a", "restart/b", "restart/锁 'quoted'"];
    let mut last = [0u64; 3];
    for _ in 0..3 {
        for (name, last) in names.iter().zip(&mut last) {
            cycle(&client, name, last).await;
        }
    }

    for how in ["clean shutdown", "SIGKILL"] {
        match how {
            "clean shutdown" => server.down(),
            _ => server.crash(),
        }
        // While the server is down: a typed, retryable error, not a panic.
        let e = client.try_lock(names[0]).await.expect_err("the server is down");
        assert!(
            matches!(e, LockError::Backend { retryable: true, .. }),
            "while down ({how}): {e:?}"
        );
        server.up();
        // The same client, not rebuilt, works again, and tokens keep growing.
        for (name, last) in names.iter().zip(&mut last) {
            cycle(&client, name, last).await;
        }
        // So does a new one.
        let fresh = lockkit::connect(&url).await.expect("reconnect");
        cycle(&fresh, names[0], &mut last[0]).await;
    }
}
