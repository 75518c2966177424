//! Finding out whether a connection pooler that shares server sessions
//! (PgBouncer `pool_mode=transaction` or `statement`) stands between this
//! client and Postgres: [`resolve_pooler`].
//!
//! The probe is conclusive when it finds one, never a false alarm: on
//! connection A it reads the server session's id (`pg_backend_pid()`)
//! outside any transaction; then connection B opens a transaction and
//! reads its own, and what A's session last ran (`pg_stat_activity`), and
//! A reads its own again while B's transaction keeps B's server session.
//! Straight to Postgres, every connection is one server session for its
//! whole life: B's id differs from A's, A's never changes, and A's session
//! runs nothing but A's statements. A transaction pooler gives A's idle
//! server session to the next client (PgBouncer hands out the most
//! recently used one first), so B sees A's id; or A comes back on another
//! session; or, under load, another client took A's session before B
//! could and gave it back before A's next statement — then the session's
//! last statement is that client's, not the probe's (A's statements carry
//! the probe's mark). A statement pooler refuses B's `BEGIN`. A pooler that
//! hides through all of that in a few rounds is taken for none, unless it
//! refuses a connection with the table mode's settings as a startup
//! parameter, as PgBouncer does; the session mode also checks every
//! grant's session (see `lockkit-sql-session`).
//! Only the simple protocol is used: it works through any pooler.

#[cfg(feature = "postgres")]
use crate::config::Dialect;
use crate::config::{Pooler, SqlConfig};

/// Rounds of the probe before it concludes that there is no pooler.
#[cfg(feature = "postgres")]
const ROUNDS: usize = 3;

/// The pooler `config` names, or the one the probe finds for
/// [`Pooler::Auto`] on Postgres ([`Pooler::None`] elsewhere). Bounded by
/// twice the connect timeout (two connections are opened).
pub async fn resolve_pooler(config: &SqlConfig) -> Result<Pooler, sqlx::Error> {
    match (config.dialect, config.pooler) {
        #[cfg(feature = "postgres")]
        (Dialect::Postgres, Pooler::Auto) => tokio::time::timeout(config.connect_timeout * 2, detect(&config.database))
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut)),
        (_, Pooler::Auto) => Ok(Pooler::None),
        (_, pooler) => Ok(pooler),
    }
}

/// The probe, on two connections of its own.
#[cfg(feature = "postgres")]
async fn detect(database: &str) -> Result<Pooler, sqlx::Error> {
    use sqlx::Connection;
    let mut a = sqlx::PgConnection::connect(database).await?;
    let mut b = sqlx::PgConnection::connect(database).await?;
    let found = rounds(&mut a, &mut b).await;
    // A statement pooler closes B after refusing its BEGIN.
    let _ = a.close().await;
    let _ = b.close().await;
    match found? {
        Pooler::None if refuses_settings(database).await => Ok(Pooler::Transaction),
        found => Ok(found),
    }
}

/// Whether the server refuses a connection that carries the table mode's
/// session settings ([`POSTGRES_SETTINGS`](super::open::POSTGRES_SETTINGS))
/// as a startup parameter, as PgBouncer does: a pooler the rounds missed
/// (every round can look direct under load) is found there, before the
/// pool's connections would fail. A pooler that passes or ignores them is
/// not found this way; a statement pooler always is, by its refusal of
/// `BEGIN`, so what is found here pools transactions.
#[cfg(feature = "postgres")]
async fn refuses_settings(database: &str) -> bool {
    use std::str::FromStr;

    use sqlx::ConnectOptions;
    let Ok(opts) = sqlx::postgres::PgConnectOptions::from_str(database) else {
        return false;
    };
    match opts.options(super::open::POSTGRES_SETTINGS).connect().await {
        Ok(conn) => {
            let _ = sqlx::Connection::close(conn).await;
            false
        }
        Err(e) => e.to_string().contains("unsupported startup parameter"),
    }
}

/// Up to [`ROUNDS`] rounds of the probe (see the module docs).
#[cfg(feature = "postgres")]
async fn rounds(a: &mut sqlx::PgConnection, b: &mut sqlx::PgConnection) -> Result<Pooler, sqlx::Error> {
    let probe = Probe::new();
    for _ in 0..ROUNDS {
        let first = probe.session_of(a).await?;
        if let Err(e) = simple(b, "BEGIN").await {
            return if refuses_transactions(&e) {
                Ok(Pooler::Statement)
            } else {
                Err(e)
            };
        }
        let seen = probe.look(b, first).await;
        let again = probe.session_of(a).await;
        let _ = simple(b, "ROLLBACK").await;
        if probe.shared(first, &seen?, again?) {
            return Ok(Pooler::Transaction);
        }
    }
    Ok(Pooler::None)
}

/// One probe's statements, each marked as the probe's.
#[cfg(feature = "postgres")]
struct Probe {
    /// In a comment of every statement: a session's last statement says
    /// whether the probe ran it.
    mark: String,
}

/// What connection B saw in its transaction.
#[cfg(feature = "postgres")]
struct Seen {
    /// B's server session.
    session: i32,
    /// The last statement of A's first session (`None`: not listed).
    last: Option<String>,
}

#[cfg(feature = "postgres")]
impl Probe {
    fn new() -> Self {
        Probe {
            mark: format!("lockkit pooler probe {:016x}", rand::random::<u64>()),
        }
    }

