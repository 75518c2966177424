//! Reading a `mysql://`, `mariadb://`, `postgres://` or `sqlite://` URL
//! into a [`SqlConfig`] ([`SqlConfig::from_url`]): the scheme, the driver's
//! URL, and lockkit's query parameters, each checked against its bounds.

use std::ops::RangeInclusive;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::{ConnectUrl, decode_component};

use super::{Dialect, Mode, Pooler, SqlConfig, validate_table};

impl SqlConfig {
    /// Reads the settings from a parsed URL, taking this backend's query
    /// parameters from it (the caller fails on any left over). A parameter
    /// out of bounds is refused, naming it.
    pub fn from_url(url: &mut ConnectUrl) -> Result<Self, LockError> {
        let dialect = dialect_of(&url.scheme)?;
        let mut config = SqlConfig::new(dialect, driver_url(dialect, &url.url)?);
        if let Some(table) = url.take("table") {
            validate_table(&table)?;
            config.table = table;
        }
        if let Some(interval) = url.take_duration("sweep_interval")? {
            config.sweep_interval = (!interval.is_zero()).then_some(interval);
        }
        if let Some(batch) = take_count(url, "sweep_batch", 1..=10_000)? {
            config.sweep_batch = batch;
        }
        if let Some(max) = take_count(url, "max_connections", 1..=1000)? {
            config.max_connections = max as u32;
        }
        if let Some(timeout) = url.take_duration("connect_timeout")? {
            if timeout.is_zero() {
                return Err(LockError::config("query parameter connect_timeout", "must be above 0"));
            }
            config.connect_timeout = timeout;
        }
        let (ms, s) = (Duration::from_millis, Duration::from_secs);
        if let Some(backoff) = take_duration_in(url, "max_backoff", ms(1)..=s(60), "1ms and 60s")? {
            config.max_backoff = backoff;
        }
        if let Some(create) = url.take_bool("create_table")? {
            config.create_table = create;
        }
        if let Some(memo) = url.take("memo") {
            if memo.len() > 1024 {
                return Err(LockError::config("query parameter memo", "at most 1024 bytes"));
            }
            config.memo = Some(memo);
        }
        if let Some(lease) = take_duration_in(url, "queue_lease", ms(300)..=s(3600), "300ms and 1h")? {
            config.queue_lease = lease;
        }
        if let Some(lease) = take_duration_in(url, "live_lease", ms(100)..=s(60), "100ms and 60s")? {
            config.live_lease = lease;
        }
        if let Some(mode) = url.take("mode") {
            config.mode = mode_of(&mode, dialect)?;
        }
        if let Some(ping) = take_duration_in(url, "ping_interval", ms(10)..=s(300), "10ms and 300s")? {
            config.ping_interval = ping;
        }
        if let Some(pooler) = url.take("pooler") {
            config.pooler = pooler_of(&pooler, dialect)?;
        }
        Ok(config)
    }
}

/// The database a URL's scheme names.
fn dialect_of(scheme: &str) -> Result<Dialect, LockError> {
    match scheme {
        "mysql" | "mariadb" => Ok(Dialect::Mysql),
        "postgres" | "postgresql" => Ok(Dialect::Postgres),
        "sqlite" => Ok(Dialect::Sqlite),
        other => Err(LockError::config(
            "url scheme",
            format!("{other:?} is not a SQL scheme (mysql, mariadb, postgres, sqlite)"),
        )),
    }
}

/// The count parameter `key`, if given, within `bounds`.
fn take_count(url: &mut ConnectUrl, key: &str, bounds: RangeInclusive<u64>) -> Result<Option<u64>, LockError> {
    let Some(n) = url.take_u64(key)? else {
        return Ok(None);
    };
    if !bounds.contains(&n) {
        return Err(LockError::config(
            format!("query parameter {key}"),
            format!("must be between {} and {}, got {n}", bounds.start(), bounds.end()),
        ));
    }
    Ok(Some(n))
}

/// The duration parameter `key`, if given, within `bounds` (`says`: the
/// bounds as the error names them).
fn take_duration_in(
    url: &mut ConnectUrl,
    key: &str,
    bounds: RangeInclusive<Duration>,
    says: &str,
) -> Result<Option<Duration>, LockError> {
    let Some(d) = url.take_duration(key)? else {
        return Ok(None);
    };
    if !bounds.contains(&d) {
        return Err(LockError::config(
            format!("query parameter {key}"),
            format!("must be between {says}"),
        ));
    }
    Ok(Some(d))
}

