//! The real binary across processes, on the embedded SQLite backend.
#![cfg(feature = "sqlite")]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn db_url(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("lockkit-cli-{tag}-{}-{:x}", std::process::id(), rand_u32()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}", dir.join("locks.db").display());
    (dir, url)
}

fn rand_u32() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos()
}

fn lockkit(url: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockkit"));
    cmd.arg("--url").arg(url).args(args).env_remove("LOCKKIT_URL");
    cmd
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn concurrent_execs_serialize_and_no_wait_is_busy() {
    let (dir, url) = db_url("exec");
    let log = dir.join("log");
    // Each command appends "start" and "end" around a pause; under the lock
    // the lines alternate and never interleave.
    let script = format!("echo start >> {0}; sleep 0.3; echo end >> {0}", log.display());
    let children: Vec<_> = (0..3)
        .map(|_| {
            lockkit(&url, &["exec", "shared", "--wait", "60s", "--", "sh", "-c", &script])
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // While they run, a --no-wait exec on the same name must find it busy
    // at least once (retry while the first has not started yet).
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut saw_busy = false;
    while Instant::now() < deadline && !saw_busy {
        let o = lockkit(&url, &["exec", "shared", "--no-wait", "--", "true"])
            .output()
            .unwrap();
        match o.status.code() {
            Some(75) => saw_busy = true,
            Some(0) => std::thread::sleep(Duration::from_millis(20)),
            other => panic!("unexpected exit {other:?}: {}", stderr(&o)),
        }
    }
    assert!(saw_busy, "--no-wait never saw the lock held");
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let lines = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(lines.len(), 6);
    for pair in lines.chunks(2) {
        assert_eq!(pair, ["start", "end"], "commands overlapped: {lines:?}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn a_wait_that_runs_out_exits_75() {
    let (dir, url) = db_url("timeout");
    let mut holder = lockkit(&url, &["exec", "busy", "--", "sleep", "30"]).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = lockkit(&url, &["status", "busy", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if v["held"] == true {
            assert!(v["token"].as_u64().unwrap() > 0);
            break;
        }
        assert!(Instant::now() < deadline, "the holder never got the lock");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = lockkit(&url, &["exec", "busy", "--wait", "300ms", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(stderr(&o).contains("timed out"), "{}", stderr(&o));
    let o = lockkit(&url, &["list", "--json"]).output().unwrap();
    assert!(String::from_utf8_lossy(&o.stdout).contains("\"busy\""));
    let o = lockkit(&url, &["release", "busy", "--force"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // The forced-out holder's command is stopped when it notices.
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(76), "the holder must report the lost lock");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn demo_across_processes_adds_up() {
    let (dir, url) = db_url("demo");
    let o = lockkit(&url, &["demo", "--workers", "4", "--budget", "3000"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}{}", stderr(&o));
    assert!(out.contains("worker processes under one lock"), "{out}");
    assert!(out.contains("== budget 30.00"), "{out}");
    std::fs::remove_dir_all(dir).unwrap();
}
