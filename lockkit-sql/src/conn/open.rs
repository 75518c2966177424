//! Opening a backend's pools: the pool options every driver shares, each
//! driver's connection settings, the SQLite file's turn (`sqlite_gate`),
//! and the probe that says why a server cannot be reached.

#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use std::str::FromStr;
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use std::sync::Arc;
use std::time::Duration;

use super::db::{Db, Pool};
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
use super::kept::{Kept, PING_IF_IDLE};
use super::lane::Lane;
use crate::config::{Dialect, SqlConfig};

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
    /// order of what survives is kept. A hand-off then waits for two
    /// flushes (the release, the next holder's claim), not also for the
    /// releaser joining the line again.
    ///
    /// SQLite: connections with `synchronous=NORMAL` (the same file, in
    /// turn with the main pool). Postgres: `self`, its line statements set
    /// `synchronous_commit=off` for their own transaction (a second pool
    /// would cost each backend a connection made on its first wait, inside
    /// that wait). MySQL has no per-session setting for it, and an
    /// in-memory SQLite database no second pool: `self`.
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
            inline: self.inline,
        }
    }

    /// [`open`](Self::open); `soft`: the line's pool (see [`open_line`](Self::open_line)).
    fn open_with(config: &SqlConfig, soft: bool) -> Result<Self, sqlx::Error> {
        let pool = open_pool(config, soft)?;
        let max = match &pool {
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(..) if soft => config.max_connections.min(2),
            _ => config.max_connections,
        };
        Ok(Db {
            pool,
            lane: Lane::ops(max, config.connect_timeout),
            inline: config.dialect == Dialect::Postgres && config.pooler.shares_sessions(),
        })
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
}

/// The pool of [`Db::open_with`], of the driver `config` names; an error
/// for a driver this build lacks.
#[cfg_attr(not(feature = "sqlite"), allow(unused_variables))]
fn open_pool(config: &SqlConfig, soft: bool) -> Result<Pool, sqlx::Error> {
    match config.dialect {
        #[cfg(feature = "mysql")]
        Dialect::Mysql => mysql_pool(config),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => postgres_pool(config),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => sqlite_pool(config, soft),
        #[allow(unreachable_patterns)]
        other => Err(sqlx::Error::Configuration(
            format!("lockkit-sql was built without the `{}` feature", other.name()).into(),
        )),
    }
}

/// The pool settings every driver shares: connections made on demand and
/// recycled, and a connection that sat idle long pinged before use (see
/// `kept.rs`) instead of every connection on every checkout.
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
fn pool_options<DB: sqlx::Database>(config: &SqlConfig) -> sqlx::pool::PoolOptions<DB> {
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

/// MySQL/MariaDB: sessions at `READ COMMITTED`, so the sweeper's scan does
/// not lock live rows.
#[cfg(feature = "mysql")]
fn mysql_pool(config: &SqlConfig) -> Result<Pool, sqlx::Error> {
    let opts = sqlx::mysql::MySqlConnectOptions::from_str(&config.database)?;
    let pool = pool_options::<sqlx::MySql>(config)
        .after_connect(|conn, _| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
                Ok(())
            })
        })
        .connect_lazy_with(opts);
    Ok(Pool::Mysql(Arc::new(Kept::new(pool))))
}

/// Postgres: no sequential scans where an index serves, and no JIT.
///
/// The lock table's statistics are stale by nature (rows live for
/// seconds), and a histogram of past `expires_at`s makes `expires_at >
/// now()` look empty: the planner would then scan the whole table where a
/// batch of holds needs one index probe each. Every lockkit statement finds
/// rows by the primary key except the sweeper's, which still scans (it has
/// no index to use). A disabled scan's estimate passes every JIT
/// threshold, so each sweep would be compiled at a cost far above its
/// work; no lockkit statement is long enough to gain from JIT.
///
/// Behind a pooler that shares server sessions the settings are not sent:
/// they would be a startup parameter (`options`), which PgBouncer refuses,
/// and a `SET` would stay on a server session other clients use.
#[cfg(feature = "postgres")]
fn postgres_pool(config: &SqlConfig) -> Result<Pool, sqlx::Error> {
    let opts = sqlx::postgres::PgConnectOptions::from_str(&config.database)?.application_name("lockkit");
    let opts = if config.pooler.shares_sessions() {
        opts
    } else {
        opts.options(POSTGRES_SETTINGS)
    };
    Ok(Pool::Postgres(Arc::new(Kept::new(
        pool_options::<sqlx::Postgres>(config).connect_lazy_with(opts),
    ))))
}

/// The session settings of [`postgres_pool`], sent as the `options` startup
/// parameter.
#[cfg(feature = "postgres")]
pub(crate) const POSTGRES_SETTINGS: [(&str, &str); 2] = [("enable_seqscan", "off"), ("jit", "off")];

/// SQLite: a file in WAL mode, flushed at every commit (`synchronous=FULL`)
/// or, for the line's pool (`soft`), at checkpoints (`NORMAL`), with at
/// most two connections; the statements of the process's backends on the
/// file take turns (see [`sqlite_gate`]). An in-memory database keeps one
/// connection forever (it lives as long as one connection to it does), and
/// has a turn of its own.
#[cfg(feature = "sqlite")]
fn sqlite_pool(config: &SqlConfig, soft: bool) -> Result<Pool, sqlx::Error> {
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
    let mut pool = pool_options::<sqlx::Sqlite>(config);
    if soft {
        pool = pool.max_connections(config.max_connections.min(2));
    }
    if memory {
        pool = pool.min_connections(1).idle_timeout(None).max_lifetime(None);
    }
    let gate = if memory {
        Arc::default()
    } else {
        sqlite_gate(&config.database)
    };
    Ok(Pool::Sqlite(Arc::new(Kept::new(pool.connect_lazy_with(opts))), gate))
}

/// The turn that the statements of every backend of this process on one
/// SQLite file take, one at a time in the order they ask (FIFO). SQLite runs
/// one writer at a time, and a connection that finds another writing waits
/// in SQLite's busy handler, which sleeps 1, 2, 5, 10 … ms between looks: a
/// hand-off between two clients of one process would pay such a sleep
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
