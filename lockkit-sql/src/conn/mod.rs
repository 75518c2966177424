//! Connections: opening a backend (its pools, the schema check, the
//! background tasks and, on Postgres, the listener and wait-list
//! connections), the pools its statements run on (`db.rs`, `kept.rs`), and when a
//! statement got its connection (`sent.rs`).

#[macro_use]
mod db;
mod kept;
mod lane;
pub(crate) mod sent;
mod tx;

use std::sync::Arc;
use std::time::Duration;

use lockkit_core::LockError;
use tokio_util::sync::CancellationToken;

use crate::backend::{Inner, SqlBackend};
use crate::config::{Dialect, SqlConfig};
use crate::error::backend_error;
use crate::sql::{KindStatements, Statements};
use crate::wait::listener::Waiters;
pub(crate) use db::{Arg, Col, Db, Pool, Val};
pub(crate) use tx::Tx;

/// A duration in whole microseconds, as statements take it.
pub(crate) fn us(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Microseconds a statement returned, as a duration (below zero: zero).
pub(crate) fn from_us(v: i64) -> Duration {
    Duration::from_micros(v.max(0) as u64)
}

/// A text or bytes value as a string (lossy where not UTF-8).
pub(crate) fn text(v: Val) -> String {
    String::from_utf8(v.into_bytes()).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// A count a statement returned, as a `u32` (clamped).
pub(crate) fn count(v: i64) -> u32 {
    u32::try_from(v.max(0)).unwrap_or(u32::MAX)
}

impl SqlBackend {
    /// Opens the pool, creates or checks the tables ([`migrate`](Self::migrate)),
    /// and starts the sweeper (and on Postgres the release listener).
    pub async fn connect(config: SqlConfig) -> Result<Self, LockError> {
        let kind = config.dialect.kind();
        if config.dialect == Dialect::Sqlite {
            check_sqlite_dir(&config.database)?;
        }
        let opened = Db::open(&config).and_then(|db| {
            let line_db = db.open_line(&config)?;
            Ok((db, line_db))
        });
        let (db, line_db) = opened.map_err(|e| match e {
            sqlx::Error::Configuration(e) => LockError::config("url", e.to_string()),
            e => backend_error(kind, "connect", None, e),
        })?;
        // Backends of this process on one database and table share their
        // waiters, so a release wakes the next in line whichever backend
        // it waits on.
        let shared_key =
            (config.database != ":memory:").then(|| format!("{}\0{}\0{}", kind, config.database, config.table));
        let backend = SqlBackend {
            inner: Arc::new(Inner {
                kind,
                sql: Statements::new(config.dialect, &config.table),
                ksql: KindStatements::new(config.dialect, &config.table),
                renew_db: db.renewals(),
                db,
                line_db,
                waiters: Waiters::shared(shared_key),
                places: Arc::default(),
                live: Default::default(),
                #[cfg(feature = "mysql")]
                tokens: std::sync::OnceLock::new(),
                #[cfg(feature = "postgres")]
                wait_list: std::sync::OnceLock::new(),
                stop: CancellationToken::new(),
                config,
            }),
        };
        // A direct connection first: the pool would report a refused
        // connection or a bad password only as a timeout, this says why.
        Db::probe(&backend.inner.config)
            .await
            .map_err(|e| backend_error(kind, "connect", None, e))?;
        backend.migrate().await?;
        let inner = &backend.inner;
        if let Some(interval) = inner.config.sweep_interval {
            let mut sweeps = vec![
                inner.sql.sweep.clone(),
                inner.sql.sweep_waiters.clone(),
                inner.ksql.sweep.clone(),
            ];
            sweeps.extend(inner.sql.sweep_live.clone());
            crate::sweeper::spawn(
                inner.db.clone(),
                sweeps,
                interval,
                inner.config.sweep_batch,
                inner.stop.clone(),
            );
        }
        let renewal = crate::wait::queue::Renewal {
            db: inner.line_db.clone(),
            sql: inner.sql.clone(),
            places: inner.places.clone(),
            waiters: inner.waiters.clone(),
        };
        crate::wait::queue::spawn_renewer(renewal, inner.config.queue_lease, inner.stop.clone());
        #[cfg(feature = "postgres")]
        if inner.config.dialect == Dialect::Postgres {
            use std::str::FromStr;
            let options = sqlx::postgres::PgConnectOptions::from_str(&inner.config.database)
                .map_err(|e| backend_error(kind, "connect", None, e))?
                .application_name("lockkit-listener");
            inner
                .waiters
                .listen_pg(options.clone(), inner.config.connect_timeout, inner.sql.channel());
            if let (Some(join), Some(leave)) = (&inner.sql.wait_join, &inner.sql.wait_leave) {
                let statements = crate::wait::waitlist::Statements {
                    join: join.clone(),
                    leave: leave.clone(),
                    live: inner.sql.live_take.clone(),
                    key: inner.live.key(),
                    held: inner.live.held_flag(),
                };
                let list = crate::wait::waitlist::WaitList::spawn(
                    options.application_name("lockkit-waitlist"),
                    inner.config.connect_timeout,
                    statements,
                    inner.stop.clone(),
                );
                let _ = inner.wait_list.set(list);
            }
        }
        Ok(backend)
    }

    /// The settings this backend runs with.
    pub fn config(&self) -> &SqlConfig {
        &self.inner.config
    }
}

/// SQLite creates a missing database file but not its directory; say so
/// instead of the driver's "unable to open database file".
fn check_sqlite_dir(database: &str) -> Result<(), LockError> {
    if database == ":memory:" {
        return Ok(());
    }
    let path = std::path::Path::new(database);
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    let bad = |why: &str| LockError::config("url path", format!("{database:?}: {why}"));
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(bad(&format!("{} is not a directory", dir.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(bad(&format!(
            "the directory {} does not exist (SQLite creates the file, not its directory)",
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => {
            Err(bad(&format!("a part of {} is not a directory", dir.display())))
        }
        Err(e) => Err(bad(&format!("cannot use the directory {}: {e}", dir.display()))),
    }
}