    /// The server session's id, read by a statement carrying the mark.
    async fn session_of(&self, conn: &mut sqlx::PgConnection) -> Result<i32, sqlx::Error> {
        use sqlx::Row;
        let text = format!("SELECT pg_backend_pid() /* {} */", self.mark);
        let row = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).fetch_one(&mut *conn).await?;
        row.try_get(0)
    }

    /// B's server session, and the last statement the session `first` ran.
    async fn look(&self, conn: &mut sqlx::PgConnection, first: i32) -> Result<Seen, sqlx::Error> {
        use sqlx::Row;
        let text = format!(
            "SELECT pg_backend_pid(), (SELECT query FROM pg_stat_activity WHERE pid = {first}) /* {} */",
            self.mark
        );
        let row = sqlx::raw_sql(sqlx::AssertSqlSafe(text)).fetch_one(&mut *conn).await?;
        Ok(Seen {
            session: row.try_get(0)?,
            last: row.try_get(1)?,
        })
    }

    /// Whether a round shows server sessions shared between clients: B on
    /// A's session, A on another, or A's session running a statement that
    /// is not the probe's. An empty text (`track_activities` off) or one
    /// the server withholds (`<insufficient privilege>`) shows nothing.
    fn shared(&self, first: i32, seen: &Seen, again: i32) -> bool {
        let foreign = |last: &str| !last.is_empty() && !last.starts_with('<') && !last.contains(&self.mark);
        seen.session == first || again != first || seen.last.as_deref().is_some_and(foreign)
    }
}

/// Whether `e` is a pooler's refusal of a transaction block (PgBouncer:
/// "transaction blocks not allowed in statement pooling mode").
#[cfg(feature = "postgres")]
fn refuses_transactions(e: &sqlx::Error) -> bool {
    e.to_string().contains("statement pooling")
}

/// Runs `text` in the simple protocol.
#[cfg(feature = "postgres")]
async fn simple(conn: &mut sqlx::PgConnection, text: &'static str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(text).execute(&mut *conn).await.map(drop)
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use sqlx::{Connection, PgConnection};

    use super::*;

    async fn connect(url: &str) -> PgConnection {
        PgConnection::connect(url).await.expect("connect")
    }

    /// Another client's statement: its session id, unmarked.
    async fn session_id(conn: &mut PgConnection) -> i32 {
        use sqlx::Row;
        let row = sqlx::raw_sql("SELECT pg_backend_pid()")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        row.try_get(0).unwrap()
    }

    /// Under load another client takes A's idle session before B can and
    /// gives it back before A's next statement: B is on another session
    /// and A back on its own, as straight to Postgres, but the session
    /// last ran the other client's statement, and the round says so.
    #[tokio::test]
    async fn a_session_another_client_used_between_the_reads_shows_the_pooler() {
        let Some(url) = lockkit_core::testkit::server_url("LOCKKIT_PGBOUNCER_URL") else {
            return;
        };
        let (mut a, mut b, mut c) = (connect(&url).await, connect(&url).await, connect(&url).await);
        let probe = Probe::new();
        // The pooler hands C the session A just left (the most recently
        // used first) unless another test's client takes it first.
        for _ in 0..50 {
            let first = probe.session_of(&mut a).await.unwrap();
            simple(&mut c, "BEGIN").await.unwrap();
            if session_id(&mut c).await != first {
                simple(&mut c, "ROLLBACK").await.unwrap();
                continue;
            }
            simple(&mut b, "BEGIN").await.unwrap();
            let seen = probe.look(&mut b, first).await.unwrap();
            simple(&mut c, "COMMIT").await.unwrap();
            let again = probe.session_of(&mut a).await.unwrap();
            simple(&mut b, "ROLLBACK").await.unwrap();
            if again != first {
                continue;
            }
            assert_ne!(seen.session, first, "C kept A's session through B's look");
            assert!(
                probe.shared(first, &seen, again),
                "A's session ran C's statement between A's reads: {:?}",
                seen.last
            );
            return;
        }
        panic!("the pooler never handed C and then A again the session A had left");
    }

    /// The probe finds the transaction pooler, and no pooler straight to
    /// Postgres: there a session's last statement is always the probe's.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_probe_finds_what_stands_in_between() {
        let (Some(pooled), Some(straight)) = (
            lockkit_core::testkit::server_url("LOCKKIT_PGBOUNCER_URL"),
            lockkit_core::testkit::server_url("LOCKKIT_POSTGRES_URL"),
        ) else {
            return;
        };
        for _ in 0..5 {
            assert_eq!(detect(&pooled).await.unwrap(), Pooler::Transaction);
            assert_eq!(detect(&straight).await.unwrap(), Pooler::None);
        }
    }

    /// PgBouncer refuses the table mode's settings as a startup parameter
    /// (the backstop of a probe whose rounds all looked direct); Postgres
    /// takes them.
    #[tokio::test]
    async fn the_tables_settings_are_refused_by_the_pooler_only() {
        let (Some(pooled), Some(straight)) = (
            lockkit_core::testkit::server_url("LOCKKIT_PGBOUNCER_URL"),
            lockkit_core::testkit::server_url("LOCKKIT_POSTGRES_URL"),
        ) else {
            return;
        };
        assert!(
            refuses_settings(&pooled).await,
            "PgBouncer refuses the options parameter"
        );
        assert!(!refuses_settings(&straight).await, "Postgres takes it");
    }
}
