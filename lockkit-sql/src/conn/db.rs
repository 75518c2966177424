//! One connection pool per backend, whichever the database, and the two ways
//! statements run on it: `exec` (affected rows, MySQL's insert id) and
//! `fetch` (rows decoded into plain values). Written once: the
//! [`with_pool!`] macro expands the same code for each enabled driver.
//!
//! **Statement futures go on the heap.** sqlx's futures run to kilobytes,
//! and an async function holding one by value is at least as large (often
//! twice: its argument and the awaited value), so every layer above grew by
//! it and each call and `.await` on the way copied it all. Each statement
//! here boxes its work, once per statement, and the layers above stay
//! small.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use super::kept::{Kept, PING_IF_IDLE};
use super::lane::Lane;
use crate::config::{Dialect, SqlConfig};
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
}

/// The pool of one of the enabled drivers.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    #[cfg(feature = "mysql")]
    Mysql(Arc<Kept<sqlx::MySql>>),
    #[cfg(feature = "postgres")]
    Postgres(Arc<Kept<sqlx::Postgres>>),
    /// The pool, and the turn its statements take on the database file
    /// (see [`sqlite_gate`]).
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

/// Binds `$args` to the query `$q`.
macro_rules! bind_all {
    ($q:expr, $args:expr) => {{
        let mut q = $q;
        for arg in $args {
            q = match *arg {
                Arg::Bytes(b) => q.bind(b),
                Arg::Int(i) => q.bind(i),
                Arg::Text(t) => q.bind(t),
            };
        }
        q
    }};
}

/// Decodes `$row` as `$cols` says into a `Vec<Val>` (`?` on failures).
macro_rules! decode_row {
    ($row:expr, $cols:expr) => {{
        let row = &$row;
        let mut vals = Vec::with_capacity($cols.len());
        for (i, col) in $cols.iter().enumerate() {
            vals.push(match col {
                Col::Int => Val::Int(row.try_get::<Option<i64>, _>(i)?.unwrap_or(0)),
                Col::Bytes => Val::Bytes(row.try_get::<Vec<u8>, _>(i)?),
                Col::Text => Val::Text(row.try_get::<String, _>(i)?),
            });
        }
        vals
    }};
}

/// The turn that the statements of every backend of this process on one
/// SQLite file take, one at a time in the order they ask (FIFO). SQLite runs
/// one writer at a time, and a connection that finds another writing waits
/// in SQLite's busy handler, which sleeps 1, 2, 5, 10 … ms between looks: a
/// hand-off between two clients of one process paid a millisecond sleep
/// whenever their statements met. Queued here they follow each other at
/// once, in order. Other processes on the file still meet in the busy
/// handler. Statements are single autocommit statements, so a turn is
/// never held across an await of anything but its own statement.
#[cfg(feature = "sqlite")]
fn sqlite_gate(database: &str) -> Arc<tokio::sync::Mutex<()>> {
    static GATES: crate::shared::SharedByKey<tokio::sync::Mutex<()>> = std::sync::OnceLock::new();
    // The directory resolved (the file may not exist yet).
    let path = std::path::Path::new(database);
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let key = match (std::fs::canonicalize(dir), path.file_name()) {
        (Ok(dir), Some(file)) => dir.join(file).to_string_lossy().into_owned(),
        _ => database.to_owned(),
    };
    crate::shared::shared_by_key(&GATES, key)
}

impl Db {
    /// Opens the pool (connections are made on demand; the first statement
    /// — `migrate` — proves the database is reachable).
    pub fn open(config: &SqlConfig) -> Result<Self, sqlx::Error> {
        Self::open_with(config, false)
    }

