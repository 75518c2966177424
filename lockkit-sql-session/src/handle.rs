//! [`SessionBackend`]: the handle, and the state its clones share
//! ([`Inner`]): settings, statements, the table of holds, the connections
//! and the lines of waiting tasks. The operations add their methods to both
//! in their own files; `backend.rs` connects and implements
//! [`LockBackend`](lockkit_core::raw::LockBackend) on it.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use lockkit_core::{LockError, LockKind};
use tokio_util::sync::CancellationToken;

use crate::conn::sessions::{Session, Spare};
use crate::entry::Entry;
use crate::line::WaitLines;
use crate::sql::SessionSql;
use lockkit_sql::SqlConfig;

/// The SQL backend in session mode (`?mode=session` on a `mysql://`,
/// `mariadb://` or `postgres://` URL): holds are MariaDB `GET_LOCK` locks
/// or Postgres advisory locks on this backend's connections. See the
/// [crate documentation](crate) for how, and for what it gives up against
/// the lock table ([`SqlBackend`](lockkit_sql::SqlBackend)).
///
/// Cheap to clone (clones share connections and holds). The ping task
/// stops, and the connections close (freeing their locks), when the last
/// clone is dropped.
#[derive(Clone)]
pub struct SessionBackend {
    pub(super) inner: Arc<Inner>,
}

/// What the clones of a [`SessionBackend`] share.
pub(crate) struct Inner {
    pub(super) kind: &'static str,
    pub(super) config: SqlConfig,
    pub(super) sql: SessionSql,
    /// The holds of this backend, by name.
    pub(super) holds: std::sync::Mutex<HashMap<String, Entry>>,
    /// The connection tries run on (opened again when lost).
    pub(super) primary: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Connections that carry holds granted by a wait.
    pub(super) carriers: std::sync::Mutex<Vec<Arc<Session>>>,
    /// Connections without holds, for waits.
    pub(super) spares: std::sync::Mutex<Vec<Spare>>,
    /// Connections whose last hold is being released: spares again once
    /// the server answers.
    pub(super) returning: std::sync::atomic::AtomicUsize,
    /// Rung when a connection was put back with the spares, or a returning
    /// one was not.
    pub(super) spare_back: tokio::sync::Notify,
    /// The tasks waiting for each name, in line behind the one
    /// server-side wait for it.
    pub(super) lines: WaitLines,
    /// Names a try of this backend found busy, and when (see `BUSY_FOR`
    /// in `acquire.rs`).
    pub(super) busy: std::sync::Mutex<HashMap<String, tokio::time::Instant>>,
    pub(super) stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for SessionBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl SessionBackend {
    /// The settings this backend runs with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }

    pub(super) fn check_kind(&self, kind: LockKind) -> Result<(), LockError> {
        match kind {
            LockKind::Mutex => Ok(()),
            other => Err(LockError::Unsupported {
                backend: self.inner.kind,
                operation: other.family(),
            }),
        }
    }
}
