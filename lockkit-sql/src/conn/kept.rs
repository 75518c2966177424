//! Connections kept checked out of the pool between statements.
//!
//! sqlx's pool (0.9) pings every connection given back to it, in a task of
//! its own, before another statement may use it: a backend whose
//! statements each borrow a connection would pay a round trip and a task
//! spawn per statement, and with one connection in the pool the next
//! statement waits for that ping. A connection whose statement finished is
//! kept here instead and lent to the next statement directly. One whose
//! statement failed or was dropped mid-way goes back to the pool, which
//! tests it. Kept connections still go back to the pool now and then
//! ([`BACK_AFTER`]), so its idle timeout and lifetime apply to them too.

use std::fmt;
use std::ops::{Deref, DerefMut};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;

/// How long a connection may sit idle here before it is pinged when lent:
/// catches connections a database restart left dead, without a ping on
/// every statement (the pool's checkout does the same).
pub(super) const PING_IF_IDLE: Duration = Duration::from_secs(10);

/// How long a connection may stay out of the pool before it goes back.
const BACK_AFTER: Duration = Duration::from_secs(60);

/// A pool and the connections kept out of it.
pub(crate) struct Kept<DB: sqlx::Database> {
    pool: sqlx::Pool<DB>,
    idle: Mutex<Idle<DB>>,
}

/// The kept connections, each with when it left the pool and when it was
/// kept; `closed` once [`Kept::close`] began (nothing is kept after).
struct Idle<DB: sqlx::Database> {
    conns: Vec<(PoolConnection<DB>, Instant, Instant)>,
    closed: bool,
}

impl<DB: sqlx::Database> fmt::Debug for Kept<DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Kept").field("pool", &self.pool).finish_non_exhaustive()
    }
}

impl<DB: sqlx::Database> Kept<DB> {
    /// Keeps connections of `pool`.
    pub fn new(pool: sqlx::Pool<DB>) -> Self {
        Kept {
            pool,
            idle: Mutex::new(Idle {
                conns: Vec::new(),
                closed: false,
            }),
        }
    }

    /// A connection for one statement: the last one kept (pinged first if
    /// it sat idle long), or one from the pool. Call [`Lent::done`] once
    /// the statement succeeded, or it goes back to the pool.
    pub async fn acquire(&self) -> Result<Lent<'_, DB>, sqlx::Error> {
        let (conn, out_since) = self.take().await?;
        Ok(Lent {
            kept: self,
            conn: Some((conn, out_since)),
            done: false,
        })
    }

    /// A connection of one's own (a transaction's), as [`acquire`](Self::acquire)
    /// finds it; it goes back to the pool when dropped.
    async fn take(&self) -> Result<(PoolConnection<DB>, Instant), sqlx::Error> {
        loop {
            let popped = self.idle.lock().unwrap_or_else(|p| p.into_inner()).conns.pop();
            let Some((mut conn, out_since, kept_at)) = popped else {
                return Ok((self.pool.acquire().await?, Instant::now()));
            };
            if kept_at.elapsed() <= PING_IF_IDLE {
                return Ok((conn, out_since));
            }
            if sqlx::Connection::ping(&mut *conn).await.is_ok() {
                return Ok((conn, out_since));
            }
            conn.close_on_drop();
        }
    }

    /// Opens a transaction with `BEGIN`, or `statement` if given.
    pub async fn begin_with(
        &self,
        statement: Option<&'static str>,
    ) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
        let (conn, _) = self.take().await?;
        sqlx::Transaction::begin(conn, statement.map(sqlx::SqlSafeStr::into_sql_str)).await
    }

    /// Opens a transaction with `BEGIN` (SQLite's go through `begin_with`).
    #[cfg(any(feature = "mysql", feature = "postgres"))]
    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, DB>, sqlx::Error> {
        self.begin_with(None).await
    }

    /// Closes the pool: gives the kept connections back, keeps no more,
    /// and waits for the lent ones.
    pub async fn close(&self) {
        let conns = {
            let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
            idle.closed = true;
            std::mem::take(&mut idle.conns)
        };
        drop(conns);
        self.pool.close().await;
    }

    /// Keeps `conn` for the next statement, unless closing or it has been
    /// out of the pool long (dropped: back to the pool).
    fn keep(&self, conn: PoolConnection<DB>, out_since: Instant) {
        if out_since.elapsed() > BACK_AFTER {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        if !idle.closed {
            idle.conns.push((conn, out_since, Instant::now()));
        }
    }
}

/// A connection lent to one statement.
pub(crate) struct Lent<'a, DB: sqlx::Database> {
    kept: &'a Kept<DB>,
    conn: Option<(PoolConnection<DB>, Instant)>,
    done: bool,
}

impl<DB: sqlx::Database> Lent<'_, DB> {
    /// The statement succeeded: the connection is kept for the next one.
    pub fn done(&mut self) {
        self.done = true;
    }

    /// The connection is closed, not given back (a batch failed part-way:
    /// the server rolls back what it left open).
    #[cfg(feature = "mysql")]
    pub fn close_on_drop(&mut self) {
        self.done = false;
        if let Some((conn, _)) = &mut self.conn {
            conn.close_on_drop();
        }
    }
}

impl<DB: sqlx::Database> Deref for Lent<'_, DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.conn.as_ref().expect("lent until dropped").0
    }
}

impl<DB: sqlx::Database> DerefMut for Lent<'_, DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.conn.as_mut().expect("lent until dropped").0
    }
}

impl<DB: sqlx::Database> Drop for Lent<'_, DB> {
    fn drop(&mut self) {
        if let Some((conn, out_since)) = self.conn.take()
            && self.done
        {
            self.kept.keep(conn, out_since);
        }
    }
}
