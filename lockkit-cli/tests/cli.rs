//! The real `lockkit` binary, on the in-process memory backend.

use std::process::{Command, Output};

fn lockkit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_lockkit"))
        .args(args)
        .env_remove("LOCKKIT_URL")
        .output()
        .expect("run lockkit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn exec_passes_the_exit_code_and_the_token() {
    let o = lockkit(&[
        "--url",
        "memory://",
        "exec",
        "job",
        "--",
        "sh",
        "-c",
        "echo token=$LOCKKIT_FENCING_TOKEN name=$LOCKKIT_LOCK_NAME; exit 7",
    ]);
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("token=1 name=job"), "{out}");
    let o = lockkit(&["--url", "memory://", "exec", "job", "--", "true"]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn a_lost_lock_stops_the_command() {
    // No auto-extend: the 300 ms lease runs out while the command sleeps.
    let o = lockkit(&[
        "--url",
        "memory://?ttl=300ms&auto_extend=false",
        "exec",
        "--grace",
        "5s",
        "short",
        "--",
        "sleep",
        "60",
    ]);
    assert_eq!(o.status.code(), Some(76), "{}", stderr(&o));
    assert!(stderr(&o).contains("was lost"), "{}", stderr(&o));
}

#[test]
fn errors_are_one_clear_line() {
    for (args, needle) in [
        (vec!["--url", "bogus://x", "status", "a"], "unknown scheme"),
        (
            vec!["--url", "memory://?ttl=zero", "status", "a"],
            "query parameter ttl",
        ),
        (vec!["--url", "memory://", "status", ""], "invalid lock name"),
        (
            vec!["--url", "memory://", "exec", "a", "--", "/nonexistent/cmd"],
            "cannot run",
        ),
    ] {
        let o = lockkit(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        let err = stderr(&o);
        assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(!err.contains("panicked") && !err.contains("backtrace"), "{err}");
    }
    let o = lockkit(&["--url", "memory://", "exec", "a", "--wait", "soon", "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "clap usage errors exit 2");
    assert!(stderr(&o).contains("not a duration"));
}

#[test]
fn release_needs_force() {
    let o = lockkit(&["--url", "memory://", "release", "stuck"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("without --force"), "{}", stderr(&o));
    let o = lockkit(&["--url", "memory://", "release", "stuck", "--force"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("was not held"));
    let o = lockkit(&["--url", "memory://", "list", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "a fresh in-process store holds nothing");
}

#[test]
fn status_reports_free_locks() {
    let o = lockkit(&["--url", "memory://", "status", "order:42", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], false);
    assert_eq!(v["name"], "order:42");
}

#[test]
fn demo_adds_up_with_the_lock_and_overspends_without() {
    let o = lockkit(&["--url", "memory://", "demo", "--workers", "4", "--budget", "5000"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("== budget 50.00"), "{out}");
    let o = lockkit(&[
        "--url",
        "memory://",
        "demo",
        "--workers",
        "4",
        "--budget",
        "5000",
        "--no-lock",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    // Four unguarded workers with a think time between read and write
    // overwrite each other: the takes exceed the budget.
    assert!(out.contains("OVERSPENT"), "{out}");
}

#[test]
fn the_config_file_names_the_backend() {
    let dir = std::env::temp_dir().join(format!("lockkit-cli-cfg-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("lockkit")).unwrap();
    let file = dir.join("lockkit").join("config.toml");
    std::fs::write(&file, "[lock]\nurl = \"memory://\"\nttl = \"5s\"\n").unwrap();
    let run = |args: &[&str], xdg: bool| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_lockkit"));
        cmd.args(args).env_remove("LOCKKIT_URL");
        if xdg {
            cmd.env("XDG_CONFIG_HOME", &dir);
        }
        cmd.output().unwrap()
    };
    let f = file.to_str().unwrap();
    let o = run(&["--config", f, "exec", "cfg", "--", "true"], false);
    assert!(o.status.success(), "{}", stderr(&o));
    // Found in $XDG_CONFIG_HOME without --config.
    let o = run(&["status", "cfg", "--json"], true);
    assert!(o.status.success(), "{}", stderr(&o));
    std::fs::write(&file, "[lock]\nurl = \"memory://\"\nttl = \"soon\"\n").unwrap();
    let o = run(&["--config", f, "status", "cfg"], false);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(err.contains("config.toml") && err.contains("not a duration"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}
