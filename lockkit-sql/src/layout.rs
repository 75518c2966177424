//! The storage layout at connect: creating the lock table and its
//! companions (`<table>_waiters`, the token source: `<table>_tokens` or, on
//! MariaDB, `<table>_token_seq` — see `token_source.rs`; the DDL is in `sql/`),
//! adding the columns an older lockkit's table lacks, and checking the
//! schema and the user's rights.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::LockError;

use crate::error::{Class, backend_error, classify, schema_error};
use crate::handle::SqlBackend;
use crate::value::{Arg, Col, Val, text};

impl SqlBackend {
    /// Creates the lock table and its token counter if they are missing
    /// (unless `create_table=false`), then checks that the lock table has
    /// every column lockkit uses and that names compare as exact bytes.
    /// Never alters or drops an existing table. Run by
    /// [`connect`](Self::connect); safe to run again, also concurrently.
    pub async fn migrate(&self) -> Result<(), LockError> {
        let inner = &self.inner;
        if inner.config.create_table {
            self.create_missing().await?;
        }
        let columns = self.lock_columns().await?;
        require_lock_columns(&inner.config.table, &columns)?;
        let has = |column: &str| columns.iter().any(|(name, _)| name == column);
        self.add_missing_columns(&inner.config.table, has, &inner.sql.added_columns)
            .await?;
        self.check_waiters_table().await?;
        let waiters = inner.sql.waiters_table();
        let waiter_columns = self.columns(&waiters).await?;
        let has = |column: &str| waiter_columns.iter().any(|name| name == column);
        self.add_missing_columns(&waiters, has, &inner.sql.waiter_columns)
            .await?;
        self.check_name_type(&columns)?;
        #[cfg(feature = "mysql")]
        if inner.config.dialect == crate::config::Dialect::Mysql {
            let source = self.pick_token_source().await?;
            let _ = inner.tokens.set(source);
        }
        for stmt in &inner.sql.prepare {
            inner.retry("create table", None, || inner.db.exec(stmt, &[])).await?;
        }
        Ok(())
    }

    /// Creates each table (or sequence) that is missing. Only what is
    /// missing: a least-privilege user (no CREATE) can use tables an
    /// administrator created.
    async fn create_missing(&self) -> Result<(), LockError> {
        for (object, stmt) in &self.inner.sql.create {
            // Retried while busy: processes opening a new SQLite file at
            // once can meet on its switch to WAL (SQLITE_BUSY at once,
            // without waiting for the busy timeout).
            if !self.object_exists(object).await? {
                self.run_create(object, stmt).await?;
            }
        }
        Ok(())
    }

