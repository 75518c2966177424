//! Watching a server's wall clock against this process's monotonic clock,
//! to tell when it was stepped.
//!
//! A server that stores leases as absolute times of its own clock (Redis
//! key expiries, lease ends in a sorted set, a SQL `expires_at`) ends every
//! lease early by as much as its clock is stepped forward: a hold whose
//! holder still counts on it is gone, and a second owner can be granted.
//! The server cannot tell (it has no other clock to compare with); a client
//! can, because it keeps a monotonic clock and talks to the server often.
//!
//! Each reading of the server's clock is taken by a request sent at `sent`
//! and answered at `received` (this process's monotonic clock), so the
//! server read its clock between the two. Between two readings the server's
//! clock can have moved by at most the time from the first's `sent` to the
//! second's `received` (plus rate drift): anything beyond that is a step
//! forward; less than the time from the first's `received` to the second's
//! `sent` is a step back. Neither bound depends on how long either request
//! took, on pauses of this process, or on the order the answers came in, so
//! a step is never seen where there was none.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The rate difference allowed between the server's clock and this
/// process's: 0.1 %, twice the most NTP ever slews a clock (500 ppm).
const RATE_TOLERANCE: f64 = 1e-3;

/// Steps up to this long are not reported: the clock's resolution (the
/// readings are in ms) and the slack a step this small leaves in any lease
/// (every lease is shortened locally by its drift allowance, at least 2 ms).
const STEP_TOLERANCE: Duration = Duration::from_millis(2);

/// A step of a server's clock since the previous reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockStep {
    /// Forward by at least this much: the server's leases ended that much
    /// earlier than their holders count on.
    Forward(Duration),
    /// Back by at least this much: the server's leases last that much
    /// longer (a crashed holder's name stays taken longer; no hold is cut
    /// short).
    Back(Duration),
}

/// One server's clock as this process last read it.
#[derive(Debug, Default)]
pub struct ServerClock {
    last: Mutex<Option<Reading>>,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    sent: Instant,
    received: Instant,
    server_ms: i64,
}

impl ServerClock {
    /// A clock not read yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a reading of the server's clock, `server_ms` (ms since the
    /// Unix epoch), taken by a request sent at `sent` and answered at
    /// `received`: the step since the previous reading, if there was one.
    pub fn observe(&self, sent: Instant, received: Instant, server_ms: i64) -> Option<ClockStep> {
        let now = Reading {
            sent,
            received: received.max(sent),
            server_ms,
        };
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let step = last.and_then(|prev| step_between(&prev, &now));
        // The later reading is the better reference: the drift allowed
        // grows with the time between readings.
        if last.is_none_or(|prev| now.sent >= prev.sent) {
            *last = Some(now);
        }
        step
    }

    /// Forgets the last reading: the next one is of another server (a new
    /// master after a failover), whose clock is not this one's.
    pub fn forget(&self) {
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// The step between readings `a` and `b`, if beyond the tolerances.
fn step_between(a: &Reading, b: &Reading) -> Option<ClockStep> {
    let ms = |d: f64| d * 1000.0;
    let span = |from: Instant, to: Instant| -> f64 {
        if to >= from {
            ms(to.duration_since(from).as_secs_f64())
        } else {
            -ms(from.duration_since(to).as_secs_f64())
        }
    };
    let moved = (b.server_ms - a.server_ms) as f64;
    let tolerance = ms(STEP_TOLERANCE.as_secs_f64());
    // The server read its clock at a real time in [sent, received] of each.
    let most = span(a.sent, b.received);
    let least = span(a.received, b.sent);
    let ahead = moved - most - most.abs() * RATE_TOLERANCE;
    let behind = least - least.abs() * RATE_TOLERANCE - moved;
    let millis = |v: f64| Duration::from_millis(v as u64);
    if ahead > tolerance {
        Some(ClockStep::Forward(millis(ahead)))
    } else if behind > tolerance {
        Some(ClockStep::Back(millis(behind)))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(base: Instant, ms: u64) -> Instant {
        base + Duration::from_millis(ms)
    }

    #[test]
    fn a_clock_that_keeps_time_shows_no_step() {
        let (c, t0) = (ServerClock::new(), Instant::now());
        assert_eq!(c.observe(at(t0, 0), at(t0, 2), 1_000_001), None);
        // Read 10 s later, with a long answer the second time.
        assert_eq!(c.observe(at(t0, 10_000), at(t0, 10_500), 1_010_300), None);
        // Answers that came in out of order.
        assert_eq!(c.observe(at(t0, 10_100), at(t0, 10_200), 1_010_150), None);
    }

    #[test]
    fn a_forward_step_is_measured_from_the_widest_window() {
        let (c, t0) = (ServerClock::new(), Instant::now());
        c.observe(at(t0, 0), at(t0, 1), 1_000_000);
        // 5 s passed here, 35 s there: at least 30 s - 1 ms - the drift.
        match c.observe(at(t0, 5_000), at(t0, 5_001), 1_035_001) {
            Some(ClockStep::Forward(d)) => {
                assert!(
                    d >= Duration::from_millis(29_990) && d <= Duration::from_secs(30),
                    "{d:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        // Reported once: the next reading is measured from the stepped one.
        assert_eq!(c.observe(at(t0, 6_000), at(t0, 6_001), 1_036_001), None);
    }

    #[test]
    fn a_backward_step_is_told_apart() {
        let (c, t0) = (ServerClock::new(), Instant::now());
        c.observe(at(t0, 0), at(t0, 1), 1_000_000);
        assert!(matches!(
            c.observe(at(t0, 5_000), at(t0, 5_001), 990_000),
            Some(ClockStep::Back(d)) if d >= Duration::from_secs(14)
        ));
    }

    #[test]
    fn slow_drift_within_the_rate_tolerance_is_no_step() {
        let (c, t0) = (ServerClock::new(), Instant::now());
        c.observe(at(t0, 0), at(t0, 0), 0);
        // 0.05 % fast over an hour.
        assert_eq!(c.observe(at(t0, 3_600_000), at(t0, 3_600_000), 3_601_800), None);
    }

    #[test]
    fn forgetting_starts_over() {
        let (c, t0) = (ServerClock::new(), Instant::now());
        c.observe(at(t0, 0), at(t0, 1), 1_000_000);
        c.forget();
        assert_eq!(c.observe(at(t0, 10), at(t0, 11), 5_000_000), None);
    }
}
