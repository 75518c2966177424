//! Inspection on Redlock: the holder a quorum of nodes agrees on, the
//! holders of a semaphore or read-write lock (see `kinds`), and listing
//! (a key scan on every node, the names found inspected).

use futures_util::future::join_all;
use lockkit_core::{LockError, LockInfo, LockKind};

use crate::error::{Fault, NodeTimeout};
use crate::inspect::{first_hold, inspect_listed};
use crate::scripts;

use super::nodes::{Inner, KIND, RedlockBackend};

impl RedlockBackend {
    /// [`LockBackend::inspect`](lockkit_core::raw::LockBackend::inspect):
    /// the holder a quorum of nodes agrees on, whatever the kind.
    pub(super) async fn inspect_name(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        first_hold(self.mutex_holder(name).await?, |kind| self.holders_of(name, kind)).await
    }

    /// The mutex's holder a quorum of nodes agrees on.
    async fn mutex_holder(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let results = inner
            .all(|_, mut c| async move { scripts::inspect(&mut c, &inner.keys, name).await })
            .await;
        self.holder("inspect", name, &results, true)
    }

    /// [`LockBackend::holders`](lockkit_core::raw::LockBackend::holders):
    /// the holds a quorum of nodes agrees on (see `kinds`).
    pub(super) async fn holders_of(&self, name: &str, kind: LockKind) -> Result<Vec<LockInfo>, LockError> {
        match kind {
            LockKind::Mutex => Ok(self.mutex_holder(name).await?.into_iter().collect()),
            kind => self.quorum_holders(name, kind).await,
        }
    }

    /// [`LockBackend::list`](lockkit_core::raw::LockBackend::list): the
    /// held locks whose names start with `prefix`, at most `limit`; the
    /// names come from every node that answered, which a quorum must.
    pub(super) async fn list_held(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let inner = &self.inner;
        let scans = inner.scan_nodes(&inner.keys.scan_pattern(prefix)).await;
        let failures: Vec<&Fault> = scans.iter().filter_map(|r| r.as_ref().err()).collect();
        if failures.len() > inner.n() - inner.quorum {
            let e = inner.quorum_error(&failures);
            return Err(LockError::backend(KIND, "list", None, e.retryable, e));
        }
        let names = scans.iter().flatten().flatten().filter_map(|k| inner.keys.name_of(k));
        inspect_listed(names, prefix, limit, 16, |n| async move { self.inspect_name(&n).await }).await
    }
}

impl Inner {
    /// The keys matching `pattern` on each node (`SCAN`), each node's
    /// whole scan given at most `response_timeout`.
    async fn scan_nodes(&self, pattern: &[u8]) -> Vec<Result<Vec<Vec<u8>>, Fault>> {
        let timeout = self.config.response_timeout;
        join_all(self.nodes.iter().map(|node| async move {
            let scan = scripts::scan(pattern, |cmd| {
                let mut c = node.conn.clone();
                async move { cmd.query_async(&mut c).await }
            });
            match tokio::time::timeout(timeout, scan).await {
                Ok(r) => r,
                Err(_) => Err(Fault::Timeout(NodeTimeout {
                    node: node.addr.clone(),
                    timeout,
                })),
            }
        }))
        .await
    }
}
