//! One server connection of the session mode: the statements run on it
//! (try, wait, release, look, ping) whichever the database.

use std::str::FromStr;
use std::time::Duration;

use sqlx::Connection;

use crate::layout::Key;
use crate::sql::SessionSql;
use lockkit_sql::{Dialect, SqlConfig};

/// A connection of one of the enabled drivers, outside any pool: a hold
/// lives as long as the connection it was taken on.
#[derive(Debug)]
pub(crate) enum Conn {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlConnection),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgConnection),
}

/// What a try gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tried {
    /// Granted, with this token.
    Granted(u64),
    /// Held by another connection.
    Busy,
    /// Not tried: the statement ran on another server session than the
    /// connection's (a pooler that shares sessions).
    OtherSession,
}

/// What a bounded wait for a lock gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waited {
    /// Granted, with this token.
    Granted(u64),
    /// The bound ran out.
    TimedOut,
}

/// The longest wait one statement is given: "forever" is a year (MySQL
/// refuses a negative `GET_LOCK` timeout), after which the waiter asks
/// again.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

/// Binds a key.
macro_rules! bind_key {
    ($q:expr, $key:expr) => {
        match $key {
            Key::Text(t) => $q.bind(t.clone()),
            Key::Int(i) => $q.bind(*i),
        }
    };
}