/// Where holds live, as `?mode=` says: the session mode needs a server.
fn mode_of(mode: &str, dialect: Dialect) -> Result<Mode, LockError> {
    match (mode, dialect) {
        ("table", _) => Ok(Mode::Table),
        ("session", Dialect::Sqlite) => Err(LockError::config(
            "query parameter mode",
            "SQLite has no session locks: mode=session needs mysql://, mariadb:// or postgres://",
        )),
        ("session", _) => Ok(Mode::Session),
        (other, _) => Err(LockError::config(
            "query parameter mode",
            format!("{other:?} is not a mode: use table (the default) or session"),
        )),
    }
}

/// The pooler `?pooler=` names: only Postgres is probed for one.
fn pooler_of(pooler: &str, dialect: Dialect) -> Result<Pooler, LockError> {
    let parsed = match pooler {
        "auto" => Pooler::Auto,
        "none" => Pooler::None,
        "transaction" => Pooler::Transaction,
        "statement" => Pooler::Statement,
        other => {
            return Err(LockError::config(
                "query parameter pooler",
                format!("{other:?} is not a pooler: use auto (the default), none, transaction or statement"),
            ));
        }
    };
    if dialect != Dialect::Postgres && parsed != Pooler::Auto && parsed != Pooler::None {
        return Err(LockError::config(
            "query parameter pooler",
            "transaction and statement pooling are handled on Postgres only (postgres://)",
        ));
    }
    Ok(parsed)
}

/// The URL (or SQLite path) handed to the driver: the URL without its query.
fn driver_url(dialect: Dialect, url: &url::Url) -> Result<String, LockError> {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    match dialect {
        Dialect::Sqlite => {
            let text = url.as_str();
            let rest = text.split_once(':').map_or("", |(_, r)| r);
            let path = rest.strip_prefix("//").unwrap_or(rest);
            let path = decode_component(path, "url path")?;
            if path.is_empty() {
                return Err(LockError::config(
                    "url path",
                    "sqlite URLs name a file (sqlite://./locks.db, sqlite:///abs/path.db) or sqlite::memory:",
                ));
            }
            Ok(path)
        }
        Dialect::Mysql => {
            require_host(&url)?;
            // MySQL has no default database: without one every statement
            // would fail later with "No database selected".
            let segments: Vec<&str> = url.path_segments().map(|s| s.collect()).unwrap_or_default();
            if !matches!(segments.as_slice(), [db] if !db.is_empty()) {
                return Err(LockError::config(
                    "url path",
                    "a mysql:// URL names exactly one database: mysql://user:pass@host:3306/DATABASE",
                ));
            }
            // sqlx only knows `mysql://`; `mariadb://` is the same protocol.
            let text = url.as_str();
            Ok(match text.split_once("://") {
                Some((_, rest)) => format!("mysql://{rest}"),
                None => text.to_owned(),
            })
        }
        Dialect::Postgres => {
            require_host(&url)?;
            Ok(url.to_string())
        }
    }
}

