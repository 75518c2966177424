//! [`SqlConfig`]: what a `mysql://`, `postgres://` or `sqlite://` URL says
//! — its settings and their defaults; reading them from a URL is in
//! `parse.rs`.

mod parse;

use std::fmt;
use std::time::Duration;

use lockkit_core::LockError;
use lockkit_core::raw::redact;

/// The database a backend talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// MySQL 8 or MariaDB 10.5 and later (`mysql://`, `mariadb://`).
    Mysql,
    /// PostgreSQL 12 and later (`postgres://`, `postgresql://`).
    Postgres,
    /// SQLite 3.42 and later, bundled (`sqlite://PATH`, `sqlite::memory:`).
    Sqlite,
}

/// Default lock table name.
pub const DEFAULT_TABLE: &str = "lockkit_locks";
/// Default pause between two sweeps of expired rows.
pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(15);
/// Default number of rows one sweep statement deletes at most.
pub const DEFAULT_SWEEP_BATCH: u64 = 100;
/// Default connection pool size (MySQL, Postgres; SQLite uses 4).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;
/// Default bound on waiting for a pooled connection (or a new one).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default lease of a place in a name's line of waiters (renewed every
/// third of it while the waiter waits): a waiter that dies leaves the line
/// within this long.
pub const DEFAULT_QUEUE_LEASE: Duration = Duration::from_secs(5);
/// Default lease of a process's liveness row on SQLite (renewed every
/// quarter of it while the process waits): a waiter whose process died is
/// skipped within this long. MySQL/MariaDB and Postgres tell at once.
pub const DEFAULT_LIVE_LEASE: Duration = Duration::from_millis(400);
/// Default pause between two pings of each connection that carries
/// session-mode holds (`mode=session`): a connection lost or killed is
/// noticed within about this long, and its holds' lost signals fire.
pub const DEFAULT_PING_INTERVAL: Duration = Duration::from_secs(1);

/// How a SQL backend keeps its holds (`?mode=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Mode {
    /// The lock table (`mode=table`, the default): holds are rows with a
    /// ttl, kept across connections and visible to every client.
    #[default]
    Table,
    /// Session locks (`mode=session`; MariaDB `GET_LOCK`, Postgres advisory
    /// locks): a hold lives on a server connection and ends with it. See
    /// `lockkit_sql_session::SessionBackend`. Not on SQLite.
    Session,
}

/// Whether a connection pooler stands between lockkit and a Postgres
/// server (`?pooler=`), and how it pools. A transaction or statement
/// pooler (PgBouncer `pool_mode=transaction` / `statement`) hands a server
/// session to other clients between transactions, so nothing tied to a
/// server session survives a statement: session locks, `LISTEN`, named
/// prepared statements.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Pooler {
    /// Found out at connect (`pooler=auto`, the default; Postgres only):
    /// a probe on two connections (see `lockkit_sql::raw::detect_pooler`).
    #[default]
    Auto,
    /// No pooler, or one that keeps a client on one server session
    /// (PgBouncer `pool_mode=session`) (`pooler=none`): no probe.
    None,
    /// A transaction pooler (`pooler=transaction`).
    Transaction,
    /// A statement pooler (`pooler=statement`).
    Statement,
}

impl Pooler {
    /// What a message calls this pooling: `transaction pooling`,
    /// `statement pooling`, or `no pooling`.
    pub fn describe(self) -> &'static str {
        match self {
            Pooler::Transaction => "transaction pooling",
            Pooler::Statement => "statement pooling",
            Pooler::Auto | Pooler::None => "no pooling",
        }
    }

    /// Whether server sessions are shared between clients.
    pub fn shares_sessions(self) -> bool {
        matches!(self, Pooler::Transaction | Pooler::Statement)
    }
}

/// The longest table name accepted: room for the `_tokens` / `_token_seq`
/// / `_waiters` companions within every dialect's identifier limit.
pub const MAX_TABLE_LEN: usize = 48;