    /// The pool for the statements of the fair line (joining it, leaving
    /// it, renewing places), whose commits need not wait for a flush to
    /// disk. A place in line is a lease its waiter renews, and a waiter
    /// whose row a crash lost joins again; any later flushed commit (a
    /// claim, a release) flushes the line's earlier writes with it, so the
    /// order of what survives is kept. Every hand-off used to pay three
    /// flushes (the release, the next holder's claim, the releaser joining
    /// the line again); now two, like the floor's cycle.
    ///
    /// SQLite: connections with `synchronous=NORMAL` (the same file, in
    /// turn with the main pool). Postgres: `self`, its line statements set
    /// `synchronous_commit=off` for their own transaction (a second pool
    /// cost each backend a connection made on its first wait, ~100 ms
    /// under load, seen as the worst wait of short runs). MySQL has no
    /// per-session setting for it, and an in-memory SQLite database no
    /// second pool: `self`.
    #[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
    pub fn open_line(&self, config: &SqlConfig) -> Result<Self, sqlx::Error> {
        match &self.pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(..) if config.database == ":memory:" => Ok(self.clone()),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(..) => Self::open_with(config, true),
            #[allow(unreachable_patterns)]
            _ => Ok(self.clone()),
        }
    }

    /// A handle on the same pool for lease renewals: its statements may
    /// take the connections the operations leave free (see `lane.rs`).
    pub fn renewals(&self) -> Self {
        Db {
            pool: self.pool.clone(),
            lane: Lane::Renewals,
        }
    }

    /// [`open`](Self::open); `soft`: the line's pool (see [`open_line`](Self::open_line)).
    fn open_with(config: &SqlConfig, soft: bool) -> Result<Self, sqlx::Error> {
        let pool = Self::open_pool(config, soft)?;
        let max = match &pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(..) if soft => config.max_connections.min(2),
            _ => config.max_connections,
        };
        Ok(Db {
            pool,
            lane: Lane::ops(max, config.connect_timeout),
        })
    }

    /// The pool of [`open_with`](Self::open_with).
    #[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
    fn open_pool(config: &SqlConfig, soft: bool) -> Result<Pool, sqlx::Error> {
        fn options<DB: sqlx::Database>(config: &SqlConfig) -> sqlx::pool::PoolOptions<DB> {
            sqlx::pool::PoolOptions::<DB>::new()
                .max_connections(config.max_connections)
                .min_connections(0)
                .acquire_timeout(config.connect_timeout)
                .idle_timeout(Some(Duration::from_secs(300)))
                .max_lifetime(Some(Duration::from_secs(1800)))
                .test_before_acquire(false)
                .before_acquire(|conn, meta| {
                    Box::pin(async move {
                        if meta.idle_for > PING_IF_IDLE {
                            sqlx::Connection::ping(conn).await?;
                        }
                        Ok(true)
                    })
                })
        }
        match config.dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => {
                let opts = sqlx::mysql::MySqlConnectOptions::from_str(&config.database)?;
                let pool = options::<sqlx::MySql>(config)
                    .after_connect(|conn, _| {
                        Box::pin(async move {
                            // Read committed: the sweeper's scan does not lock live rows.
                            sqlx::Executor::execute(
                                &mut *conn,
                                "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                            )
                            .await?;
                            Ok(())
                        })
                    })
                    .connect_lazy_with(opts);
                Ok(Pool::Mysql(Arc::new(Kept::new(pool))))
            }
            #[cfg(feature = "postgres")]
            Dialect::Postgres => {
                // No sequential scans where an index serves: the table's
                // statistics are stale by nature (rows live for seconds), and
                // a histogram of past `expires_at`s makes `expires_at >
                // now()` look empty, so a 256-hold extend planned a seq scan
                // joined to the array, ~2.5M comparisons a statement, and
                // thousands of auto-extended holds expired (w4). Every
                // lockkit statement finds rows by the primary key except
                // the sweeper's, which still scans (it has no index to use).
                // No JIT: a disabled scan's estimate passes every JIT
                // threshold, and each sweep compiled for ~190 ms of server
                // CPU to do ~7 ms of work; no lockkit statement is long
                // enough to gain from it.
                let opts = sqlx::postgres::PgConnectOptions::from_str(&config.database)?
                    .application_name("lockkit")
                    .options([("enable_seqscan", "off"), ("jit", "off")]);
                Ok(Pool::Postgres(Arc::new(Kept::new(
                    options::<sqlx::Postgres>(config).connect_lazy_with(opts),
                ))))
            }
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
                let memory = config.database == ":memory:";
                let opts = if memory {
                    SqliteConnectOptions::from_str("sqlite::memory:")?
                } else {
                    SqliteConnectOptions::new()
                        .filename(&config.database)
                        .create_if_missing(true)
                        .journal_mode(SqliteJournalMode::Wal)
                        .synchronous(if soft {
                            SqliteSynchronous::Normal
                        } else {
                            SqliteSynchronous::Full
                        })
                };
                let opts = opts.busy_timeout(config.connect_timeout.max(Duration::from_secs(5)));
                let mut pool = options::<sqlx::Sqlite>(config);
                if soft {
                    pool = pool.max_connections(config.max_connections.min(2));
                }
                if memory {
                    // The shared in-memory database lives as long as one
                    // connection to it: keep one, forever.
                    pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
                }
                let gate = if memory {
                    Arc::default()
                } else {
                    sqlite_gate(&config.database)
                };
                Ok(Pool::Sqlite(Arc::new(Kept::new(pool.connect_lazy_with(opts))), gate))
            }
            #[allow(unreachable_patterns)]
            other => Err(sqlx::Error::Configuration(
                format!("lockkit-sql was built without the `{}` feature", other.name()).into(),
            )),
        }
    }

    /// Opens one connection outside the pool and closes it again (MySQL,
    /// Postgres): the pool reports a failing connect only as a timeout, this
    /// gives the cause (refused, bad password, unknown database).
    pub async fn probe(config: &SqlConfig) -> Result<(), sqlx::Error> {
        let connect = async {
            match config.dialect {
                #[cfg(feature = "mysql")]
                Dialect::Mysql => {
                    use sqlx::Connection;
                    sqlx::MySqlConnection::connect(&config.database).await?.close().await
                }
                #[cfg(feature = "postgres")]
                Dialect::Postgres => {
                    use sqlx::Connection;
                    sqlx::PgConnection::connect(&config.database).await?.close().await
                }
                _ => Ok(()),
            }
        };
        tokio::time::timeout(config.connect_timeout, connect)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// Runs a statement; affected rows and MySQL's insert id.
    pub async fn exec(&self, sql: &Arc<str>, args: &[Arg<'_>]) -> Result<Done, sqlx::Error> {
        // On the heap (see the module's note).
        Box::pin(async move {
            let _admitted = self.lane.admit().await?;
            let _turn = self.turn().await;
            with_pool!(self, pool => {
                let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                let mut conn = pool.acquire().await?;
                super::sent::mark();
                let r = bind_all!(query, args).execute(&mut *conn).await?;
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
    /// [`sqlite_gate`]); nothing elsewhere.
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
            use sqlx::Row;
            let _admitted = self.lane.admit().await?;
            let _turn = self.turn().await;
            with_pool!(self, pool => {
                let query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                let mut conn = pool.acquire().await?;
                super::sent::mark();
                let rows = bind_all!(query, args).fetch_all(&mut *conn).await?;
                conn.done();
                let mut out = Vec::with_capacity(rows.len());
                for row in rows {
                    out.push(decode_row!(row, cols));
                }
                Ok(out)
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
            use sqlx::Row;
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
                        Either::Right(row) => rows.push(decode_row!(row, cols)),
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
            use sqlx::Row;
            #[allow(irrefutable_let_patterns)]
            let Pool::Postgres(pool) = &self.pool else {
                return Err(sqlx::Error::Configuration(
                    "a Postgres query on another database".into(),
                ));
            };
            let _admitted = self.lane.admit().await?;
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
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                out.push(decode_row!(row, cols));
            }
            Ok(out)
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

#[cfg(all(test, feature = "sqlite"))]
mod tests {
    use super::*;

    #[test]
    fn one_gate_per_sqlite_file_however_named() {
        let dir = std::env::temp_dir().join(format!("lockkit-gate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let plain = dir.join("a.db");
        let dotted = dir.join(".").join("a.db");
        let a = sqlite_gate(plain.to_str().unwrap());
        let b = sqlite_gate(dotted.to_str().unwrap());
        let other = sqlite_gate(dir.join("b.db").to_str().unwrap());
        assert!(Arc::ptr_eq(&a, &b), "the same file (not created yet) shares one gate");
        assert!(!Arc::ptr_eq(&a, &other), "another file has its own");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
