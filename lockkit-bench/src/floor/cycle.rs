//! The trait every floor implements: one raw cycle, a ping, the server's
//! command count.

use async_trait::async_trait;

use crate::error::BenchError;

/// One raw acquire + release cycle of a backend.
#[async_trait]
pub trait Floor: Send + Sync {
    /// One cycle on `name`: take it (it is free) and give it back.
    async fn cycle(&self, name: &str) -> Result<(), BenchError>;
    /// The cheapest request the server answers (one round trip), for scale.
    async fn ping(&self) -> Result<(), BenchError>;
    /// Commands the server has executed so far, where it counts them (Redis
    /// `INFO commandstats`), to measure server work per renewal period.
    async fn server_commands(&self) -> Result<Option<u64>, BenchError> {
        Ok(None)
    }
}
