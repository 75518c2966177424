//! A backend's liveness key: what lets the claims of other processes skip
//! the places in line of a process that is gone, at once where the server
//! can tell, instead of after their leases.
//!
//! Each backend that waits in a line draws a random key and names it in
//! the `live` column of its places (see `alive` in `sql/fragments.rs` for
//! the checks).
//!
//! - **MySQL/MariaDB**: a connection of its own holds `GET_LOCK` on
//!   `lockkit-live-<key>`. When the process dies its connections close, the
//!   server frees the lock, and `IS_USED_LOCK` says so to the next claim:
//!   a dead waiter costs the one behind it one look (the first waiter of a
//!   process looks every 10 ms without a push, see `wait/mod.rs`).
//! - **Postgres**: the backend's wait-list connection (`waitlist.rs`)
//!   holds the key as a session advisory lock; a claim's shared try of it
//!   succeeds only once that session is gone.
//! - **SQLite** has no server that sees connections: a row of
//!   `<table>_live` with a short lease (`live_lease`, 400 ms by default),
//!   renewed by one statement every quarter of it while the backend has
//!   places in line. A waiter whose process died is skipped within
//!   `live_lease` after its last renewal. A live process whose renewals
//!   stall longer than that (a starved runtime, a disk that stalls the
//!   file) is skipped while they do: its waiters keep their places and
//!   their turn comes back with the next renewal; a claim never grants a
//!   place that is not the live head of its line, so nobody is granted out
//!   of turn or twice.
//!
//! A connection that carries the key may drop (a restart, a network cut):
//! until it holds the key again, this backend's places look dead and are
//! passed over, and places taken meanwhile carry no key (they live by their
//! lease alone, `queue_lease`). Rows without a key — an older lockkit's —
//! also live by their lease. One gap: a process's waiters are woken in its
//! own line's order, so while one backend's key lapses, a later waiter of
//! another backend of the same process that the server now sees as the
//! head waits until the key is back (MySQL: the carrier looks every
//! second) or the renewal tick wakes the line, not at once.

use std::sync::Arc;
#[cfg(feature = "mysql")]
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
#[cfg(any(feature = "mysql", feature = "sqlite"))]
use std::time::Duration;

use super::live_key::Live;
#[cfg(any(feature = "mysql", feature = "sqlite"))]
use crate::config::Dialect;
use crate::handle::Inner;

/// How often the MySQL carrier checks its connection (and retakes the key
/// on a new one when it is gone).
#[cfg(feature = "mysql")]
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Live {
    /// The key a new place names: this backend's if it is carried now
    /// (started on the first call), else 0 (none: the place lives by its
    /// lease). Postgres: the caller waited for its wait list first.
    pub async fn for_place(&self, inner: &Arc<Inner>) -> i64 {
        match inner.config.dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => {
                self.started.get_or_init(|| start_mysql(self, inner)).await;
            }
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                self.started.get_or_init(|| start_sqlite(self, inner)).await;
                // Renewed within half the lease, or renewed now.
                let lease = inner.config.live_lease;
                if self.age() > lease / 2 {
                    renew_sqlite(self, inner).await;
                }
                return if self.age() < lease / 2 { self.key } else { 0 };
            }
            _ => {}
        }
        if self.held.load(Ordering::SeqCst) { self.key } else { 0 }
    }

    /// SQLite: how long ago the liveness row was last renewed.
    #[cfg(feature = "sqlite")]
    fn age(&self) -> Duration {
        match self.renewed_ms.load(Ordering::SeqCst) {
            0 => Duration::MAX,
            ms => self.since.elapsed().saturating_sub(Duration::from_millis(ms as u64)),
        }
    }
}

