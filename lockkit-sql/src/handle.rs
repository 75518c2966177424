//! [`SqlBackend`]: the handle, and the state its clones share ([`Inner`]):
//! settings, pools, statements, this process's waiters and the stop signal
//! of the background tasks. The operations add their methods to both in
//! their own files; `backend.rs` opens a backend and implements
//! [`LockBackend`](lockkit_core::raw::LockBackend) on it.

use std::fmt;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::config::SqlConfig;
use crate::conn::Db;
use crate::sql::{KindStatements, Statements};
use crate::wait::listener::Waiters;
use crate::wait::live_key::Live;
use crate::wait::places::Places;

/// A lock table in MySQL/MariaDB, Postgres or SQLite.
///
/// Cheap to clone (clones share the pool). The sweeper and the Postgres
/// listener stop when the last clone is dropped.
#[derive(Clone)]
pub struct SqlBackend {
    pub(crate) inner: Arc<Inner>,
}

/// What the clones of a [`SqlBackend`] share: settings, pools, statements,
/// this process's waiters, and the stop signal of the background tasks.
pub(crate) struct Inner {
    pub(crate) kind: &'static str,
    pub(crate) config: SqlConfig,
    pub(crate) db: Db,
    /// The fair line's statements (see [`Db::open_line`]).
    pub(crate) line_db: Db,
    /// Lease extensions: `db`'s pool, with the connections its operations
    /// leave free (see [`Db::renewals`]).
    pub(crate) renew_db: Db,
    pub(crate) sql: Statements,
    /// Semaphores' and read-write locks' statements (see `kinds/`).
    pub(crate) ksql: KindStatements,
    pub(crate) waiters: Arc<Waiters>,
    /// The places this backend's fair waiters hold in line (renewed by the
    /// task in `wait/places.rs`).
    pub(crate) places: Arc<Places>,
    /// The key that tells other processes this backend's waiters live.
    pub(crate) live: Live,
    /// MySQL/MariaDB: where the claims draw tokens (set by `migrate`).
    #[cfg(feature = "mysql")]
    pub(crate) tokens: std::sync::OnceLock<crate::sql::MysqlTokens>,
    /// Postgres: this backend's places on the wait lists of names.
    #[cfg(feature = "postgres")]
    pub(crate) wait_list: std::sync::OnceLock<crate::wait::waitlist::WaitList>,
    pub(crate) stop: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBackend")
            .field("config", &self.inner.config)
            .finish()
    }
}

impl SqlBackend {
    /// The settings this backend runs with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }
}
