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

/// Waits (up to 30 s) until `status NAME --json` shows `n` holds under
/// `key` (`permits`, `readers`).
fn until_holds(url: &str, name: &str, key: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = lockkit(url, &["status", name, "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let held = v[key].as_array().map_or(0, Vec::len);
        if held == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{n} {key} of {name} not held within 30 s: {v}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Ends a running `lockkit exec` (SIGTERM, which it forwards to its
/// command) and returns its exit code.
fn stop(mut exec: std::process::Child) -> Option<i32> {
    // SAFETY: kill(2) with the pid of a child this test spawned.
    unsafe { libc::kill(exec.id() as libc::pid_t, libc::SIGTERM) };
    exec.wait().unwrap().code()
}

/// `--permits N` across processes: N commands hold at once, the next is
/// busy, a different N is refused; `--shared` commands share the
/// read-write lock, a `--write` one is busy beside them.
#[test]
fn exec_permits_and_shared_across_processes() {
    let (dir, url) = db_url("kinds");
    let hold = |args: &[&str]| {
        let mut all = vec!["exec"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--", "sleep", "60"]);
        lockkit(&url, &all).stdout(Stdio::null()).spawn().unwrap()
    };
    let run = |args: &[&str]| {
        let mut all = vec!["exec"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--no-wait", "--", "true"]);
        lockkit(&url, &all).output().unwrap()
    };

    let a = hold(&["farm", "--permits", "2"]);
    until_holds(&url, "farm", "permits", 1);
    let b = hold(&["farm", "--permits", "2"]);
    until_holds(&url, "farm", "permits", 2);
    let o = run(&["farm", "--permits", "2"]);
    assert_eq!(o.status.code(), Some(75), "a third permit of two: {}", stderr(&o));
    let o = run(&["farm", "--permits", "3"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "another permit count is an error: {}",
        stderr(&o)
    );
    assert!(stderr(&o).contains("permits"), "{}", stderr(&o));
    let o = run(&["farm"]);
    assert_eq!(o.status.code(), Some(75), "one name, one lock: {}", stderr(&o));
    stop(a);
    until_holds(&url, "farm", "permits", 1);
    let o = run(&["farm", "--permits", "2"]);
    assert!(o.status.success(), "a permit came back: {}", stderr(&o));
    stop(b);

    let r1 = hold(&["config", "--shared"]);
    until_holds(&url, "config", "readers", 1);
    let o = run(&["config", "--shared"]);
    assert!(o.status.success(), "readers share: {}", stderr(&o));
    let o = run(&["config", "--write"]);
    assert_eq!(o.status.code(), Some(75), "no writer beside a reader: {}", stderr(&o));
    stop(r1);
    until_holds(&url, "config", "readers", 0);
    let o = run(&["config", "--write"]);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::remove_dir_all(dir).unwrap();
}

/// One name, one lock: `exec db -- CMD` and `exec db --shared -- CMD` (and
/// `--write`, `--permits`) started together in separate processes never
/// run at the same time — each command appends "start <kind>" and "end
/// <kind>" around a pause, and the log never shows two kinds inside at
/// once — and every one of them runs; `status db --json` names the kind
/// that holds it.
#[test]
fn exec_of_every_kind_of_one_name_never_overlaps() {
    let (dir, url) = db_url("one-name");
    let log = dir.join("log");
    let kinds: [&[&str]; 5] = [&[], &["--shared"], &["--permits", "2"], &["--write"], &["--shared"]];
    let children: Vec<_> = kinds
        .iter()
        .enumerate()
        .map(|(i, kind)| {
            let script = format!("echo start {i} >> {0}; sleep 0.3; echo end {i} >> {0}", log.display());
            let mut args = vec!["exec", "db", "--wait", "120s"];
            args.extend_from_slice(kind);
            args.extend_from_slice(&["--", "sh", "-c", &script]);
            lockkit(&url, &args).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * kinds.len(), "every command ran: {lines:?}");
    // Inside at once: only commands of one kind, and of a kind that shares.
    let mut inside: Vec<usize> = Vec::new();
    for line in &lines {
        let (what, i) = line.split_once(' ').unwrap();
        let i: usize = i.parse().unwrap();
        if what == "start" {
            for &j in &inside {
                let both_read = kinds[i] == ["--shared"] && kinds[j] == ["--shared"];
                let both_permits = kinds[i] == ["--permits", "2"] && kinds[j] == ["--permits", "2"];
                assert!(
                    both_read || both_permits,
                    "{:?} ran beside {:?}: {lines:?}",
                    kinds[i],
                    kinds[j]
                );
            }
            inside.push(i);
        } else {
            inside.retain(|&j| j != i);
        }
    }
    let held = lockkit(&url, &["exec", "db", "--", "sleep", "60"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = lockkit(&url, &["status", "db", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        if v["held"] == true {
            assert_eq!(v["kind"], "mutex", "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "db not held within 30 s: {v}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let o = lockkit(&url, &["exec", "db", "--shared", "--no-wait", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(75), "a reader beside the lock: {}", stderr(&o));
    stop(held);
    std::fs::remove_dir_all(dir).unwrap();
}

/// `exec --at-most/--at-least`, ShedLock's job lock from the shell: fired
/// on five processes at once the command runs once (the others exit 75),
/// a run that ends early keeps the name blocked for `--at-least` (a later
/// fire exits 75 too), and a command still running at `--at-most` is
/// stopped (exit 76).
#[test]
fn exec_as_a_scheduled_job() {
    let (dir, url) = db_url("job");
    let log = dir.join("runs");
    let script = format!("echo ran >> {}", log.display());
    let fire = |name: &str| {
        lockkit(
            &url,
            &[
                "exec",
                name,
                "--at-most",
                "5m",
                "--at-least",
                "2m",
                "--",
                "sh",
                "-c",
                &script,
            ],
        )
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn lockkit exec")
    };
    let fired: Vec<_> = (0..5).map(|_| fire("nightly")).collect();
    let codes: Vec<Option<i32>> = fired
        .into_iter()
        .map(|c| c.wait_with_output().expect("wait").status.code())
        .collect();
    let mut sorted = codes.clone();
    sorted.sort();
    assert_eq!(sorted, [Some(0), Some(75), Some(75), Some(75), Some(75)], "{codes:?}");
    let late = fire("nightly").wait_with_output().expect("wait");
    assert_eq!(
        late.status.code(),
        Some(75),
        "fired again within --at-least: {}",
        stderr(&late)
    );
    let runs = std::fs::read_to_string(&log).expect("the job's log");
    assert_eq!(runs.lines().count(), 1, "the job ran once: {runs:?}");

    let started = Instant::now();
    let stopped = lockkit(
        &url,
        &["exec", "hung", "--at-most", "1s", "--grace", "1s", "--", "sleep", "60"],
    )
    .output()
    .expect("run lockkit exec");
    assert_eq!(stopped.status.code(), Some(76), "{}", stderr(&stopped));
    assert!(
        started.elapsed() < Duration::from_secs(50),
        "stopped at --at-most, not at the command's end"
    );

    let bad = lockkit(&url, &["exec", "x", "--at-least", "1s", "--", "true"])
        .output()
        .expect("run");
    assert_eq!(
        bad.status.code(),
        Some(2),
        "--at-least needs --at-most: {}",
        stderr(&bad)
    );
    let _ = std::fs::remove_dir_all(dir);
}
