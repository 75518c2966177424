//! Uncontended acquire + release per second through the backend, beside the
//! raw floor: one `INSERT` + one `DELETE` on a table of the same shape, sent
//! with the same driver (sqlx) from a pool of the same size.
//!
//! ```text
//! cargo run --release -p lockkit-sql --features mysql,postgres,sqlite --example floor -- URL [ITERATIONS]
//! cargo run --release -p lockkit-sql --features sqlite --example floor -- sqlite:///tmp/floor.db 5000
//! ```

use std::time::{Duration, Instant};

use lockkit_core::backend::{AcquireRequest, Hold, LockBackend, ReleaseOutcome, TryAcquire};
use lockkit_core::url::ConnectUrl;
use lockkit_sql::{Dialect, SqlConfig};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let url = args.next().ok_or("usage: floor URL [ITERATIONS]")?;
    let iterations: u32 = args.next().map_or(Ok(2000), |n| n.parse())?;

    let mut parsed = ConnectUrl::parse(&url)?;
    let mut config = SqlConfig::from_url(&mut parsed)?;
    parsed.finish()?;
    config.table = "lockkit_floor".to_owned();
    config.max_connections = 1;
    let dialect = config.dialect;
    let database = config.database.clone();
    let backend = lockkit_sql::SqlBackend::connect(config).await?;

    let name = format!("floor/{:08x}", rand::random::<u32>());
    let owner = "floor-owner";
    let req = AcquireRequest {
        name: &name,
        owner,
        ttl: Duration::from_secs(30),
    };
    let cycle = || async {
        let TryAcquire::Acquired(lease) = backend.try_acquire(&req).await? else {
            return Err::<(), Box<dyn std::error::Error>>("busy: nothing else may use the floor table".into());
        };
        let hold = Hold {
            name: name.clone(),
            owner: owner.to_owned(),
            token: lease.token,
        };
        match backend.release(&hold).await? {
            ReleaseOutcome::Released { remaining: 0 } => Ok(()),
            other => Err(format!("release: {other:?}").into()),
        }
    };
    for _ in 0..iterations / 10 {
        cycle().await?;
    }
    let started = Instant::now();
    for _ in 0..iterations {
        cycle().await?;
    }
    let lock_rate = f64::from(iterations) / started.elapsed().as_secs_f64();

    let floor_rate = raw_floor(dialect, &database, &name, iterations).await?;
    println!(
        "{}: lockkit acquire+release {lock_rate:.0}/s, raw INSERT+DELETE {floor_rate:.0}/s, ratio {:.2} ({iterations} iterations, 1 connection)",
        dialect.kind(),
        lock_rate / floor_rate
    );
    Ok(())
}

/// The same table shape, written and deleted by plain statements.
async fn raw_floor(
    dialect: Dialect,
    database: &str,
    name: &str,
    iterations: u32,
) -> Result<f64, Box<dyn std::error::Error>> {
    let name = name.as_bytes().to_vec();
    let owner = b"floor-owner".to_vec();
    macro_rules! run {
        ($pool:expr, $insert:expr, $delete:expr) => {{
            let pool = $pool;
            let cycle = || async {
                sqlx::query($insert)
                    .bind(&name)
                    .bind(&owner)
                    .bind(30_000_000i64)
                    .execute(&pool)
                    .await?;
                sqlx::query($delete).bind(&name).bind(&owner).execute(&pool).await?;
                Ok::<(), sqlx::Error>(())
            };
            for _ in 0..iterations / 10 {
                cycle().await?;
            }
            let started = Instant::now();
            for _ in 0..iterations {
                cycle().await?;
            }
            Ok(f64::from(iterations) / started.elapsed().as_secs_f64())
        }};
    }
    match dialect {
        #[cfg(feature = "mysql")]
        Dialect::Mysql => run!(
            sqlx::mysql::MySqlPoolOptions::new()
                .max_connections(1)
                .connect(database)
                .await?,
            "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
             VALUES (?, ?, 1, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6))",
            "DELETE FROM lockkit_floor WHERE name = ? AND owner = ?"
        ),
        #[cfg(feature = "postgres")]
        Dialect::Postgres => run!(
            sqlx::postgres::PgPoolOptions::new()
                .max_connections(1)
                .connect(database)
                .await?,
            "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
             VALUES ($1, $2, 1, 1, now() + $3::int8 * interval '1 microsecond', now())",
            "DELETE FROM lockkit_floor WHERE name = $1 AND owner = $2"
        ),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => run!(
            sqlx::sqlite::SqlitePoolOptions::new()
                .max_connections(1)
                .connect_with(
                    sqlx::sqlite::SqliteConnectOptions::new()
                        .filename(database)
                        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                        .synchronous(sqlx::sqlite::SqliteSynchronous::Full)
                )
                .await?,
            "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
             VALUES (?1, ?2, 1, 1, ?3, 0)",
            "DELETE FROM lockkit_floor WHERE name = ?1 AND owner = ?2"
        ),
        #[allow(unreachable_patterns)]
        other => Err(format!("built without the {} feature", other.kind()).into()),
    }
}
