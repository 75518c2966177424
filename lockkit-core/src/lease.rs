//! Turning a server's remaining lease into a local validity deadline.

use std::time::{Duration, Instant};

/// How much a lease is shortened locally to allow for clock-rate drift between
/// this process and the server: 1 % of the lease plus 2 ms (the Redlock
/// paper's allowance).
pub fn drift_allowance(lease: Duration) -> Duration {
    lease / 100 + Duration::from_millis(2)
}

/// The instant until which a holder may trust a lease of `remaining` that the
/// server granted in answer to a request sent at `sent_at`.
///
/// Measuring from the moment the request was *sent* (not answered) and
/// subtracting [`drift_allowance`] makes the deadline fall no later than the
/// server's own expiry, so the lost signal fires before another owner can
/// acquire.
pub fn valid_until(sent_at: Instant, remaining: Duration) -> Instant {
    sent_at + remaining.saturating_sub(drift_allowance(remaining))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_is_before_server_expiry() {
        let t0 = Instant::now();
        let d = valid_until(t0, Duration::from_secs(30));
        assert!(d < t0 + Duration::from_secs(30));
        assert!(d > t0 + Duration::from_secs(29));
        assert_eq!(valid_until(t0, Duration::from_millis(1)), t0);
    }
}