/// SQLite: renews the liveness row once (one statement, on the line's
/// pool, whose commits skip the flush: a lost renewal costs at most a
/// skip, never a wrong grant).
#[cfg(feature = "sqlite")]
async fn renew_sqlite(live: &Live, inner: &Inner) {
    use crate::value::{Arg, us};
    let args = [Arg::Int(live.key), Arg::Int(us(inner.config.live_lease))];
    let asked = live.since.elapsed();
    match inner.line_db.exec(&inner.sql.live_take, &args).await {
        // Dated from before the statement: the lease ran from then at least.
        Ok(_) => live
            .renewed_ms
            .store((asked.as_millis() as i64).max(1), Ordering::SeqCst),
        Err(e) => tracing::debug!(error = %e, "lockkit could not renew its liveness row; retrying"),
    }
}

/// SQLite: the first renewal, and the task that renews every quarter of
/// the lease while the backend has places in line.
#[cfg(feature = "sqlite")]
async fn start_sqlite(live: &Live, inner: &Arc<Inner>) {
    renew_sqlite(live, inner).await;
    let weak = Arc::downgrade(inner);
    let (every, stop) = (inner.config.live_lease / 4, inner.stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(every) => {}
            }
            let Some(inner) = weak.upgrade() else { break };
            if !inner.places.is_empty() {
                renew_sqlite(&inner.live, &inner).await;
            }
        }
    });
}

/// MySQL: starts the carrier and waits (at most the connect timeout) for
/// its first try at the key.
#[cfg(feature = "mysql")]
async fn start_mysql(live: &Live, inner: &Inner) {
    use std::str::FromStr;
    let Ok(options) = sqlx::mysql::MySqlConnectOptions::from_str(&inner.config.database) else {
        return;
    };
    let (tried, first) = tokio::sync::oneshot::channel();
    let carrier = Carrier {
        options,
        take: inner.sql.live_take.clone(),
        key: live.key,
        held: live.held.clone(),
        timeout: inner.config.connect_timeout,
    };
    tokio::spawn(carrier.run(tried, inner.stop.clone()));
    let _ = tokio::time::timeout(inner.config.connect_timeout, first).await;
}

/// MySQL: the connection that holds the key, remade when it is lost.
#[cfg(feature = "mysql")]
struct Carrier {
    options: sqlx::mysql::MySqlConnectOptions,
    take: Arc<str>,
    key: i64,
    held: Arc<AtomicBool>,
    timeout: Duration,
}

#[cfg(feature = "mysql")]
impl Carrier {
    async fn run(self, tried: tokio::sync::oneshot::Sender<()>, stop: tokio_util::sync::CancellationToken) {
        use lockkit_core::raw::Backoff;
        use sqlx::Connection;
        let mut tried = Some(tried);
        let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(5));
        loop {
            let taken = tokio::select! {
                _ = stop.cancelled() => return,
                r = tokio::time::timeout(self.timeout, self.take()) => r.unwrap_or(Err(sqlx::Error::PoolTimedOut)),
            };
            let mut conn = match taken {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::debug!(error = %e, "lockkit cannot hold its liveness key; its places live by their lease");
                    self.held.store(false, Ordering::SeqCst);
                    tried.take().map(|t| t.send(()));
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff.next_delay()) => continue,
                    }
                }
            };
            self.held.store(true, Ordering::SeqCst);
            tried.take().map(|t| t.send(()));
            backoff.reset();
            loop {
                tokio::select! {
                    _ = stop.cancelled() => {
                        let _ = conn.close().await;
                        return;
                    }
                    _ = tokio::time::sleep(CHECK_EVERY) => {}
                }
                if conn.ping().await.is_err() {
                    self.held.store(false, Ordering::SeqCst);
                    break;
                }
            }
        }
    }

    /// A new connection holding the key.
    async fn take(&self) -> Result<sqlx::MySqlConnection, sqlx::Error> {
        use sqlx::Connection;
        let mut conn = sqlx::MySqlConnection::connect_with(&self.options).await?;
        let got: Option<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(self.take.clone()))
            .bind(self.key)
            .fetch_one(&mut conn)
            .await?;
        if got == Some(1) {
            Ok(conn)
        } else {
            // An earlier connection of ours that the server has not seen
            // close yet still holds it.
            let _ = conn.close().await;
            Err(sqlx::Error::Protocol(
                "the liveness key is held by another session".into(),
            ))
        }
    }
}
