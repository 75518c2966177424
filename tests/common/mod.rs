//! Helpers shared by the test binaries, each of which includes them with
//! `#[path = "../common/mod.rs"] mod common;` and uses what it needs: unique
//! lock names, URL parameters, the libtest name of a test (for the tests that
//! run their own binary again as a child process) and, with the `redis`
//! feature, private `redis-server` processes, and worker processes on one
//! lock (`child`, with `redis` or `zookeeper`).
#![allow(dead_code)]

#[cfg(any(feature = "redis", feature = "zookeeper"))]
pub mod child;
#[cfg(feature = "redis")]
pub mod redis;

/// 128 random bits as 32 lowercase hex digits: a suffix no other test or run
/// uses (for lock names, table names, run ids).
pub fn tag() -> String {
    lockkit_core::raw::random_owner()
}

/// A lock name no other test or run uses: `lockkit-test/CASE/TAG`.
pub fn unique(case: &str) -> String {
    format!("lockkit-test/{case}/{}", tag())
}

/// `url` with the query parameters `params` (`a=1&b=2`) added.
pub fn with_params(url: &str, params: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{params}")
}

/// The name libtest knows the test function `test` by, when it is defined in
/// the module whose `module_path!()` is `module_path`: the path without the
/// crate (the binary) name, e.g. `processes::child_process`. A test that
/// starts this binary again for one test passes it with `--exact`.
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, path)) => format!("{path}::{test}"),
        None => test.to_owned(),
    }
}

/// This test binary run again for the one test `test` of the module whose
/// `module_path!()` is `module_path` (its output shown, one thread): the
/// child process of a test that needs several processes. Child entries are
/// `#[ignore]`d, so a test run does not count them; the child runs its one
/// entry with `--ignored`. The caller adds
/// the environment that tells the child what to do, and spawns it (or
/// lets [`spawn_child`] do both).
pub fn child_command(module_path: &str, test: &str) -> std::process::Command {
    let mut command = std::process::Command::new(std::env::current_exe().expect("test binary"));
    command.args([
        &test_name(module_path, test),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command
}

/// Starts [`child_command`] with `env` set and `stdout` as its standard
/// output (its errors shown), killed again if the test ends first.
pub fn spawn_child(module_path: &str, test: &str, env: &[(&str, &str)], stdout: std::process::Stdio) -> Reaper {
    let mut command = child_command(module_path, test);
    command.stdout(stdout).stderr(std::process::Stdio::inherit());
    for (k, v) in env {
        command.env(k, v);
    }
    Reaper(command.spawn().expect("spawn child"))
}

/// Kills the child if the test fails before it does.
pub struct Reaper(pub std::process::Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What a step forward of the server's clock past holder A's lease gives
/// `b_try`, another owner's `try_lock` after it, on a backend that does not
/// guard against it: the name at once, with a larger token, while A has not
/// been told; A's lost signal fires at its next extension (within 30 s),
/// which finds B's hold.
pub async fn assert_a_second_owner_after_a_step(
    ga: &lockkit::LockGuard,
    b_try: Result<Option<lockkit::LockGuard>, lockkit::LockError>,
) {
    let gb = b_try
        .expect("B's try")
        .expect("the step ended A's lease: B is granted the name at once");
    assert!(!ga.is_lost(), "A has not been told: its own lease stands");
    assert!(
        gb.fencing_token() > ga.fencing_token(),
        "the second owner's token is larger"
    );
    tokio::time::timeout(std::time::Duration::from_secs(30), ga.lost())
        .await
        .expect("A's lost signal at its next extension");
    gb.unlock().await.expect("B unlocks");
}

/// What a step back of 30 s of the server's clock does to A's hold `ga`
/// of `name` (a 4 s lease, not extended), as `a` inspects it: the server
/// keeps it for more than 30 s, while the holder's own deadline, measured
/// by its monotonic clock, does not move. Unlocks it.
pub async fn assert_a_longer_lease_after_a_step_back(a: &lockkit::LockClient, name: &str, ga: lockkit::LockGuard) {
    use std::time::{Duration, Instant};
    let info = a.inspect(name).await.expect("inspect").expect("held");
    let left = info.remaining.expect("a ttl lease");
    assert!(
        left > Duration::from_secs(30),
        "the server's lease outlasts the 4 s asked by the step: {left:?}"
    );
    let until = ga.valid_until().expect("a ttl lease");
    assert!(until <= Instant::now() + Duration::from_secs(4), "{until:?}");
    ga.unlock().await.expect("A unlocks");
}

/// Sets the clock shift a server preloading `scripts/clock_shift.c` reads
/// from `file` to `ms` (a new file renamed over the old one: the server
/// never reads half a number).
pub fn write_clock_shift(file: &std::path::Path, ms: i64) {
    let tmp = file.with_extension("new");
    std::fs::write(&tmp, ms.to_string()).expect("write the shift");
    std::fs::rename(&tmp, file).expect("set the shift");
}
