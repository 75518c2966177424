//! `distributed-lock-redis`: Redlock on one or N Redis servers through
//! `fred`, as its README shows (`RedisLockProvider::builder().url(…)`,
//! `create_lock(name)`, `handle.release()`), with the lease every peer
//! gets ([`super::locker::TTL`]) as its expiry (its cadence and minimum validity
//! scaled with it, in the proportions of its defaults).
//!
//! Its `acquire(timeout)` tries once and fails when the name is busy, so
//! this peer calls `try_acquire` in the loop the crate's own semaphore and
//! write lock run: a 10 ms pause doubling to 200 ms.

use std::time::Duration;

use async_trait::async_trait;
use distributed_lock_core::traits::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_redis::{RedisLockHandle, RedisLockProvider};

use super::locker::{Held, Locker, TTL, retry_with_backoff};
use crate::error::BenchError;

/// A provider on every node of the URL, with its own connections.
pub struct DlockRedisPeer {
    provider: RedisLockProvider,
}

impl DlockRedisPeer {
    /// Connects to every node (`redis://host:port` each).
    pub async fn connect(nodes: &[String]) -> Result<Self, BenchError> {
        let provider = RedisLockProvider::builder()
            .urls(nodes)
            .expiry(TTL)
            // Its defaults' proportions (30 s, 10 s, 27 s): a minimum
            // validity above the expiry would refuse every acquisition.
            .extension_cadence(TTL / 3)
            .min_validity(TTL * 9 / 10)
            .build()
            .await?;
        Ok(DlockRedisPeer { provider })
    }
}

struct DlockRedisHeld(RedisLockHandle);

#[async_trait]
impl Held for DlockRedisHeld {
    async fn release(self: Box<Self>) -> Result<(), BenchError> {
        self.0.release().await?;
        Ok(())
    }
}

#[async_trait]
impl Locker for DlockRedisPeer {
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError> {
        let lock = self.provider.create_lock(name);
        retry_with_backoff(Duration::from_millis(10), Duration::from_millis(200), || async {
            Ok(lock
                .try_acquire()
                .await?
                .map(|h| Box::new(DlockRedisHeld(h)) as Box<dyn Held>))
        })
        .await
    }
}
