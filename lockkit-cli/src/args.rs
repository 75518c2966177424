//! Parsers for the commands' arguments.

use std::time::Duration;

/// A duration written like `30s`, `1m` or `1h 30m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{s:?} is not a duration like 30s or 1m: {e}"))
}
