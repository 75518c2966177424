//! SQL floor: one `INSERT` of a row shaped like the lock table's and one
//! `DELETE` of it, on the lock table itself, through sqlx like the backend,
//! on one connection of its own: no pool, whose checkout and return add a
//! ping a statement.
//! For `mode=session` URLs the session locks' floor instead: MariaDB
//! `SELECT GET_LOCK(key, 0)` + `SELECT RELEASE_LOCK(key)`, Postgres
//! `SELECT pg_try_advisory_lock(key)` + `SELECT pg_advisory_unlock(key)`, on
//! one dedicated connection (no pool, as the session mode holds its own),
//! with the key the session mode uses for the name.

use async_trait::async_trait;
use lockkit::raw::ConnectUrl;
use lockkit_sql::{Dialect, Mode, SqlBackend, SqlConfig};

use super::cycle::Floor;
use crate::error::BenchError;

const OWNER: &[u8] = b"floor-owner";
const TTL_US: i64 = 30_000_000;

/// The floor's statements and its connection, `(name, owner, ttl_us)`
/// and `(name, owner)`.
pub struct SqlFloor {
    conn: tokio::sync::Mutex<Conn>,
    insert: String,
    delete: String,
    /// `mode=session`: the session locks' floor instead.
    session: bool,
}

/// The floor's connection.
enum Conn {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqliteConnection),
    /// Built without the SQL drivers: never made.
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
    /// once), then opens one connection on the same database.
    pub async fn connect(url: &mut ConnectUrl) -> Result<Self, BenchError> {
        let mut config = SqlConfig::from_url(url)?;
        config.sweep_interval = None;
        let (dialect, database, table) = (config.dialect, config.database.clone(), config.table.clone());
        let session = config.mode == Mode::Session;
        if !session {
            drop(SqlBackend::connect(config).await?);
        }
        let (insert, delete) = statements(dialect, &table);
        Ok(SqlFloor {
            conn: tokio::sync::Mutex::new(open(dialect, &database).await?),
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

/// Runs `$body` with `$conn` bound to whichever driver's connection `$c` is.
macro_rules! with_conn {
    ($c:expr, $conn:ident => $body:expr) => {
        match $c {
            #[cfg(feature = "mysql")]
            Conn::Mysql($conn) => $body,
            #[cfg(feature = "postgres")]
            Conn::Postgres($conn) => $body,
            #[cfg(feature = "sqlite")]
            Conn::Sqlite($conn) => $body,
            Conn::None => {}
        }
    };
}

#[async_trait]
impl Floor for SqlFloor {
    async fn cycle(&self, name: &str) -> Result<(), BenchError> {
        let mut conn = self.conn.lock().await;
        if self.session {
            return session_cycle(&mut conn, name).await;
        }
        let name = name.as_bytes();
        with_conn!(&mut *conn, c => {
            sqlx::query(safe(self.insert.clone())).bind(name).bind(OWNER).bind(TTL_US).execute(&mut *c).await?;
            sqlx::query(safe(self.delete.clone())).bind(name).bind(OWNER).execute(&mut *c).await?;
        });
        Ok(())
    }

    async fn ping(&self) -> Result<(), BenchError> {
        with_conn!(&mut *self.conn.lock().await, c => sqlx::Connection::ping(c).await?);
        Ok(())
    }
}

/// Opens the floor's connection (SQLite: WAL, full sync, like the backend).
async fn open(dialect: Dialect, database: &str) -> Result<Conn, BenchError> {
    match dialect {
        #[cfg(feature = "mysql")]
        Dialect::Mysql => Ok(Conn::Mysql(
            <sqlx::MySqlConnection as sqlx::Connection>::connect(database).await?,
        )),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Ok(Conn::Postgres(
            <sqlx::PgConnection as sqlx::Connection>::connect(database).await?,
        )),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => Ok(Conn::Sqlite(
            sqlx::ConnectOptions::connect(
                &sqlx::sqlite::SqliteConnectOptions::new()
                    .filename(database)
                    .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                    .synchronous(sqlx::sqlite::SqliteSynchronous::Full),
            )
            .await?,
        )),
        #[allow(unreachable_patterns)]
        other => Err(format!("built without the {} feature", other.name()).into()),
    }
}

/// One session-lock cycle: try the lock (it is free), release it.
#[cfg_attr(not(any(feature = "mysql", feature = "postgres")), allow(unused_variables))]
async fn session_cycle(conn: &mut Conn, name: &str) -> Result<(), BenchError> {
    let got = match conn {
        #[cfg(feature = "mysql")]
        Conn::Mysql(c) => {
            let key = lockkit_sql_session::server_key(Dialect::Mysql, name);
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
        Conn::Postgres(c) => {
            let key: i64 = lockkit_sql_session::server_key(Dialect::Postgres, name).parse()?;
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
        #[allow(unreachable_patterns)]
        _ => false,
    };
    if got {
        Ok(())
    } else {
        Err(format!("floor: the session lock of {name:?} was busy").into())
    }
}
