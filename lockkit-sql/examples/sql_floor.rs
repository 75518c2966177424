//! Uncontended acquire + release per second through the backend, beside the
//! raw floor: one `INSERT` + one `DELETE` on a table of the same shape, sent
//! with the same driver (sqlx) from a pool of the same size. The two run in
//! alternating slices of 100 cycles, so a busy machine slows both alike.
//!
//! ```text
//! cargo run --release -p lockkit-sql --features mysql,postgres,sqlite --example sql_floor -- URL [ITERATIONS]
//! cargo run --release -p lockkit-sql --features sqlite --example sql_floor -- sqlite:///tmp/floor.db 5000
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
    let mut floor = Floor::open(dialect, &database, &name).await?;
    for _ in 0..iterations / 10 {
        cycle().await?;
    }
    floor.run(iterations / 10).await?;
    let (mut lock_time, mut floor_time) = (Duration::ZERO, Duration::ZERO);
    let mut done = 0;
    while done < iterations {
        let slice = SLICE.min(iterations - done);
        let started = Instant::now();
        for _ in 0..slice {
            cycle().await?;
        }
        lock_time += started.elapsed();
        let started = Instant::now();
        floor.run(slice).await?;
        floor_time += started.elapsed();
        done += slice;
    }
    let lock_rate = f64::from(iterations) / lock_time.as_secs_f64();
    let floor_rate = f64::from(iterations) / floor_time.as_secs_f64();
    println!(
        "{}: lockkit acquire+release {lock_rate:.0}/s, raw INSERT+DELETE {floor_rate:.0}/s, ratio {:.2} ({iterations} iterations, 1 connection)",
        dialect.kind(),
        lock_rate / floor_rate
    );
    Ok(())
}

const SLICE: u32 = 100;

/// The same table shape, written and deleted by plain statements.
enum Floor {
    #[cfg(feature = "mysql")]
    Mysql(sqlx::MySqlPool, Vec<u8>),
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool, Vec<u8>),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool, Vec<u8>),
}

const OWNER: &[u8] = b"floor-owner";

impl Floor {
    async fn open(dialect: Dialect, database: &str, name: &str) -> Result<Self, Box<dyn std::error::Error>> {
        let name = format!("{name}/raw").into_bytes();
        Ok(match dialect {
            #[cfg(feature = "mysql")]
            Dialect::Mysql => Floor::Mysql(
                sqlx::mysql::MySqlPoolOptions::new()
                    .max_connections(1)
                    .connect(database)
                    .await?,
                name,
            ),
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Floor::Postgres(
                sqlx::postgres::PgPoolOptions::new()
                    .max_connections(1)
                    .connect(database)
                    .await?,
                name,
            ),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => Floor::Sqlite(
                sqlx::sqlite::SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(
                        sqlx::sqlite::SqliteConnectOptions::new()
                            .filename(database)
                            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
                            .synchronous(sqlx::sqlite::SqliteSynchronous::Full),
                    )
                    .await?,
                name,
            ),
            #[allow(unreachable_patterns)]
            other => return Err(format!("built without the {} feature", other.kind()).into()),
        })
    }

    /// `n` INSERT + DELETE pairs.
    async fn run(&mut self, n: u32) -> Result<(), sqlx::Error> {
        for _ in 0..n {
            match self {
                #[cfg(feature = "mysql")]
                Floor::Mysql(pool, name) => {
                    sqlx::query(
                        "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
                         VALUES (?, ?, 1, 1, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6))",
                    )
                    .bind(&*name)
                    .bind(OWNER)
                    .bind(30_000_000i64)
                    .execute(&*pool)
                    .await?;
                    sqlx::query("DELETE FROM lockkit_floor WHERE name = ? AND owner = ?")
                        .bind(&*name)
                        .bind(OWNER)
                        .execute(&*pool)
                        .await?;
                }
                #[cfg(feature = "postgres")]
                Floor::Postgres(pool, name) => {
                    sqlx::query(
                        "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
                         VALUES ($1, $2, 1, 1, now() + $3::int8 * interval '1 microsecond', now())",
                    )
                    .bind(&*name)
                    .bind(OWNER)
                    .bind(30_000_000i64)
                    .execute(&*pool)
                    .await?;
                    sqlx::query("DELETE FROM lockkit_floor WHERE name = $1 AND owner = $2")
                        .bind(&*name)
                        .bind(OWNER)
                        .execute(&*pool)
                        .await?;
                }
                #[cfg(feature = "sqlite")]
                Floor::Sqlite(pool, name) => {
                    sqlx::query(
                        "INSERT INTO lockkit_floor (name, owner, hold_count, token, expires_at, acquired_at) \
                         VALUES (?1, ?2, 1, 1, ?3, 0)",
                    )
                    .bind(&*name)
                    .bind(OWNER)
                    .bind(30_000_000i64)
                    .execute(&*pool)
                    .await?;
                    sqlx::query("DELETE FROM lockkit_floor WHERE name = ?1 AND owner = ?2")
                        .bind(&*name)
                        .bind(OWNER)
                        .execute(&*pool)
                        .await?;
                }
            }
        }
        Ok(())
    }
}
