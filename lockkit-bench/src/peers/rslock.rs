//! `rslock`: Redlock on one or N Redis masters, as its README shows
//! (`LockManager::new(uris)`, `acquire(name, ttl)`, `guard.release()`).

use async_trait::async_trait;
use rslock::{LockGuard, LockManager};

use super::locker::{Held, Locker, TTL};
use crate::error::BenchError;

/// A lock manager over every node of the URL, with its own connections.
pub struct RslockPeer {
    manager: LockManager,
}

impl RslockPeer {
    /// A manager on `nodes` (`redis://host:port` each); connects on first use.
    pub async fn connect(nodes: &[String]) -> Result<Self, BenchError> {
        Ok(RslockPeer {
            manager: LockManager::new(nodes.to_vec()),
        })
    }
}

struct RslockHeld(LockGuard);

#[async_trait]
impl Held for RslockHeld {
    async fn release(self: Box<Self>) -> Result<(), BenchError> {
        self.0.release().await;
        Ok(())
    }
}

#[async_trait]
impl Locker for RslockPeer {
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError> {
        let guard = self.manager.acquire(name.as_bytes(), TTL).await?;
        Ok(Box::new(RslockHeld(guard)))
    }
}
