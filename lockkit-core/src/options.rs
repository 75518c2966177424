//! Per-lock options and their defaults.

use std::time::Duration;

use crate::{LockError, name::validate_owner};

/// Default lease length for TTL backends: 30 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Default wait bound of [`LockClient::lock`](crate::LockClient::lock): 30 s.
///
/// Waiting forever is opt-in ([`LockOptions::wait_forever`]): a lock that is
/// never released should surface as a [`LockError::WaitTimeout`], not a hang.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

/// The shortest lease a lock may ask for.
pub const MIN_TTL: Duration = Duration::from_millis(1);

/// The longest lease a lock may ask for: 7 days. Longer leases are almost
/// always a unit mistake, and make a crashed holder block a name for too long.
pub const MAX_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest finite wait: 7 days. Use [`LockOptions::wait_forever`] to wait
/// without a bound.
pub const MAX_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// How one lock is acquired and held.
///
/// ```
/// use std::time::Duration;
/// use lockkit_core::LockOptions;
///
/// let opts = LockOptions::new()
///     .ttl(Duration::from_secs(10))
///     .wait(Duration::from_secs(2))
///     .auto_extend(false);
/// assert_eq!(opts.ttl_value(), Duration::from_secs(10));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    wait: Option<Duration>,
    auto_extend: bool,
    owner: Option<String>,
    fair: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            wait: Some(DEFAULT_WAIT),
            auto_extend: true,
            owner: None,
            fair: true,
        }
    }
}

impl LockOptions {
    /// The defaults: ttl 30 s, wait 30 s, auto-extend on, the client's owner,
    /// fair.
    pub fn new() -> Self {
        Self::default()
    }

    /// The lease length on TTL backends (Redis, SQL, memory). Rounded up to
    /// whole milliseconds. ZooKeeper leases are the session and ignore it.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// The longest [`LockClient::lock`](crate::LockClient::lock) waits before
    /// failing with [`LockError::WaitTimeout`]. Zero means: try once.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Wait without a bound.
    pub fn wait_forever(mut self) -> Self {
        self.wait = None;
        self
    }

    /// Whether the client's watchdog extends the lease every ttl/3 while the
    /// guard lives (default: on). Off, the lease ends after `ttl` and the
    /// guard's lost signal fires then.
    pub fn auto_extend(mut self, on: bool) -> Self {
        self.auto_extend = on;
        self
    }

    /// Hold the lock as this owner instead of the client's. Owners that are
    /// equal share one hold (reentrancy), also across processes.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }

    /// Whether waiters are served in the order they began waiting (default:
    /// on; the contract's fair by default). Fair, a free name goes to the first waiter in
    /// line — a client that just released it, or a `try_lock`, does not
    /// take it ahead of those already queued; re-entry by the holder stays
    /// immediate. Off (`fair=false` in a URL), whoever asks first after a
    /// release takes the name ("barging"): more hand-offs per second to the
    /// client that is already running, and no bound on how long another
    /// waits. A fair and an unfair waiter of one name: the unfair one may
    /// overtake the queue, never the other way round.
    pub fn fair(mut self, on: bool) -> Self {
        self.fair = on;
        self
    }

    /// The lease length.
    pub fn ttl_value(&self) -> Duration {
        self.ttl
    }

    /// The wait bound; `None` waits forever.
    pub fn wait_value(&self) -> Option<Duration> {
        self.wait
    }

    /// Whether the lease is extended automatically.
    pub fn auto_extend_value(&self) -> bool {
        self.auto_extend
    }

    /// The owner override, if any.
    pub fn owner_value(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// Whether waiters are served in order.
    pub fn fair_value(&self) -> bool {
        self.fair
    }

    /// Checks the options: ttl within [`MIN_TTL`]..=[`MAX_TTL`], wait at most
    /// [`MAX_WAIT`], a valid owner.
    pub fn validate(&self) -> Result<(), LockError> {
        if self.ttl < MIN_TTL || self.ttl > MAX_TTL {
            return Err(LockError::config(
                "ttl",
                format!(
                    "must be between {} and {}, got {}",
                    humantime::format_duration(MIN_TTL),
                    humantime::format_duration(MAX_TTL),
                    humantime::format_duration(self.ttl)
                ),
            ));
        }
        if let Some(wait) = self.wait
            && wait > MAX_WAIT
        {
            return Err(LockError::config(
                "wait",
                format!(
                    "must be at most {} (or wait forever), got {}",
                    humantime::format_duration(MAX_WAIT),
                    humantime::format_duration(wait)
                ),
            ));
        }
        if let Some(owner) = &self.owner {
            validate_owner(owner)?;
        }
        Ok(())
    }
}

/// A duration in whole milliseconds, rounded up (so a lease is never shorter
/// than asked for).
pub fn ttl_millis(d: Duration) -> u64 {
    let ms = d.as_millis();
    let ms = if d > Duration::from_millis(ms as u64) {
        ms + 1
    } else {
        ms
    };
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_validation() {
        let o = LockOptions::new();
        assert_eq!(o.ttl_value(), DEFAULT_TTL);
        assert_eq!(o.wait_value(), Some(DEFAULT_WAIT));
        assert!(o.auto_extend_value());
        assert!(o.fair_value());
        assert!(!LockOptions::new().fair(false).fair_value());
        assert!(o.validate().is_ok());
        let zero = LockOptions::new().ttl(Duration::ZERO).validate();
        assert!(matches!(zero, Err(LockError::InvalidConfig { ref part, .. }) if part == "ttl"));
        let absurd = LockOptions::new().ttl(Duration::from_secs(365 * 86400)).validate();
        assert!(matches!(absurd, Err(LockError::InvalidConfig { .. })));
        let wait = LockOptions::new().wait(Duration::MAX).validate();
        assert!(matches!(wait, Err(LockError::InvalidConfig { ref part, .. }) if part == "wait"));
        assert!(LockOptions::new().wait_forever().validate().is_ok());
        assert!(LockOptions::new().owner("").validate().is_err());
    }

    #[test]
    fn millis_round_up() {
        assert_eq!(ttl_millis(Duration::from_micros(1)), 1);
        assert_eq!(ttl_millis(Duration::from_millis(30)), 30);
        assert_eq!(ttl_millis(Duration::from_micros(30_001)), 31);
    }
}
