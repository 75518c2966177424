//! Floors: the fewest round trips each backend needs for one acquire +
//! release, sent with the same client crate as the backend and no lock logic
//! (no owner check on acquire, no re-entry, no token, no waiter bookkeeping).
//! Results read as ratios to these, measured in the same run, interleaved.
//!
//! | backend | floor cycle | round trips |
//! |---|---|---|
//! | Redis | `SET name v NX PX ttl`, Lua compare-and-delete (`EVALSHA`) | 2 |
//! | Redlock | the same, to every node at once | 2 (parallel) |
//! | MySQL / Postgres / SQLite | `INSERT` a row of the lock table's shape, `DELETE` it | 2 |
//! | ZooKeeper | create an ephemeral node, delete it | 2 |

mod cycle;
#[cfg(feature = "redis")]
mod redis;
#[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
mod sql;
#[cfg(feature = "zookeeper")]
mod zk;

pub use self::cycle::Floor;
use crate::error::BenchError;

/// Connections to every Redis node of a URL (shared with `crate::cost`).
#[cfg(feature = "redis")]
pub use self::redis::connect_nodes as redis_nodes;

/// The floor for a URL's backend, with its own connections; `None` where
/// there is none (the in-process memory backend, Redis cluster and
/// sentinel, backends this build leaves out).
pub async fn floor_for(url: &str) -> Result<Option<Box<dyn Floor>>, BenchError> {
    #[allow(unused_mut)] // only the SQL and ZooKeeper floors take parameters
    let mut parsed = lockkit::raw::ConnectUrl::parse(url)?;
    match parsed.scheme.as_str() {
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redlock" => Ok(Some(Box::new(redis::RedisFloor::connect(&parsed).await?))),
        #[cfg(any(feature = "mysql", feature = "postgres", feature = "sqlite"))]
        "mysql" | "mariadb" | "postgres" | "postgresql" | "sqlite" => {
            Ok(Some(Box::new(sql::SqlFloor::connect(&mut parsed).await?)))
        }
        #[cfg(feature = "zookeeper")]
        "zk" | "zookeeper" => Ok(Some(Box::new(zk::ZkFloor::connect(&mut parsed).await?))),
        _ => Ok(None),
    }
}
