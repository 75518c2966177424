//! Finding out whether a connection pooler that shares server sessions
//! (PgBouncer `pool_mode=transaction` or `statement`) stands between this
//! client and Postgres: [`resolve_pooler`].
//!
//! The probe is conclusive when it finds one, never a false alarm: on
//! connection A it reads the server session's id (`pg_backend_pid()`)
//! outside any transaction; then connection B opens a transaction and
//! reads its own, and A reads its own again while B's transaction keeps
//! B's server session. Straight to Postgres, every connection is one
//! server session for its whole life: B's id differs from A's and A's
//! never changes. A transaction pooler gives A's idle server session to
//! the next client (PgBouncer hands out the most recently used one first),
//! so B sees A's id; or A comes back on another session. A statement
//! pooler refuses B's `BEGIN`. Under load the pooler may hand out other
//! sessions and hide itself, so the probe runs a few rounds; the session
//! mode also checks every grant's session (see `lockkit-sql-session`).
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
    found
}

/// Up to [`ROUNDS`] rounds of the probe (see the module docs).
#[cfg(feature = "postgres")]
async fn rounds(a: &mut sqlx::PgConnection, b: &mut sqlx::PgConnection) -> Result<Pooler, sqlx::Error> {
    for _ in 0..ROUNDS {
        let first = session_id(a).await?;
        if let Err(e) = simple(b, "BEGIN").await {
            return if refuses_transactions(&e) {
                Ok(Pooler::Statement)
            } else {
                Err(e)
            };
        }
        let other = session_id(b).await;
        let again = session_id(a).await;
        let _ = simple(b, "ROLLBACK").await;
        let (other, again) = (other?, again?);
        if other == first || again != first {
            return Ok(Pooler::Transaction);
        }
    }
    Ok(Pooler::None)
}

/// Whether `e` is a pooler's refusal of a transaction block (PgBouncer:
/// "transaction blocks not allowed in statement pooling mode").
#[cfg(feature = "postgres")]
fn refuses_transactions(e: &sqlx::Error) -> bool {
    e.to_string().contains("statement pooling")
}

/// The server session's id.
#[cfg(feature = "postgres")]
async fn session_id(conn: &mut sqlx::PgConnection) -> Result<i32, sqlx::Error> {
    use sqlx::Row;
    let row = sqlx::raw_sql("SELECT pg_backend_pid()").fetch_one(&mut *conn).await?;
    row.try_get(0)
}

/// Runs `text` in the simple protocol.
#[cfg(feature = "postgres")]
async fn simple(conn: &mut sqlx::PgConnection, text: &'static str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(text).execute(&mut *conn).await.map(drop)
}
