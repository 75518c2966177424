//! The pub/sub connections of the waiters: one per backend (per node for
//! Redlock), of the kind the backend's connections are.

use std::sync::{Arc, Mutex};

use redis::RedisResult;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;

/// One pub/sub connection.
#[derive(Clone)]
pub(crate) enum PubSubConn {
    /// A RESP3 connection manager: reconnects and resubscribes by itself.
    Manager(ConnectionManager),
    /// A cluster connection: sharded channels (`SSUBSCRIBE`), followed
    /// across resharding by the client.
    Cluster(ClusterConnection),
    /// Sentinel mode: the manager of the current master, replaced on
    /// failover.
    Swappable(Arc<Mutex<ConnectionManager>>),
}

impl PubSubConn {
    fn manager(m: &Arc<Mutex<ConnectionManager>>) -> ConnectionManager {
        m.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) async fn subscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().subscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().ssubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).subscribe(channels).await,
        }
    }

    pub(super) async fn unsubscribe(&self, channels: &[Vec<u8>]) -> RedisResult<()> {
        match self {
            PubSubConn::Manager(m) => m.clone().unsubscribe(channels).await,
            PubSubConn::Cluster(c) => c.clone().sunsubscribe(channels).await,
            PubSubConn::Swappable(m) => Self::manager(m).unsubscribe(channels).await,
        }
    }

    pub(super) async fn ping(&self) -> RedisResult<()> {
        let ping = redis::cmd("PING");
        match self {
            PubSubConn::Manager(m) => ping.query_async(&mut m.clone()).await,
            PubSubConn::Cluster(c) => ping.query_async(&mut c.clone()).await,
            PubSubConn::Swappable(m) => ping.query_async(&mut Self::manager(m)).await,
        }
    }
}
