//! Inspection on one Redis: who holds a name, the holders of a semaphore
//! or read-write lock, the clients in a name's line, and listing (the lock
//! keys on every primary, and the inspection of the names found, shared
//! with Redlock).

use futures_util::future::join_all;
use lockkit_core::{LockError, LockInfo, LockKind};
use redis::RedisResult;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use crate::backend::RedisBackend;
use crate::conn::{Conn, cluster_primaries};
use crate::error::Fault;
use crate::scripts;

/// The first hold of a name (one lock whatever the kind): its mutex's
/// holder `mutex`, else the first of the holds `holders` finds of a
/// writer, readers, or a semaphore's permits.
pub(crate) async fn first_hold<F, Fut>(mutex: Option<LockInfo>, holders: F) -> Result<Option<LockInfo>, LockError>
where
    F: Fn(LockKind) -> Fut,
    Fut: Future<Output = Result<Vec<LockInfo>, LockError>>,
{
    if mutex.is_some() {
        return Ok(mutex);
    }
    for kind in [LockKind::Write, LockKind::Read, LockKind::Permit { permits: 1 }] {
        if let Some(first) = holders(kind).await?.into_iter().next() {
            return Ok(Some(first));
        }
    }
    Ok(None)
}

impl RedisBackend {
    /// [`LockBackend::inspect`](lockkit_core::raw::LockBackend::inspect):
    /// who holds `name`, whatever the kind.
    pub(crate) async fn inspect_name(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        first_hold(self.mutex_holder(name).await?, |kind| self.holders_of(name, kind)).await
    }

    /// Who holds `name`'s mutex.
    async fn mutex_holder(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let stored = scripts::inspect(&mut self.inner.conn.clone(), &self.inner.keys, name)
            .await
            .map_err(|f| self.error("inspect", name, f))?;
        Ok(stored.map(|s| s.into_info(name)))
    }

    /// [`LockBackend::holders`](lockkit_core::raw::LockBackend::holders): the holds of `kind` on `name`, in the
    /// order granted.
    pub(crate) async fn holders_of(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self.mutex_holder(name).await?.into_iter().collect()),
            kind => match scripts::holders(&mut self.inner.conn.clone(), &self.inner.keys, name, kind).await {
                Ok(holds) => Ok(holds.into_iter().map(|(info, _)| info).collect()),
                Err(f) => Err(self.error("holders", name, f)),
            },
        }
    }

    /// [`LockBackend::waiting_for`](lockkit_core::raw::LockBackend::waiting_for): the clients queued in `kind`'s line
    /// of `name`.
    pub(crate) async fn queued(&self, name: &str, kind: LockKind) -> Result<usize, LockError> {
        let keys = &self.inner.keys;
        let queued: RedisResult<usize> = redis::cmd("ZCARD")
            .arg(keys.queue_of_lock(&keys.holds(name, kind)))
            .query_async(&mut self.inner.conn.clone())
            .await;
        queued.map_err(|e| self.error("waiting", name, Fault::Redis(e)))
    }

    /// The held locks whose names start with `prefix`, at most `limit`
    /// (the names with a mutex's lock key).
    pub(crate) async fn list_held(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let keys = self
            .lock_keys(prefix)
            .await
            .map_err(|f| f.into_error(self.inner.kind, "list", None))?;
        let names = keys.iter().filter_map(|k| self.inner.keys.name_of(k));
        inspect_listed(names, prefix, limit, 64, |n| async move { self.inspect_name(&n).await }).await
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