/// A server URL must say which server: a default (`localhost`, `$PGHOST`)
/// would hide a URL that lost its host.
fn require_host(url: &url::Url) -> Result<(), LockError> {
    if url.host_str().is_none_or(str::is_empty) {
        return Err(LockError::config(
            "url host",
            format!(
                "a {}:// URL needs a host, e.g. {}://user:pass@127.0.0.1/DATABASE",
                url.scheme(),
                url.scheme()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{DEFAULT_LIVE_LEASE, DEFAULT_QUEUE_LEASE};

    fn config(url: &str) -> Result<SqlConfig, LockError> {
        let mut u = ConnectUrl::parse(url)?;
        let c = SqlConfig::from_url(&mut u)?;
        u.finish()?;
        Ok(c)
    }

    fn part(e: LockError) -> String {
        match e {
            LockError::InvalidConfig { part, .. } => part,
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn table_names() {
        assert!(validate_table("locks").is_ok());
        assert!(validate_table("_Locks_2").is_ok());
        for bad in [
            "",
            "locks; DROP TABLE x",
            "a.b",
            "a-b",
            "1abc",
            "l\"x",
            "l`x",
            "ü",
            &"x".repeat(49),
        ] {
            assert!(validate_table(bad).is_err(), "{bad:?} must be refused");
        }
        let e = config("mysql://u:p@h/db?table=locks;%20DROP%20TABLE%20x").unwrap_err();
        assert_eq!(part(e), "query parameter table");
    }

    #[test]
    fn parameters() {
        let c = config("postgres://u:secret@h:5/db?table=t1&sweep_interval=250ms&max_connections=3&memo=worker%201")
            .unwrap();
        assert_eq!(c.dialect, Dialect::Postgres);
        assert_eq!(c.database, "postgres://u:secret@h:5/db");
        assert_eq!(c.table, "t1");
        assert_eq!(c.sweep_interval, Some(Duration::from_millis(250)));
        assert_eq!(c.max_connections, 3);
        assert_eq!(c.memo.as_deref(), Some("worker 1"));
        assert!(!format!("{c:?}").contains("secret"), "Debug hides the password");
        let c = config("mariadb://u@h/db?sweep_interval=0s").unwrap();
        assert_eq!(c.database, "mysql://u@h/db");
        assert_eq!(c.sweep_interval, None);
        assert_eq!(
            part(config("mysql://h/db?max_connections=0").unwrap_err()),
            "query parameter max_connections"
        );
        assert_eq!(
            part(config("mysql://h/db?tabel=x").unwrap_err()),
            "query parameter tabel"
        );
        assert_eq!(config("mysql://h/db").unwrap().queue_lease, DEFAULT_QUEUE_LEASE);
        assert_eq!(
            config("mysql://h/db?queue_lease=2s").unwrap().queue_lease,
            Duration::from_secs(2)
        );
        assert_eq!(
            part(config("mysql://h/db?queue_lease=10ms").unwrap_err()),
            "query parameter queue_lease"
        );
        assert_eq!(config("sqlite://x.db").unwrap().live_lease, DEFAULT_LIVE_LEASE);
        assert_eq!(
            config("sqlite://x.db?live_lease=1s").unwrap().live_lease,
            Duration::from_secs(1)
        );
        assert_eq!(
            part(config("sqlite://x.db?live_lease=10ms").unwrap_err()),
            "query parameter live_lease"
        );
    }

    #[test]
    fn session_mode() {
        assert_eq!(config("mysql://h/db").unwrap().mode, Mode::Table);
        let c = config("mariadb://h/db?mode=session&ping_interval=250ms").unwrap();
        assert_eq!((c.mode, c.ping_interval), (Mode::Session, Duration::from_millis(250)));
        assert_eq!(config("postgres://h/db?mode=session").unwrap().mode, Mode::Session);
        assert_eq!(config("postgres://h/db?mode=table").unwrap().mode, Mode::Table);
        for bad in ["sqlite::memory:?mode=session", "mysql://h/db?mode=sessions"] {
            assert_eq!(part(config(bad).unwrap_err()), "query parameter mode", "{bad}");
        }
        assert_eq!(
            part(config("mysql://h/db?mode=session&ping_interval=1ms").unwrap_err()),
            "query parameter ping_interval"
        );
    }

    #[test]
    fn poolers() {
        assert_eq!(config("postgres://h/db").unwrap().pooler, Pooler::Auto);
        assert_eq!(
            config("postgres://h/db?pooler=transaction").unwrap().pooler,
            Pooler::Transaction
        );
        assert_eq!(
            config("postgres://h/db?pooler=statement").unwrap().pooler,
            Pooler::Statement
        );
        assert_eq!(config("mysql://h/db?pooler=none").unwrap().pooler, Pooler::None);
        for bad in ["postgres://h/db?pooler=yes", "mysql://h/db?pooler=transaction"] {
            assert_eq!(part(config(bad).unwrap_err()), "query parameter pooler", "{bad}");
        }
    }

    #[test]
    fn sqlite_paths() {
        assert_eq!(config("sqlite://./locks.db").unwrap().database, "./locks.db");
        assert_eq!(config("sqlite:///tmp/a%20b.db?ttl=5s").unwrap().database, "/tmp/a b.db");
        assert_eq!(config("sqlite::memory:").unwrap().database, ":memory:");
        assert_eq!(config("sqlite:locks.db").unwrap().database, "locks.db");
        assert_eq!(config("sqlite://locks.db").unwrap().max_connections, 4);
    }
}
