//! A transaction on one pooled connection, whichever the database: the
//! read-decide-write steps of semaphores and read-write locks (`kinds/`)
//! run in one, under a lock on the name's row (SQLite: the file's write
//! lock, taken at `BEGIN IMMEDIATE`, and this process's turn on the file).

use std::sync::Arc;

use super::db::{Db, Done, Pool};
use super::lane::Admitted;
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use super::rows::{bind_all, decode_rows};
use crate::value::{Arg, Col, Val};

/// An open transaction; dropped without [`commit`](Self::commit), it rolls
/// back (a connection lost mid-way rolls back on the server).
pub(crate) struct Tx {
    conn: TxConn,
    /// Postgres behind a pooler: arguments inlined (see `inline.rs`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    inline: bool,
    /// Its admission to the pool, for as long as it is open.
    _admitted: Admitted,
}

/// The transaction of one of the enabled drivers.
enum TxConn {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::Transaction<'static, sqlx::MySql>),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    /// The transaction, and this process's turn on the file for as long as
    /// it is open.
    #[cfg(feature = "sqlite")]
    Sqlite(
        sqlx::Transaction<'static, sqlx::Sqlite>,
        #[allow(dead_code)] tokio::sync::OwnedMutexGuard<()>,
    ),
    #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
    #[allow(dead_code)]
    None(std::convert::Infallible),
}

/// Runs `$body` with `$conn` bound to the transaction's connection.
macro_rules! with_tx {
    ($tx:expr, $conn:ident => $body:expr) => {
        match &mut $tx.conn {
            #[cfg(feature = "mysql")]
            TxConn::Mysql(t) => {
                let $conn = &mut **t;
                $body
            }
            #[cfg(feature = "postgres")]
            TxConn::Postgres(t) => {
                let $conn = &mut **t;
                $body
            }
            #[cfg(feature = "sqlite")]
            TxConn::Sqlite(t, _) => {
                let $conn = &mut **t;
                $body
            }
            #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
            TxConn::None(never) => match *never {},
        }
    };
}

impl Db {
    /// Opens a transaction (SQLite: `BEGIN IMMEDIATE`, in this process's
    /// turn on the file). Marks the send time (see `sent.rs`).
    pub async fn begin(&self) -> Result<Tx, sqlx::Error> {
        let admitted = self.lane.admit().await?;
        let conn = match &self.pool {
            #[cfg(feature = "mysql")]
            Pool::Mysql(pool) => TxConn::Mysql(pool.begin().await?),
            #[cfg(feature = "postgres")]
            Pool::Postgres(pool) => TxConn::Postgres(pool.begin().await?),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(pool, gate) => {
                let turn = gate.clone().lock_owned().await;
                TxConn::Sqlite(pool.begin_with(Some("BEGIN IMMEDIATE")).await?, turn)
            }
            #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
            Pool::None(never) => match *never {},
        };
        super::sent::mark();
        Ok(Tx {
            conn,
            inline: self.inline,
            _admitted: admitted,
        })
    }
}

impl Tx {
    /// Runs a statement; affected rows.
    pub async fn exec(&mut self, sql: &Arc<str>, args: &[Arg<'_>]) -> Result<Done, sqlx::Error> {
        #[cfg(feature = "postgres")]
        if let (true, TxConn::Postgres(t)) = (self.inline, &mut self.conn) {
            let text = super::inline::inline(sql, args)?;
            let r = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).execute(&mut **t).await?;
            return Ok(Done {
                rows: r.rows_affected(),
                last_id: 0,
            });
        }
        with_tx!(self, conn => {
            let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
            let r = bind_all(query, args).execute(conn).await?;
            Ok(Done {
                rows: r.rows_affected(),
                last_id: 0,
            })
        })
    }

    /// Runs a query; every row decoded as `cols` says.
    pub async fn fetch(
        &mut self,
        sql: &Arc<str>,
        args: &[Arg<'_>],
        cols: &[Col],
    ) -> Result<Vec<Vec<Val>>, sqlx::Error> {
        #[cfg(feature = "postgres")]
        if let (true, TxConn::Postgres(t)) = (self.inline, &mut self.conn) {
            let text = super::inline::inline(sql, args)?;
            let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).fetch_all(&mut **t).await?;
            return decode_rows(&rows, cols);
        }
        with_tx!(self, conn => {
            let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
            let rows = bind_all(query, args).fetch_all(conn).await?;
            decode_rows(&rows, cols)
        })
    }

    /// Commits.
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        match self.conn {
            #[cfg(feature = "mysql")]
            TxConn::Mysql(t) => t.commit().await,
            #[cfg(feature = "postgres")]
            TxConn::Postgres(t) => t.commit().await,
            #[cfg(feature = "sqlite")]
            TxConn::Sqlite(t, _turn) => t.commit().await,
            #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
            TxConn::None(never) => match never {},
        }
    }

    /// Rolls back (nothing was written, or nothing may be).
    pub async fn rollback(self) -> Result<(), sqlx::Error> {
        match self.conn {
            #[cfg(feature = "mysql")]
            TxConn::Mysql(t) => t.rollback().await,
            #[cfg(feature = "postgres")]
            TxConn::Postgres(t) => t.rollback().await,
            #[cfg(feature = "sqlite")]
            TxConn::Sqlite(t, _turn) => t.rollback().await,
            #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
            TxConn::None(never) => match never {},
        }
    }
}
