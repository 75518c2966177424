//! Inspection and listing: the lock keys on every primary, and the inspection of the names
//! found (shared with Redlock).

use futures_util::future::join_all;
use lockkit_core::raw::LockBackend;
use lockkit_core::{LockError, LockInfo};
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::backend::RedisBackend;
use crate::conn::{Conn, cluster_primaries};
use crate::error::Fault;
use crate::scripts;

impl RedisBackend {
    /// The held locks whose names start with `prefix`, at most `limit`.
    pub(crate) async fn list_held(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let keys = self
            .lock_keys(prefix)
            .await
            .map_err(|f| f.into_error(self.inner.kind, "list", None))?;
        let names = keys.iter().filter_map(|k| self.inner.keys.name_of(k));
        inspect_listed(names, prefix, limit, 64, |n| async move { self.inspect(&n).await }).await
    }

    /// The lock keys of names starting with `prefix`, on every primary.
    pub(crate) async fn lock_keys(&self, prefix: &str) -> Result<Vec<Vec<u8>>, Fault> {
        let pattern = self.inner.keys.scan_pattern(prefix);
        let pattern = &pattern;
        let Conn::Cluster(cluster) = &self.inner.conn else {
            let conn = &self.inner.conn;
            return scripts::scan(pattern, |cmd| {
                let mut c = conn.clone();
                async move { cmd.query_async(&mut c).await }
            })
            .await;
        };
        let scans = cluster_primaries(cluster)
            .await?
            .into_iter()
            .map(|(host, port)| async move {
                scripts::scan(pattern, |cmd| {
                    let mut c = cluster.clone();
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: host.clone(),
                        port,
                    });
                    async move { c.route_command(cmd, route).await }
                })
                .await
            });
        let mut keys = Vec::new();
        for r in join_all(scans).await {
            keys.extend(r?);
        }
        Ok(keys)
    }
}

/// The listing every mode shares: the names found by a key scan that start
/// with `prefix`, sorted and deduplicated, inspected `chunk` at a time until
/// `limit` holders are found.
pub(crate) async fn inspect_listed<F, Fut>(
    names: impl Iterator<Item = String>,
    prefix: &str,
    limit: usize,
    chunk: usize,
    inspect: F,
) -> Result<Vec<LockInfo>, LockError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Option<LockInfo>, LockError>>,
{
    let mut names: Vec<String> = names.filter(|n| n.starts_with(prefix)).collect();
    names.sort();
    names.dedup();
    let mut out = Vec::new();
    for batch in names.chunks(chunk) {
        if out.len() >= limit {
            break;
        }
        for info in join_all(batch.iter().cloned().map(&inspect)).await {
            out.extend(info?);
        }
    }
    out.truncate(limit);
    Ok(out)
}