/// The settings of a SQL backend.
///
/// Built from a URL by [`SqlConfig::from_url`], which takes these query
/// parameters (each optional):
///
/// | parameter | default | meaning |
/// |---|---|---|
/// | `table` | `lockkit_locks` | lock table; letters, digits, `_`, at most 48 |
/// | `sweep_interval` | `15s` | pause between sweeps of expired rows (`0s`: no sweeper) |
/// | `sweep_batch` | `100` | rows deleted per sweep statement |
/// | `max_connections` | `10` (SQLite `4`) | connection pool size; lock operations use all but one (2 to 9) or two (10 or more), which are kept for lease renewals |
/// | `connect_timeout` | `5s` | bound on getting a connection |
/// | `max_backoff` | `250ms` (Postgres `1s`) | longest sleep of a waiter between two attempts |
/// | `create_table` | `true` | create missing tables; `false` only checks them |
/// | `memo` | none | text stored with every hold this client takes (who/why) |
/// | `queue_lease` | `5s` | lease of a waiter's place in line (`fair`, the default); the row goes within it once nobody renews it |
/// | `live_lease` | `400ms` | SQLite: lease of a process's liveness row; a waiter whose process died is skipped within it |
/// | `mode` | `table` | `table`: the lock table; `session`: session locks on server connections ([`Mode`]; MySQL/MariaDB, Postgres) |
/// | `ping_interval` | `1s` | `mode=session`: pause between pings of each connection that carries holds |
/// | `pooler` | `auto` | Postgres: `auto` (probe at connect), `none`, `transaction` or `statement`: a connection pooler in between ([`Pooler`]); the session mode refuses the last two, the table mode then keeps no state on server sessions |
///
/// `Debug` hides the password of the database URL.
#[derive(Clone)]
pub struct SqlConfig {
    /// The database.
    pub dialect: Dialect,
    /// The database URL for the driver, without lockkit's query parameters.
    /// For SQLite, the file path or `:memory:`.
    pub database: String,
    /// The lock table, validated by [`validate_table`].
    pub table: String,
    /// Pause between sweeps; `None` disables the sweeper.
    pub sweep_interval: Option<Duration>,
    /// Rows one sweep statement deletes at most.
    pub sweep_batch: u64,
    /// Connection pool size (a few are kept for lease renewals: see the
    /// table above).
    pub max_connections: u32,
    /// Bound on getting a connection from the pool.
    pub connect_timeout: Duration,
    /// The longest a waiting `lock` sleeps between two attempts (it sleeps
    /// less when the holder's lease ends sooner, and on Postgres it is woken
    /// by the release itself).
    pub max_backoff: Duration,
    /// Create missing tables (otherwise only check them).
    pub create_table: bool,
    /// Stored in the `memo` column of each hold this client takes.
    pub memo: Option<String>,
    /// The lease of a waiter's row in `<table>_waiters`, by the database's
    /// clock; renewed every third of it (one statement for all of a
    /// backend's waiters) while the waiter waits. A waiter whose process
    /// died is passed over at once where the server tells (MySQL, Postgres)
    /// or after [`live_lease`](Self::live_lease) (SQLite); this lease bounds
    /// a place that carries no liveness key (an older lockkit's).
    pub queue_lease: Duration,
    /// SQLite: the lease of this backend's liveness row (`<table>_live`),
    /// renewed every quarter of it while it has waiters in line. Another
    /// process skips the places of a backend whose row expired: a waiter
    /// whose process died costs the next one at most this long, and a
    /// live process whose renewals stall longer is passed over until they
    /// resume (its places are kept). MySQL/MariaDB and Postgres do not use
    /// it: the server sees the connection that carries the key close.
    pub live_lease: Duration,
    /// Where holds live: the lock table or server sessions.
    pub mode: Mode,
    /// `mode=session`: the pause between two pings of each connection that
    /// carries holds (a lost connection is noticed within about this long).
    pub ping_interval: Duration,
    /// Postgres: the connection pooler in between, or [`Pooler::Auto`] to
    /// probe for one at connect.
    pub pooler: Pooler,
}

impl fmt::Debug for SqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlConfig")
            .field("dialect", &self.dialect)
            .field("database", &redact(&self.database))
            .field("table", &self.table)
            .field("sweep_interval", &self.sweep_interval)
            .field("sweep_batch", &self.sweep_batch)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_backoff", &self.max_backoff)
            .field("create_table", &self.create_table)
            .field("memo", &self.memo)
            .field("queue_lease", &self.queue_lease)
            .field("live_lease", &self.live_lease)
            .field("mode", &self.mode)
            .field("ping_interval", &self.ping_interval)
            .field("pooler", &self.pooler)
            .finish()
    }
}

impl SqlConfig {
    /// Defaults for `dialect` and a driver URL (or SQLite path).
    pub fn new(dialect: Dialect, database: impl Into<String>) -> Self {
        SqlConfig {
            dialect,
            database: database.into(),
            table: DEFAULT_TABLE.to_owned(),
            sweep_interval: Some(DEFAULT_SWEEP_INTERVAL),
            sweep_batch: DEFAULT_SWEEP_BATCH,
            max_connections: match dialect {
                Dialect::Sqlite => 4,
                _ => DEFAULT_MAX_CONNECTIONS,
            },
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_backoff: match dialect {
                // Releases wake waiters through LISTEN/NOTIFY; polling is the fallback.
                Dialect::Postgres => Duration::from_secs(1),
                _ => Duration::from_millis(250),
            },
            create_table: true,
            memo: None,
            queue_lease: DEFAULT_QUEUE_LEASE,
            live_lease: DEFAULT_LIVE_LEASE,
            mode: Mode::Table,
            ping_interval: DEFAULT_PING_INTERVAL,
            pooler: Pooler::Auto,
        }
    }

    /// The companion table holding the token counters (MySQL, SQLite).
    pub fn tokens_table(&self) -> String {
        format!("{}_tokens", self.table)
    }
}

/// Checks a table name: 1 to [`MAX_TABLE_LEN`] ASCII letters, digits and
/// underscores, not starting with a digit. Anything else — quotes, dots,
/// spaces, `;` — is refused, so a name can never change the SQL it is
/// spliced into.
pub fn validate_table(table: &str) -> Result<(), LockError> {
    let ok = !table.is_empty()
        && table.len() <= MAX_TABLE_LEN
        && table.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !table.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(LockError::config(
            "query parameter table",
            format!(
                "{table:?} is not a table name: use 1 to {MAX_TABLE_LEN} ASCII letters, digits and underscores, \
                 not starting with a digit"
            ),
        ))
    }
}
