//! Metrics, through the [`metrics`](https://docs.rs/metrics) facade: install
//! any recorder (Prometheus, StatsD, …) and these appear, labelled by
//! `backend` (`memory`, `redis`, `mysql`, …). Without a recorder they cost
//! next to nothing.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `lockkit_acquisitions_total` | counter | backend | locks acquired (first holds and re-entries) |
//! | `lockkit_acquire_wait_seconds` | histogram | backend | how long successful acquisitions waited |
//! | `lockkit_contention_total` | counter | backend, outcome (`busy`, `timeout`) | acquisitions refused because another owner held the name |
//! | `lockkit_acquire_errors_total` | counter | backend | acquisitions that failed with an error |
//! | `lockkit_hold_seconds` | histogram | backend | how long guards were held, acquisition to release |
//! | `lockkit_extensions_total` | counter | backend | lease extensions (watchdog and explicit) |
//! | `lockkit_extension_failures_total` | counter | backend | extensions that failed with an error (retried) |
//! | `lockkit_losses_total` | counter | backend, reason (`expired`, `not_held`, `session`) | lost signals fired |

use std::time::Duration;

use crate::error::LostReason;

/// Counter: locks acquired.
pub const ACQUISITIONS: &str = "lockkit_acquisitions_total";
/// Histogram (seconds): wait of successful acquisitions.
pub const ACQUIRE_WAIT: &str = "lockkit_acquire_wait_seconds";
/// Counter: acquisitions refused (`outcome` = `busy` or `timeout`).
pub const CONTENTION: &str = "lockkit_contention_total";
/// Counter: acquisitions that failed with an error.
pub const ACQUIRE_ERRORS: &str = "lockkit_acquire_errors_total";
/// Histogram (seconds): hold time of guards.
pub const HOLD: &str = "lockkit_hold_seconds";
/// Counter: lease extensions.
pub const EXTENSIONS: &str = "lockkit_extensions_total";
/// Counter: failed lease extensions.
pub const EXTENSION_FAILURES: &str = "lockkit_extension_failures_total";
/// Counter: lost signals (`reason` = `expired`, `not_held`, `session`).
pub const LOSSES: &str = "lockkit_losses_total";

pub(crate) fn acquired(backend: &'static str, waited: Duration) {
    metrics::counter!(ACQUISITIONS, "backend" => backend).increment(1);
    metrics::histogram!(ACQUIRE_WAIT, "backend" => backend).record(waited.as_secs_f64());
}

pub(crate) fn refused(backend: &'static str, timed_out: bool) {
    let outcome = if timed_out { "timeout" } else { "busy" };
    metrics::counter!(CONTENTION, "backend" => backend, "outcome" => outcome).increment(1);
}

pub(crate) fn acquire_failed(backend: &'static str) {
    metrics::counter!(ACQUIRE_ERRORS, "backend" => backend).increment(1);
}

pub(crate) fn held(backend: &'static str, held_for: Duration) {
    metrics::histogram!(HOLD, "backend" => backend).record(held_for.as_secs_f64());
}

pub(crate) fn extended(backend: &'static str, count: u64) {
    if count > 0 {
        metrics::counter!(EXTENSIONS, "backend" => backend).increment(count);
    }
}

pub(crate) fn extension_failed(backend: &'static str) {
    metrics::counter!(EXTENSION_FAILURES, "backend" => backend).increment(1);
}

pub(crate) fn lost(backend: &'static str, reason: LostReason) {
    let reason = match reason {
        LostReason::Expired => "expired",
        LostReason::NotHeld => "not_held",
        LostReason::Session => "session",
    };
    metrics::counter!(LOSSES, "backend" => backend, "reason" => reason).increment(1);
}
