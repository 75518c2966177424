//! What the workloads drive a lock library through: a connected client
//! ([`Locker`]) and a held lock ([`Held`]); the lease and the retry loop
//! the peers share.

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::BenchError;

/// The lease every peer is given: the ttl lockkit runs with in the
/// workloads (a peer's default, e.g. distributed-lock-redis's 30 s, would
/// make a stall longer, not a cycle cheaper).
#[cfg(feature = "peers")]
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// A lock held through a [`Locker`]; `release` gives it back.
#[async_trait]
pub trait Held: Send {
    /// Releases the lock (waits for the library's release to return).
    async fn release(self: Box<Self>) -> Result<(), BenchError>;
}

/// One connected client of a lock library (lockkit or a peer): the
/// contenders of w2 and the cycles of w1 go through this.
#[async_trait]
pub trait Locker: Send + Sync {
    /// Acquires `name`, waiting while another client holds it.
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError>;
}

/// Retries `attempt` until it returns a hold, pausing `first` after the first
/// miss and doubling the pause up to `most`: the loop a library whose
/// acquire returns at once when busy runs in its own waiting kinds.
#[cfg_attr(not(all(feature = "peers", feature = "redis")), allow(dead_code))]
pub async fn retry_with_backoff<F, Fut>(
    first: Duration,
    most: Duration,
    mut attempt: F,
) -> Result<Box<dyn Held>, BenchError>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Option<Box<dyn Held>>, BenchError>> + Send,
{
    let mut pause = first;
    loop {
        if let Some(held) = attempt().await? {
            return Ok(held);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(most);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    struct Nothing;

    #[async_trait]
    impl Held for Nothing {
        async fn release(self: Box<Self>) -> Result<(), BenchError> {
            Ok(())
        }
    }

    #[tokio::test]
    async fn backoff_doubles_to_the_cap_until_a_hold() {
        let tries = Arc::new(AtomicU32::new(0));
        let started = std::time::Instant::now();
        let t = tries.clone();
        retry_with_backoff(Duration::from_millis(10), Duration::from_millis(40), move || {
            let t = t.clone();
            async move { Ok((t.fetch_add(1, Ordering::SeqCst) == 4).then(|| Box::new(Nothing) as Box<dyn Held>)) }
        })
        .await
        .unwrap();
        assert_eq!(tries.load(Ordering::SeqCst), 5);
        // Pauses 10 + 20 + 40 + 40 ms after the four misses.
        assert!(started.elapsed() >= Duration::from_millis(110));
        assert!(started.elapsed() < Duration::from_millis(1_000));
    }
}
