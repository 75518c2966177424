//! Looking at the private servers while the load runs: `redis-cli` off the
//! load's worker threads, and waiting for a state with a generous bound.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A bound no healthy failover or resynchronisation comes near (they take
/// seconds), kept generous for a loaded machine.
pub const BOUND: Duration = Duration::from_secs(90);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(50);

/// One `redis-cli` command against `127.0.0.1:port`; its output, empty when
/// the server does not answer.
pub fn cli(port: u16, args: &[&str]) -> String {
    tokio::task::block_in_place(|| {
        Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &port.to_string()])
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    })
}

/// Whether `INFO replication` on `port` has `field:value`.
pub fn replication_has(port: u16, field: &str) -> bool {
    cli(port, &["INFO", "replication"]).lines().any(|l| l.trim() == field)
}

/// Retries `f` until it gives a value, for at most [`BOUND`].
pub async fn within<T, F>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Option<T>,
{
    let deadline = Instant::now() + BOUND;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {BOUND:?} waiting for: {what}"
        );
        tokio::time::sleep(POLL).await;
    }
}