fn token(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

impl Conn {
    /// Opens a connection (bounded by the connect timeout).
    pub(crate) async fn open(config: &SqlConfig) -> Result<Conn, sqlx::Error> {
        let connect = async {
            match config.dialect {
                #[cfg(feature = "mysql")]
                Dialect::Mysql => {
                    let opts = sqlx::mysql::MySqlConnectOptions::from_str(&config.database)?;
                    Ok(Conn::Mysql(sqlx::MySqlConnection::connect_with(&opts).await?))
                }
                #[cfg(feature = "postgres")]
                Dialect::Postgres => {
                    let opts = sqlx::postgres::PgConnectOptions::from_str(&config.database)?
                        .application_name("lockkit-session");
                    Ok(Conn::Postgres(sqlx::PgConnection::connect_with(&opts).await?))
                }
                other => Err(sqlx::Error::Configuration(
                    format!("no session locks on {}", other.name()).into(),
                )),
            }
        };
        tokio::time::timeout(config.connect_timeout, connect)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// This connection's server-side id (`CONNECTION_ID()`, `pg_backend_pid()`).
    pub(crate) async fn id(&mut self, sql: &SessionSql) -> Result<i64, sqlx::Error> {
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => {
                let id: u64 = sqlx::query_scalar(sql.conn_id).fetch_one(&mut *c).await?;
                Ok(id as i64)
            }
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let id: i32 = sqlx::query_scalar(sql.conn_id).fetch_one(&mut *c).await?;
                Ok(i64::from(id))
            }
        }
    }

    /// Tries the lock without waiting, only on the server session `session`
    /// (Postgres; this connection's id).
    pub(crate) async fn try_lock(&mut self, sql: &SessionSql, key: &Key, session: i64) -> Result<Tried, sqlx::Error> {
        let (got, tok) = match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => {
                let _ = session;
                let q = sqlx::query_as::<_, (Option<i64>, i64)>(sqlx::AssertSqlSafe(sql.try_lock.as_str()));
                let (got, tok) = bind_key!(q, key).fetch_one(&mut *c).await?;
                (Some(got == Some(1)), tok)
            }
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let q = sqlx::query_as::<_, (Option<bool>, i64)>(sqlx::AssertSqlSafe(sql.try_lock.as_str()));
                let session = i32::try_from(session).unwrap_or(0);
                bind_key!(q, key).bind(session).fetch_one(&mut *c).await?
            }
        };
        Ok(match got {
            Some(true) => Tried::Granted(token(tok)),
            Some(false) => Tried::Busy,
            None => Tried::OtherSession,
        })
    }

    /// Waits server-side for the lock, at most `wait`.
    pub(crate) async fn wait_lock(
        &mut self,
        sql: &SessionSql,
        key: &Key,
        wait: Duration,
    ) -> Result<Waited, sqlx::Error> {
        let wait = wait.min(LONGEST_WAIT);
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => {
                let q = sqlx::query_as::<_, (Option<i64>, i64)>(sqlx::AssertSqlSafe(sql.wait_lock.as_str()));
                let (got, tok) = bind_key!(q, key).bind(wait.as_secs_f64()).fetch_one(&mut *c).await?;
                match got {
                    Some(1) => Ok(Waited::Granted(token(tok))),
                    Some(_) => Ok(Waited::TimedOut),
                    // NULL: the wait was ended (KILL QUERY) or failed.
                    None => Err(sqlx::Error::Protocol(
                        "GET_LOCK returned NULL (the wait was killed)".into(),
                    )),
                }
            }
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                // 0 would mean no bound; a wait of 0 is a try, never sent here.
                let ms = wait.as_millis().clamp(1, i32::MAX as u128);
                let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.wait_lock.as_str()));
                match bind_key!(q, key).bind(format!("{ms}ms")).fetch_one(&mut *c).await {
                    Ok(tok) => Ok(Waited::Granted(token(tok))),
                    Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("55P03") => Ok(Waited::TimedOut),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Releases one server hold of the key on this connection: whether
    /// there was one.
    pub(crate) async fn unlock(&mut self, sql: &SessionSql, key: &Key) -> Result<bool, sqlx::Error> {
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => {
                let q = sqlx::query_scalar::<_, Option<i64>>(sqlx::AssertSqlSafe(sql.unlock.as_str()));
                Ok(bind_key!(q, key).fetch_one(&mut *c).await? == Some(1))
            }
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let q = sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(sql.unlock.as_str()));
                bind_key!(q, key).fetch_one(&mut *c).await
            }
        }
    }

    /// Whether any connection holds the key.
    pub(crate) async fn held(&mut self, sql: &SessionSql, key: &Key) -> Result<bool, sqlx::Error> {
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => {
                let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(sql.held.as_str()));
                Ok(bind_key!(q, key).fetch_one(&mut *c).await? != 0)
            }
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let q = sqlx::query_scalar::<_, bool>(sqlx::AssertSqlSafe(sql.held.as_str()));
                bind_key!(q, key).fetch_one(&mut *c).await
            }
        }
    }

    /// How many connections wait for the key (Postgres only).
    #[cfg_attr(not(feature = "postgres"), allow(unused_variables))]
    pub(crate) async fn waiting(&mut self, sql: &SessionSql, key: &Key) -> Result<Option<usize>, sqlx::Error> {
        let Some(text) = &sql.waiting else {
            return Ok(None);
        };
        match self {
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let q = sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(text.as_str()));
                let n = bind_key!(q, key).fetch_one(&mut *c).await?;
                Ok(Some(usize::try_from(n).unwrap_or(0)))
            }
            #[allow(unreachable_patterns)]
            _ => Ok(None),
        }
    }

    /// Draws a token (used at connect to check the sequence).
    pub(crate) async fn next_token(&mut self, sql: &SessionSql) -> Result<u64, sqlx::Error> {
        let text = sqlx::AssertSqlSafe(sql.next_token.as_str());
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => sqlx::query_scalar::<_, i64>(text).fetch_one(&mut *c).await.map(token),
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => sqlx::query_scalar::<_, i64>(text).fetch_one(&mut *c).await.map(token),
        }
    }

    /// Runs a statement without arguments or results (DDL, `KILL`), in the
    /// text protocol.
    pub(crate) async fn execute(&mut self, text: &str) -> Result<(), sqlx::Error> {
        let q = sqlx::raw_sql(sqlx::AssertSqlSafe(text.to_owned()));
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => q.execute(&mut *c).await.map(|_| ()),
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => q.execute(&mut *c).await.map(|_| ()),
        }
    }

    /// Ends the statement (and the connection) of the connection `id`,
    /// from this one: `KILL` / `pg_terminate_backend`. The server then
    /// drops whatever that connection held or waited for.
    pub(crate) async fn kill(&mut self, id: i64) -> Result<(), sqlx::Error> {
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(_) => self.execute(&format!("KILL {id}")).await,
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => sqlx::query("SELECT pg_terminate_backend($1)")
                .bind(i32::try_from(id).unwrap_or(0))
                .execute(&mut *c)
                .await
                .map(|_| ()),
        }
    }

    /// A round trip proving the connection (and so its holds) alive.
    pub(crate) async fn ping(&mut self) -> Result<(), sqlx::Error> {
        match self {
            #[cfg(feature = "mysql")]
            Conn::Mysql(c) => c.ping().await,
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => c.ping().await,
        }
    }
}
