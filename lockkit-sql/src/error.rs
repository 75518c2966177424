//! The backend's name (one per dialect: [`Dialect::name`]), and sqlx
//! errors → [`LockError`], and which of them are safe to retry.

use lockkit_core::LockError;

use crate::config::Dialect;

impl Dialect {
    /// The backend's short name: `mysql`, `postgres` or `sqlite`.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Mysql => "mysql",
            Dialect::Postgres => "postgres",
            Dialect::Sqlite => "sqlite",
        }
    }
}

/// How a failed statement may be treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// The statement certainly did not take effect and trying it again at
    /// once is expected to work: an InnoDB deadlock (1213) or lock wait
    /// timeout (1205), a Postgres serialization failure or deadlock, SQLite
    /// busy/locked. Retried inside the backend, never surfaced as a failed
    /// acquire while retries last.
    Transient,
    /// No connection could be had within the connect timeout, a connection
    /// failed mid-statement (the statement may or may not have run), or the
    /// server is restarting. Surfaced at once as a retryable error (a
    /// waiting `lock` tries again until its deadline).
    Retryable,
    /// Anything else: bad schema, permissions, a bug.
    Permanent,
}

/// Classifies a sqlx error.
pub fn classify(e: &sqlx::Error) -> Class {
    match e {
        sqlx::Error::Database(db) => classify_database(db.as_ref()),
        sqlx::Error::PoolTimedOut
        | sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => Class::Retryable,
        _ => Class::Permanent,
    }
}

fn classify_database(db: &dyn sqlx::error::DatabaseError) -> Class {
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return match my.number() {
            // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ER_CHECKREAD (record changed
            // since last read), ER_LOCK_ABORTED
            1213 | 1205 | 1020 | 1689 => Class::Transient,
            // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_CONNECTION_KILLED,
            // ER_QUERY_INTERRUPTED, ER_TOO_MANY_USER_CONNECTIONS
            1040 | 1053 | 1927 | 1317 | 1203 => Class::Retryable,
            _ => Class::Permanent,
        };
    }
    #[cfg(feature = "sqlite")]
    if let Some(lite) = db.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        let code: i64 = sqlx::error::DatabaseError::code(lite)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        // SQLITE_BUSY (5) and SQLITE_LOCKED (6), with their extended codes.
        return match code & 0xff {
            5 | 6 => Class::Transient,
            _ => Class::Permanent,
        };
    }
    let code = db.code().unwrap_or_default();
    match code.as_ref() {
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => Class::Transient,
        // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections
        "57P01" | "57P02" | "57P03" | "53300" => Class::Retryable,
        c if c.starts_with("08") => Class::Retryable,
        _ => Class::Permanent,
    }
}

/// Wraps a sqlx error as a [`LockError::Backend`], its source chained.
pub fn backend_error(kind: &'static str, operation: &'static str, name: Option<&str>, e: sqlx::Error) -> LockError {
    let retryable = classify(&e) != Class::Permanent;
    match e {
        // sqlx's wrapper only says "error returned from database: " before
        // the database's own error, which it also returns as its source:
        // chain the database error itself (downcast it to
        // `sqlx::error::DatabaseError` types for codes).
        sqlx::Error::Database(db) => {
            let db: lockkit_core::BoxError = db;
            LockError::backend(kind, operation, name, retryable, db)
        }
        e => LockError::backend(kind, operation, name, retryable, e),
    }
}

/// A schema problem found by `migrate`: the table exists but is not ours.
pub(crate) fn schema_error(table: &str, reason: String) -> LockError {
    LockError::config("query parameter table", format!("table {table:?} {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_and_pool_errors() {
        assert_eq!(classify(&sqlx::Error::PoolTimedOut), Class::Retryable);
        let io = sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(classify(&io), Class::Retryable);
        assert_eq!(classify(&sqlx::Error::RowNotFound), Class::Permanent);
        let e = backend_error("mysql", "acquire", Some("n"), sqlx::Error::PoolTimedOut);
        assert!(e.is_retryable());
        assert!(std::error::Error::source(&e).is_some(), "the sqlx error is chained");
        assert!(e.to_string().contains("\"n\""), "the message names the lock: {e}");
    }
}
