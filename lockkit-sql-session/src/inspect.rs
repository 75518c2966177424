//! Looks at a name without taking it: [`LockBackend::inspect`] and
//! [`LockBackend::waiting`], answered from this backend's table of holds
//! where it can, else by one statement on the primary connection.
//!
//! [`LockBackend::inspect`]: lockkit_core::raw::LockBackend::inspect
//! [`LockBackend::waiting`]: lockkit_core::raw::LockBackend::waiting

use lockkit_core::{LockError, LockInfo};
use lockkit_sql::raw::backend_error;

use crate::conn::driver::Conn;
use crate::handle::Inner;
use crate::layout::Key;
use crate::sql::SessionSql;

type ConnFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, sqlx::Error>> + Send + 'a>>;

impl Inner {
    /// Runs a look (no hold taken) on the primary connection.
    async fn on_primary<T>(
        &self,
        operation: &'static str,
        name: &str,
        run: impl for<'a> FnOnce(&'a mut Conn, &'a SessionSql, &'a Key) -> ConnFuture<'a, T>,
    ) -> Result<T, LockError> {
        let key = Key::of(self.config.dialect, name);
        let session = self.primary().await?;
        let mut guard = session.conn.lock().await;
        let Some(conn) = guard.as_mut() else {
            return Err(self.lost_error(operation, name, &session));
        };
        match run(conn, &self.sql, &key).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.statement_failed(&session, &mut guard, &e);
                Err(backend_error(self.kind, operation, Some(name), e))
            }
        }
    }
}

impl Inner {
    /// This backend's own hold of `name` in full; a hold by any other
    /// connection as owner `""`, count 0, token 0 (the server knows only
    /// that it is held).
    pub(crate) async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        if let Some(info) = self.local_info(name) {
            return Ok(Some(info));
        }
        let held = self
            .on_primary("inspect", name, |conn, sql, key| Box::pin(conn.held(sql, key)))
            .await?;
        Ok(held.then(|| LockInfo {
            name: name.to_owned(),
            owner: String::new(),
            hold_count: 0,
            token: 0,
            remaining: None,
            kind: lockkit_core::LockKind::Mutex,
        }))
    }

    /// How many connections wait for `name` (Postgres only).
    pub(crate) async fn waiting(&self, name: &str) -> Result<usize, LockError> {
        let n = self
            .on_primary("waiting", name, |conn, sql, key| Box::pin(conn.waiting(sql, key)))
            .await?;
        n.ok_or(LockError::Unsupported {
            backend: self.kind,
            operation: "waiting",
        })
    }
}
