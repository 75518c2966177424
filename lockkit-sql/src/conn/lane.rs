//! Which of a pool's connections a statement may take: the client's own
//! operations leave a few of them to lease renewals.
//!
//! A client's acquisitions can hold every pooled connection at once — a
//! crowd of its tasks trying in turn, or claims that wait in the server for
//! a row another session has locked. A renewal queued behind them for
//! longer than the rest of its lease loses the hold although client and
//! server are well: the watchdog's extensions waited for a connection until
//! `connect_timeout`, and the leases ran out first. So the operations take
//! at most all but [`reserved_for_renewals`] connections at once, and
//! renewals — which never wait for anything in the server but their own
//! row's lock, held briefly — may take any.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many connections of a pool of `max` the client's operations leave
/// to renewals: two of ten or more, one of two to nine, none of one (a
/// pool of one connection has nothing to spare: there renewals and
/// operations queue together).
pub(crate) fn reserved_for_renewals(max: u32) -> u32 {
    match max {
        0 | 1 => 0,
        2..=9 => 1,
        _ => 2,
    }
}

/// The way a handle's statements take connections (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum Lane {
    /// The client's operations: admitted by `gate` (`None`: a pool with
    /// nothing reserved), within `timeout` like the pool's own wait.
    Ops {
        gate: Option<Arc<Semaphore>>,
        timeout: Duration,
    },
    /// Lease renewals: any connection.
    Renewals,
}

/// A statement's admission to the pool; the connection it leaves for
/// renewals is free again when this is dropped.
pub(crate) type Admitted = Option<OwnedSemaphorePermit>;

impl Lane {
    /// The operations' lane of a pool of `max` connections, waiting up to
    /// `timeout` to be admitted.
    pub fn ops(max: u32, timeout: Duration) -> Self {
        let reserved = reserved_for_renewals(max);
        Lane::Ops {
            gate: (reserved > 0).then(|| Arc::new(Semaphore::new((max - reserved) as usize))),
            timeout,
        }
    }

    /// Waits for this lane's turn at the pool: a pool timeout when it does
    /// not come within the lane's timeout.
    pub async fn admit(&self) -> Result<Admitted, sqlx::Error> {
        match self {
            Lane::Ops {
                gate: Some(gate),
                timeout,
            } => match tokio::time::timeout(*timeout, gate.clone().acquire_owned()).await {
                Ok(Ok(permit)) => Ok(Some(permit)),
                // The semaphore is never closed; a timeout is the pool's.
                _ => Err(sqlx::Error::PoolTimedOut),
            },
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserves_a_few_connections_of_pools_that_have_them() {
        assert_eq!(reserved_for_renewals(1), 0);
        assert_eq!(reserved_for_renewals(2), 1);
        assert_eq!(reserved_for_renewals(4), 1);
        assert_eq!(reserved_for_renewals(10), 2);
        assert_eq!(reserved_for_renewals(100), 2);
    }

    #[tokio::test]
    async fn operations_leave_the_reserve_to_renewals() {
        let ops = Lane::ops(3, Duration::from_millis(20));
        let first = ops.admit().await.unwrap();
        let second = ops.admit().await.unwrap();
        assert!(first.is_some() && second.is_some());
        assert!(
            matches!(ops.admit().await, Err(sqlx::Error::PoolTimedOut)),
            "a third operation waits: one of three connections is the renewals'"
        );
        assert!(Lane::Renewals.admit().await.unwrap().is_none(), "renewals pass at once");
        drop(first);
        assert!(ops.admit().await.unwrap().is_some());
        assert!(Lane::ops(1, Duration::ZERO).admit().await.unwrap().is_none());
    }
}
