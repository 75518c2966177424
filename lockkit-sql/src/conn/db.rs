//! One connection pool per backend, whichever the database, and the two ways
//! statements run on it: `exec` (affected rows, MySQL's insert id) and
//! `fetch` (rows decoded into plain values). Written once: the
//! `with_pool!` macro expands the same code for each enabled driver, and
//! `rows.rs` binds the arguments and decodes the rows for any of them. The
//! pools are opened in `open.rs`.
//!
//! **Statement futures go on the heap.** sqlx's futures run to kilobytes,
//! and an async function holding one by value is at least as large (often
//! twice: its argument and the awaited value), so every layer above grew by
//! it and each call and `.await` on the way copied it all. Each statement
//! here boxes its work, once per statement, and the layers above stay
//! small.

use std::sync::Arc;

#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use super::kept::Kept;
use super::lane::Lane;
#[cfg(feature = "mysql")]
use super::rows::decode_row;
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use super::rows::{bind_all, decode_rows};
use crate::value::{Arg, Col, Val};

/// What an `exec` did.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Done {
    /// Affected rows (MySQL: matched rows, as sqlx sets `CLIENT_FOUND_ROWS`).
    pub rows: u64,
    /// MySQL's `LAST_INSERT_ID` as reported in the OK packet; 0 elsewhere.
    pub last_id: u64,
}

/// MySQL's insert id from a statement's result (0 on the other drivers).
trait LastId {
    fn last_id(&self) -> u64;
}

#[cfg(feature = "mysql")]
impl LastId for sqlx::mysql::MySqlQueryResult {
    fn last_id(&self) -> u64 {
        self.last_insert_id()
    }
}

#[cfg(feature = "postgres")]
impl LastId for sqlx::postgres::PgQueryResult {
    fn last_id(&self) -> u64 {
        0
    }
}

#[cfg(feature = "sqlite")]
impl LastId for sqlx::sqlite::SqliteQueryResult {
    fn last_id(&self) -> u64 {
        0
    }
}

/// A pool, and the lane its statements take to it (see `lane.rs`):
/// a backend's operations and its lease renewals are two handles on one
/// pool.
#[derive(Debug, Clone)]
pub(crate) struct Db {
    pub(super) pool: Pool,
    pub(super) lane: Lane,
    /// Postgres behind a pooler that shares server sessions: statements
    /// go with their arguments inlined, in the simple protocol (see
    /// `inline.rs`).
    pub(super) inline: bool,
}

/// The pool of one of the enabled drivers.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    #[cfg(feature = "mysql")]
    Mysql(Arc<Kept<sqlx::MySql>>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<Kept<sqlx::Postgres>>),
    /// The pool, and the turn its statements take on the database file
    /// (see `sqlite_gate` in `open.rs`).
    #[cfg(feature = "sqlite")]
    Sqlite(Arc<Kept<sqlx::Sqlite>>, Arc<tokio::sync::Mutex<()>>),
    /// Built without any driver: no pool can exist.
    #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
    #[allow(dead_code)]
    None(std::convert::Infallible),
}

/// Runs `$body` with `$pool` bound to the concrete pool, for every driver.
macro_rules! with_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match &$db.pool {
            #[cfg(feature = "mysql")]
            $crate::conn::db::Pool::Mysql($pool) => $body,
            #[cfg(feature = "postgres")]
            $crate::conn::db::Pool::Postgres($pool) => $body,
            #[cfg(feature = "sqlite")]
            $crate::conn::db::Pool::Sqlite($pool, _) => $body,
            #[cfg(not(any(feature = "mysql", feature = "postgres", feature = "sqlite")))]
            $crate::conn::db::Pool::None(never) => match *never {},
        }
    };
}