    /// Runs `stmt`, the `CREATE` of `object`. Concurrent CREATE ... IF NOT
    /// EXISTS can still collide on Postgres (duplicate catalog rows): a
    /// later try sees the table.
    async fn run_create(&self, object: &str, stmt: &Arc<str>) -> Result<(), LockError> {
        let inner = &self.inner;
        let mut tries = 0;
        loop {
            let Err(e) = inner.db.exec(stmt, &[]).await else {
                return Ok(());
            };
            if tries < 5 && (is_duplicate(&e) || classify(&e) == Class::Transient) {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(20 * tries)).await;
                continue;
            }
            // Semaphores' and read-write locks' tables: a user who may not
            // create them keeps its mutexes (those kinds fail until an
            // owner connects once or creates them).
            if is_permission_denied(&e) && inner.ksql.owns(object) {
                tracing::warn!(backend = inner.kind, table = %object, error = %e,
                    "lockkit cannot create the table of semaphores and read-write locks; \
                     they fail until a user with CREATE rights connects once");
                return Ok(());
            }
            return Err(create_failed(inner.kind, object, e));
        }
    }

    /// The lock table's columns, `(name, data type)` in lowercase; an error
    /// when the table is not there.
    async fn lock_columns(&self) -> Result<Vec<(String, String)>, LockError> {
        let inner = &self.inner;
        let table = &inner.config.table;
        let args = [Arg::Text(Some(table))];
        let rows = inner
            .retry("connect", None, || {
                inner.db.fetch(&inner.sql.columns, &args, &[Col::Text, Col::Text])
            })
            .await?;
        if rows.is_empty() {
            let why = if inner.config.create_table {
                "was not found after CREATE TABLE IF NOT EXISTS (is it visible to this user and schema?)"
            } else {
                "does not exist (and create_table=false)"
            };
            return Err(schema_error(table, why.to_owned()));
        }
        Ok(rows
            .into_iter()
            .map(|mut r| {
                let ty = text(r.pop().unwrap_or(Val::Int(0)));
                (
                    text(r.pop().unwrap_or(Val::Int(0))).to_ascii_lowercase(),
                    ty.to_ascii_lowercase(),
                )
            })
            .collect())
    }

    /// Adds each of `added` (`(column, DDL)`) that `table` lacks (`has`:
    /// whether it has a column), in order (see [`add_column`](Self::add_column)).
    async fn add_missing_columns(
        &self,
        table: &str,
        has: impl Fn(&str) -> bool,
        added: &[(&'static str, Arc<str>)],
    ) -> Result<(), LockError> {
        for (column, ddl) in added {
            if !has(column) {
                self.add_column(table, column, ddl).await?;
            }
        }
        Ok(())
    }

    /// Checks that the lock table's names compare as exact bytes, where the
    /// dialect says which types do.
    fn check_name_type(&self, columns: &[(String, String)]) -> Result<(), LockError> {
        let sql = &self.inner.sql;
        let Some((_, ty)) = columns.iter().find(|(name, _)| name == "name") else {
            return Ok(());
        };
        if sql.name_types.is_empty() || sql.name_types.contains(&ty.as_str()) {
            return Ok(());
        }
        Err(schema_error(
            &self.inner.config.table,
            format!(
                "has a `name` column of type {ty}; lockkit needs {} so names compare as exact bytes",
                sql.name_types.join(" or ")
            ),
        ))
    }

    /// The (lowercase) column names of `table`.
    async fn columns(&self, table: &str) -> Result<Vec<String>, LockError> {
        let inner = &self.inner;
        let args = [Arg::Text(Some(table))];
        let rows = inner
            .retry("connect", None, || {
                inner.db.fetch(&inner.sql.columns, &args, &[Col::Text, Col::Text])
            })
            .await?;
        Ok(rows
            .into_iter()
            .map(|mut r| text(r.swap_remove(0)).to_ascii_lowercase())
            .collect())
    }

    /// Adds a column that a table made by an older lockkit lacks (the lock
    /// table's `attempts`, `queued`; the waiter table's `live`, `writer`:
    /// the only changes `migrate` makes to an existing table; its rows keep
    /// what they hold). A client that finds it added meanwhile by another
    /// is content.
    async fn add_column(&self, table: &str, column: &str, ddl: &Arc<str>) -> Result<(), LockError> {
        let inner = &self.inner;
        let refused = |why: String| {
            schema_error(
                table,
                format!("has no `{column}` column (made by an older lockkit) and {why}; add it with: {ddl}"),
            )
        };
        if !inner.config.create_table {
            return Err(refused("create_table=false".to_owned()));
        }
        match inner.db.exec(ddl, &[]).await {
            Ok(_) => Ok(()),
            Err(e) => {
                if self.columns(table).await?.iter().any(|c| c == column) {
                    return Ok(());
                }
                Err(refused(format!("adding it failed: {e}")))
            }
        }
    }

    /// Whether a table or sequence named `object` exists in the schema
    /// (visible to this user).
    pub(crate) async fn object_exists(&self, object: &str) -> Result<bool, LockError> {
        let inner = &self.inner;
        let args = [Arg::Text(Some(object))];
        let found = inner
            .retry("connect", None, || {
                inner.db.fetch(&inner.sql.exists, &args, &[Col::Int])
            })
            .await?;
        Ok(found.first().and_then(|r| r.first()).is_some_and(|v| v.int() > 0))
    }

    /// Checks that the waiter table (`<table>_waiters`, the fair line) is
    /// there: `migrate` created it with the other tables unless
    /// `create_table=false`, or a user without CREATE rights connects to
    /// tables an older lockkit made; the error then names the statement to
    /// run.
    async fn check_waiters_table(&self) -> Result<(), LockError> {
        let inner = &self.inner;
        let waiters = inner.sql.waiters_table();
        if self.object_exists(&waiters).await? {
            return Ok(());
        }
        let why = if inner.config.create_table {
            "was not found after CREATE TABLE IF NOT EXISTS (is it visible to this user and schema?)"
        } else {
            "does not exist (made by an older lockkit, and create_table=false)"
        };
        let create = inner.sql.create_waiters().map_or("", |c| c);
        Err(schema_error(
            &inner.config.table,
            format!("has no waiter table {waiters:?} (fair queues need it): it {why}; create it with: {create}"),
        ))
    }
}

/// Fails unless the lock table's `columns` hold every column lockkit
/// reads: a table of that name that is not a lockkit lock table.
fn require_lock_columns(table: &str, columns: &[(String, String)]) -> Result<(), LockError> {
    let missing: Vec<&str> = [
        "name",
        "owner",
        "hold_count",
        "token",
        "expires_at",
        "acquired_at",
        "memo",
    ]
    .into_iter()
    .filter(|c| !columns.iter().any(|(name, _)| name == c))
    .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(schema_error(
        table,
        format!(
            "exists but is not a lockkit lock table: missing columns {}",
            missing.join(", ")
        ),
    ))
}

/// The error of a `CREATE` of `object` that failed: a typed "missing, and
/// this user may not create it" when the database refused it for rights.
pub(crate) fn create_failed(kind: &'static str, object: &str, e: sqlx::Error) -> LockError {
    if is_permission_denied(&e) {
        let source = MissingObject {
            object: object.to_owned(),
            cause: e,
        };
        return LockError::backend(kind, "create table", None, false, source);
    }
    backend_error(kind, "create table", None, e)
}

/// A table (or sequence) lockkit needs is missing and this database user may
/// not create it.
#[derive(Debug)]
struct MissingObject {
    object: String,
    cause: sqlx::Error,
}

impl fmt::Display for MissingObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} does not exist (or this user has no rights on it) and this database user may not create it \
             (connect once as a user with CREATE rights, e.g. the table's owner, or grant CREATE)",
            self.object
        )
    }
}

impl std::error::Error for MissingObject {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.cause {
            sqlx::Error::Database(db) => Some(db.as_ref()),
            other => Some(other),
        }
    }
}

/// The database refused a statement for lack of a privilege: MySQL's
/// table/database/specific access denied (1142, 1044, 1227), Postgres's
/// `insufficient_privilege` (42501).
fn is_permission_denied(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    #[cfg(feature = "mysql")]
    if let Some(my) = db.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        return matches!(my.number(), 1142 | 1044 | 1227);
    }
    db.code().as_deref() == Some("42501")
}

fn is_duplicate(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("23505" | "42P07" | "42710")),
        _ => false,
    }
}
