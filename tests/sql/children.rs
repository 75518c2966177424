//! Child processes of the SQL tests: this test binary started again for
//! one test function (the child's entry), driven by environment variables,
//! and killed if the test fails before it ends.

#![cfg(any(feature = "sqlite", feature = "mysql", feature = "postgres"))]

use std::process::{Child, Command, Stdio};

/// Starts this test binary for the test `entry` of the module whose
/// `module_path!()` is `module`, with `env` set.
pub fn spawn(module: &str, entry: &str, env: &[(&str, &str)], stdout: Stdio) -> Reaper {
    let mut command = Command::new(std::env::current_exe().expect("test binary"));
    command
        .args([
            &crate::common::test_name(module, entry),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(stdout)
        .stderr(Stdio::inherit());
    for (k, v) in env {
        command.env(k, v);
    }
    Reaper(command.spawn().expect("spawn child"))
}

/// Kills the child if the test fails before it does.
pub struct Reaper(pub Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