impl Db {
    /// Runs a statement; affected rows and MySQL's insert id.
    pub async fn exec(&self, sql: &Arc<str>, args: &[Arg<'_>]) -> Result<Done, sqlx::Error> {
        // On the heap (see the module's note).
        Box::pin(async move {
            let _admitted = self.lane.admit().await?;
            let _turn = self.turn().await;
            #[cfg(feature = "postgres")]
            if let (true, Pool::Postgres(pool)) = (self.inline, &self.pool) {
                return inline_exec(pool, super::inline::inline(sql, args)?).await;
            }
            with_pool!(self, pool => {
                let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                let mut conn = pool.acquire().await?;
                super::sent::mark();
                let r = bind_all(query, args).execute(&mut *conn).await?;
                conn.done();
                Ok(Done {
                    rows: r.rows_affected(),
                    last_id: r.last_id(),
                })
            })
        })
        .await
    }

    /// SQLite: waits for this statement's turn on the file (see
    /// `sqlite_gate` in `open.rs`); nothing elsewhere.
    async fn turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_, gate) => Some(gate.lock().await),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Runs a query; every row decoded as `cols` says.
    pub async fn fetch(&self, sql: &Arc<str>, args: &[Arg<'_>], cols: &[Col]) -> Result<Vec<Vec<Val>>, sqlx::Error> {
        // On the heap (see the module's note).
        Box::pin(async move {
            let _admitted = self.lane.admit().await?;
            let _turn = self.turn().await;
            #[cfg(feature = "postgres")]
            if let (true, Pool::Postgres(pool)) = (self.inline, &self.pool) {
                return inline_fetch(pool, super::inline::inline(sql, args)?, cols).await;
            }
            with_pool!(self, pool => {
                let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                let mut conn = pool.acquire().await?;
                super::sent::mark();
                let rows = bind_all(query, args).fetch_all(&mut *conn).await?;
                conn.done();
                decode_rows(&rows, cols)
            })
        })
        .await
    }

    /// MySQL: runs a multi-statement text batch on one connection; the
    /// result of every statement and the rows (decoded as `cols`) of any
    /// that return rows. If it fails part-way the connection is closed, not
    /// returned to the pool, so the server rolls back whatever the batch left
    /// open.
    #[cfg(feature = "mysql")]
    pub async fn mysql_batch(&self, sql: String, cols: &[Col]) -> Result<(Vec<Done>, Vec<Vec<Val>>), sqlx::Error> {
        // On the heap (see the module's note).
        Box::pin(async move {
            use futures_util::TryStreamExt;
            use sqlx::Either;
            #[allow(irrefutable_let_patterns)]
            let Pool::Mysql(pool) = &self.pool else {
                return Err(sqlx::Error::Configuration("a MySQL batch on another database".into()));
            };
            let _admitted = self.lane.admit().await?;
            let mut conn = pool.acquire().await?;
            super::sent::mark();
            let mut done = Vec::new();
            let mut rows = Vec::new();
            let result: Result<(), sqlx::Error> = async {
                let mut stream = sqlx::raw_sql(sqlx::AssertSqlSafe(sql)).fetch_many(&mut *conn);
                while let Some(item) = stream.try_next().await? {
                    match item {
                        Either::Left(r) => done.push(Done {
                            rows: r.rows_affected(),
                            last_id: r.last_insert_id(),
                        }),
                        Either::Right(row) => rows.push(decode_row(&row, cols)?),
                    }
                }
                Ok(())
            }
            .await;
            if let Err(e) = result {
                conn.close_on_drop();
                return Err(e);
            }
            conn.done();
            Ok((done, rows))
        })
        .await
    }

    /// Postgres: runs a query whose arguments are `(int8, bytea[], bytea[],
    /// int8[])` — one statement text for any number of holds, and a plan
    /// driven by the arrays (`unnest`), so each hold is one index probe
    /// whatever the planner believes about the table.
    #[cfg(feature = "postgres")]
    pub async fn pg_fetch_lists(
        &self,
        sql: &Arc<str>,
        int: i64,
        lists: (Vec<&[u8]>, Vec<&[u8]>, Vec<i64>),
        cols: &[Col],
    ) -> Result<Vec<Vec<Val>>, sqlx::Error> {
        // On the heap (see the module's note).
        Box::pin(async move {
            #[allow(irrefutable_let_patterns)]
            let Pool::Postgres(pool) = &self.pool else {
                return Err(sqlx::Error::Configuration(
                    "a Postgres query on another database".into(),
                ));
            };
            let _admitted = self.lane.admit().await?;
            if self.inline {
                return inline_fetch(pool, super::inline::inline_lists(sql, int, &lists)?, cols).await;
            }
            let mut conn = pool.acquire().await?;
            super::sent::mark();
            let rows = sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
                .bind(int)
                .bind(lists.0)
                .bind(lists.1)
                .bind(lists.2)
                .fetch_all(&mut *conn)
                .await?;
            conn.done();
            decode_rows(&rows, cols)
        })
        .await
    }

    /// Runs a query for at most one row.
    pub async fn fetch_one(
        &self,
        sql: &Arc<str>,
        args: &[Arg<'_>],
        cols: &[Col],
    ) -> Result<Option<Vec<Val>>, sqlx::Error> {
        Ok(self.fetch(sql, args, cols).await?.into_iter().next())
    }

    /// Closes the pool (waits for checked-out connections to come back).
    pub async fn close(&self) {
        with_pool!(self, pool => pool.close().await)
    }
}

/// Postgres behind a pooler: runs an inlined statement (see `inline.rs`);
/// affected rows.
#[cfg(feature = "postgres")]
async fn inline_exec(pool: &Kept<sqlx::Postgres>, text: String) -> Result<Done, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    super::sent::mark();
    let r = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).execute(&mut *conn).await?;
    conn.done();
    Ok(Done {
        rows: r.rows_affected(),
        last_id: 0,
    })
}

/// Postgres behind a pooler: runs an inlined query; every row decoded as
/// `cols` says (the simple protocol's rows come as text, which sqlx
/// decodes by the column types as it does binary rows).
#[cfg(feature = "postgres")]
async fn inline_fetch(pool: &Kept<sqlx::Postgres>, text: String, cols: &[Col]) -> Result<Vec<Vec<Val>>, sqlx::Error> {
    let mut conn = pool.acquire().await?;
    super::sent::mark();
    let rows = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).fetch_all(&mut *conn).await?;
    conn.done();
    decode_rows(&rows, cols)
}
