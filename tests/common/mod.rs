//! Helpers shared by the test binaries, each of which includes them with
//! `mod common;` and uses what it needs: the libtest name of a test (for the
//! tests that run their own binary again as a child process) and, with the
//! `redis` feature, private `redis-server` processes.
#![allow(dead_code)]

#[cfg(feature = "redis")]
pub mod redis;

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
