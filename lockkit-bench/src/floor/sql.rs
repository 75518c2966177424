//! SQL floor: one `INSERT` of a row shaped like the lock table's and one
//! `DELETE` of it, on the lock table itself, through sqlx like the backend.

use async_trait::async_trait;
use lockkit::url::ConnectUrl;
use lockkit_sql::{Dialect, SqlBackend, SqlConfig};

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
    /// once), then opens a one-connection pool on the same database.
    pub async fn connect(url: &mut ConnectUrl) -> Result<Self, BenchError> {
        let mut config = SqlConfig::from_url(url)?;
        config.sweep_interval = None;
        let (dialect, database, table) = (config.dialect, config.database.clone(), config.table.clone());
        drop(SqlBackend::connect(config).await?);
        let pool = match dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => Pool::Mysql(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(&database)
                    .await?,
            ),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Pool::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(&database)
                    .await?,
            ),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => Pool::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
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
        Ok(SqlFloor { pool, insert, delete })
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
        let name = name.as_bytes();
        with_pool!(self, pool => {
            sqlx::query(safe(self.insert.clone())).bind(name).bind(OWNER).bind(TTL_US).execute(pool).await?;
            sqlx::query(safe(self.delete.clone())).bind(name).bind(OWNER).execute(pool).await?;
        });
        Ok(())
    }

    async fn ping(&self) -> Result<(), BenchError> {
        with_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }
}
