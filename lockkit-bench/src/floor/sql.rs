//! SQL floor: one `INSERT` of a row shaped like the lock table's and one
//! `DELETE` of it, on the lock table itself, through sqlx like the backend.
//! For `mode=session` URLs the session locks' floor instead: MariaDB
//! `SELECT GET_LOCK(key, 0)` + `SELECT RELEASE_LOCK(key)`, Postgres
//! `SELECT pg_try_advisory_lock(key)` + `SELECT pg_advisory_unlock(key)`, on
//! one dedicated connection (no pool, as the session mode holds its own),
//! with the key the session mode uses for the name.

use async_trait::async_trait;
use lockkit::url::ConnectUrl;
use lockkit_sql::{Dialect, Mode, SqlBackend, SqlConfig};

use super::Floor;
use crate::workloads::BenchError;

const OWNER: &[u8] = b"floor-owner";
const TTL_US: i64 = 30_000_000;

/// One pooled connection of the backend's driver.
enum Pool {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlPool),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
}

/// The floor's connection and its two statements, `(name, owner, ttl_us)`
/// and `(name, owner)`.
pub struct SqlFloor {
    pool: Pool,
    insert: String,
    delete: String,
    /// `mode=session`: the session locks' floor, on a connection of its own.
    session: Option<tokio::sync::Mutex<SessionConn>>,
}

/// The session floor's connection.
enum SessionConn {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
    /// Built without the MySQL and Postgres drivers: never made.
    #[allow(dead_code)]
    None,
}

/// The dialect's insert and delete on `table`.
fn statements(dialect: Dialect, table: &str) -> (String, String) {
    let (expires, p) = match dialect {
        Dialect::Mysql => (
            "UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND",
            ["?", "?", "UTC_TIMESTAMP(6)"],
        ),
        Dialect::Postgres => ("now() + $3::int8 * interval '1 microsecond'", ["$1", "$2", "now()"]),
        _ => ("?3", ["?1", "?2", "0"]),
    };
    let [n, o, now] = p;
    (
        format!(
            "INSERT INTO {table} (name, owner, hold_count, token, expires_at, acquired_at) \
             VALUES ({n}, {o}, 1, 1, {expires}, {now})"
        ),
        format!("DELETE FROM {table} WHERE name = {n} AND owner = {o}"),
    )
}

impl SqlFloor {
    /// Makes sure the URL's lock table exists (by connecting the backend
    /// once), then opens a one-connection pool on the same database. No
    /// ping before each statement (sqlx's default): the backend's pool
    /// sends none either, and the floor is the fewest round trips.
    pub async fn connect(url: &mut ConnectUrl) -> Result<Self, BenchError> {
        let mut config = SqlConfig::from_url(url)?;
        config.sweep_interval = None;
        let (dialect, database, table) = (config.dialect, config.database.clone(), config.table.clone());
        let session = if config.mode == Mode::Session {
            Some(tokio::sync::Mutex::new(session_conn(dialect, &database).await?))
        } else {
            drop(SqlBackend::connect(config).await?);
            None
        };
        let pool = match dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => Pool::Mysql(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect(&database)
                    .await?,
            ),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Pool::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect(&database)
                    .await?,
            ),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => Pool::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .test_before_acquire(false)
                    .connect_with(
                        sqlx::sqlite::SqliteConnectOptions::new()
                            .filename(&database)
                            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                            .synchronous(sqlx::sqlite::SqliteSynchronous::Full),
                    )
                    .await?,
            ),
            #[allow(unreachable_patterns)]
            other => return Err(format!("built without the {} feature", other.kind()).into()),
        };
        let (insert, delete) = statements(dialect, &table);
        Ok(SqlFloor {
            pool,
            insert,
            delete,
            session,
        })
    }
}

/// The lock table's name went through [`lockkit_sql::validate_table`]
/// (letters, digits, underscores) in `SqlConfig::from_url`; the rest of
/// the statement is constant.
fn safe(sql: String) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(sql)
}

/// Runs `$body` with `$pool` bound to whichever driver's pool `$floor` has.
macro_rules! with_pool {
    ($floor:expr, $pool:ident => $body:expr) => {
        match &$floor.pool {
            #[cfg(feature = "mysql")]
            Pool::Mysql($pool) => $body,
            #[cfg(feature = "postgres")]
            Pool::Postgres($pool) => $body,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite($pool) => $body,
        }
    };
}

#[async_trait]
impl Floor for SqlFloor {
    async fn cycle(&self, name: &str) -> Result<(), BenchError> {
        if let Some(conn) = &self.session {
            return session_cycle(&mut *conn.lock().await, name).await;
        }
        let name = name.as_bytes();
        with_pool!(self, pool => {
            sqlx::query(safe(self.insert.clone())).bind(name).bind(OWNER).bind(TTL_US).execute(pool).await?;
            sqlx::query(safe(self.delete.clone())).bind(name).bind(OWNER).execute(pool).await?;
        });
        Ok(())
    }

    async fn ping(&self) -> Result<(), BenchError> {
        if let Some(conn) = &self.session {
            match &mut *conn.lock().await {
                #[cfg(feature = "mysql")]
                SessionConn::Mysql(c) => sqlx::Connection::ping(c).await?,
                #[cfg(feature = "postgres")]
                SessionConn::Postgres(c) => sqlx::Connection::ping(c).await?,
                SessionConn::None => {}
            }
            return Ok(());
        }
        with_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }
}

/// Opens the session floor's connection.
#[cfg_attr(not(any(feature = "mysql", feature = "postgres")), allow(unused_variables))]
async fn session_conn(dialect: Dialect, database: &str) -> Result<SessionConn, BenchError> {
    use sqlx::Connection;
    match dialect {
        #[cfg(feature = "mysql")]
        Dialect::Mysql => Ok(SessionConn::Mysql(sqlx::MySqlConnection::connect(database).await?)),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(SessionConn::Postgres(sqlx::PgConnection::connect(database).await?)),
        other => Err(format!("no session locks on {}", other.kind()).into()),
    }
}

/// One session-lock cycle: try the lock (it is free), release it.
#[cfg_attr(not(any(feature = "mysql", feature = "postgres")), allow(unused_variables))]
async fn session_cycle(conn: &mut SessionConn, name: &str) -> Result<(), BenchError> {
    let got = match conn {
        #[cfg(feature = "mysql")]
        SessionConn::Mysql(c) => {
            let key = lockkit_sql::session::server_key(Dialect::Mysql, name);
            let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
                .bind(&key)
                .fetch_one(&mut *c)
                .await?;
            sqlx::query("SELECT RELEASE_LOCK(?)")
                .bind(&key)
                .execute(&mut *c)
                .await?;
            got == Some(1)
        }
        #[cfg(feature = "postgres")]
        SessionConn::Postgres(c) => {
            let key: i64 = lockkit_sql::session::server_key(Dialect::Postgres, name).parse()?;
            let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                .bind(key)
                .fetch_one(&mut *c)
                .await?;
            sqlx::query("SELECT pg_advisory_unlock($1)")
                .bind(key)
                .execute(&mut *c)
                .await?;
            got
        }
        SessionConn::None => true,
    };
    if got {
        Ok(())
    } else {
        Err(format!("floor: the session lock of {name:?} was busy").into())
    }
}
