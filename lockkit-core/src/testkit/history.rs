//! Recorded holds and the check that they never overlapped.

use std::time::Instant;

/// One hold as its holder saw it: acquired (after `lock` returned) and
/// released (before `unlock` was called).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Which worker held it.
    pub worker: usize,
    /// Its fencing token.
    pub token: u64,
    /// When `lock` returned.
    pub acquired: Instant,
    /// When the worker stopped using it.
    pub released: Instant,
}

/// Checks a history of holds of one name: in grant order, no hold starts
/// before the previous one ended, and tokens strictly increase.
pub fn check_history(grants: &mut [Grant]) -> Result<(), String> {
    grants.sort_by_key(|g| (g.acquired, g.token));
    for pair in grants.windows(2) {
        let (prev, next) = (&pair[0], &pair[1]);
        if next.acquired < prev.released {
            return Err(format!(
                "overlapping holds: worker {} (token {}) acquired {:?} before worker {} (token {}) released",
                next.worker,
                next.token,
                prev.released - next.acquired,
                prev.worker,
                prev.token
            ));
        }
        if next.token <= prev.token {
            return Err(format!(
                "tokens not increasing: token {} (worker {}) granted after token {} (worker {})",
                next.token, next.worker, prev.token, prev.worker
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn detects_overlap_and_token_order() {
        let t = Instant::now();
        let g = |worker, token, a: u64, r: u64| Grant {
            worker,
            token,
            acquired: t + Duration::from_millis(a),
            released: t + Duration::from_millis(r),
        };
        assert!(check_history(&mut [g(0, 1, 0, 10), g(1, 2, 10, 20)]).is_ok());
        assert!(
            check_history(&mut [g(0, 1, 0, 10), g(1, 2, 5, 20)])
                .unwrap_err()
                .contains("overlapping")
        );
        assert!(
            check_history(&mut [g(0, 3, 0, 10), g(1, 2, 11, 20)])
                .unwrap_err()
                .contains("tokens")
        );
    }
}
