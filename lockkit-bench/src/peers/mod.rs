//! Peers: the Rust lock libraries a user would pick instead of lockkit,
//! measured beside it and the floor on w1 and w2 (cargo feature `peers`).
//!
//! Each is used the way its README shows. Where a library's acquire does not
//! wait (it returns at once when the name is busy), the peer retries the way
//! the library itself does elsewhere and its rows carry a note saying so.
//!
//! | peer | backends | acquire | release |
//! |---|---|---|---|
//! | `rslock` | Redis, Redlock (one or N masters) | `LockManager::acquire` (loops over `lock`, which tries 3 times with a random 0–200 ms pause) | `LockGuard::release` |
//! | `distributed-lock-redis` | Redis, Redlock | `try_acquire` retried with a 10 ms pause doubling to 200 ms (its `acquire` tries once) | `RedisLockHandle::release` |
//! | `zookeeper-client` | ZooKeeper | `Client::lock` with a Curator prefix (sequential node, watch on the predecessor) | drop of the lock client (deletes its node in the background) |
//!
//! `distributed-lock-mysql` 0.2 is not among them: it depends on sqlx 0.8
//! (default features, `runtime-tokio-native-tls`) beside the workspace's sqlx
//! 0.9, and Cargo's lock file then has both `sqlx-sqlite` versions, whose
//! `libsqlite3-sys` must be one (`links = "sqlite3"`): the resolver moves
//! lockkit-sql's SQLite down from `libsqlite3-sys` 0.37 to 0.30 for the
//! whole workspace. A bench feature may not do that.

#[cfg(all(feature = "peers", feature = "redis"))]
mod dlock_redis;
mod locker;
#[cfg(all(feature = "peers", feature = "redis"))]
mod rslock;
#[cfg(all(feature = "peers", feature = "zookeeper"))]
mod zk;

pub use self::locker::{Held, Locker};
use crate::error::BenchError;

/// A peer library that can serve a backend URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    /// `rslock`: Redlock over one or N Redis masters.
    Rslock,
    /// `distributed-lock-redis`: Redlock over one or N Redis servers (fred).
    DistributedLockRedis,
    /// `zookeeper-client`'s own lock recipe.
    ZookeeperClient,
}

impl Peer {
    /// The crate's name, the `impl` of its result rows.
    pub fn name(self) -> &'static str {
        match self {
            Peer::Rslock => "rslock",
            Peer::DistributedLockRedis => "distributed-lock-redis",
            Peer::ZookeeperClient => "zookeeper-client",
        }
    }

    /// How the library waits for a busy name, for the rows' `note`: only
    /// for the ones that do not wait for a release but poll.
    pub fn note(self) -> Option<&'static str> {
        match self {
            Peer::Rslock => Some("polls: acquire retries lock(), 3 tries a call, random 0-200 ms pauses"),
            Peer::DistributedLockRedis => {
                Some("cannot wait (acquire tries once); try_acquire retried, 10 ms pause doubling to 200 ms")
            }
            Peer::ZookeeperClient => None,
        }
    }

    /// Connects one client of this library (its own connections) to `url`.
    pub async fn connect(self, url: &str) -> Result<Box<dyn Locker>, BenchError> {
        #[allow(unused_variables)] // without the backends' features
        let parsed = lockkit::raw::ConnectUrl::parse(url)?;
        match self {
            #[cfg(all(feature = "peers", feature = "redis"))]
            Peer::Rslock => Ok(Box::new(rslock::RslockPeer::connect(&redis_node_urls(&parsed)).await?)),
            #[cfg(all(feature = "peers", feature = "redis"))]
            Peer::DistributedLockRedis => Ok(Box::new(
                dlock_redis::DlockRedisPeer::connect(&redis_node_urls(&parsed)).await?,
            )),
            #[cfg(all(feature = "peers", feature = "zookeeper"))]
            Peer::ZookeeperClient => Ok(Box::new(zk::ZkRecipePeer::connect(url).await?)),
            #[allow(unreachable_patterns)]
            other => Err(format!("built without {} (features peers and its backend's)", other.name()).into()),
        }
    }
}

/// The peers this build has for a URL's backend: none for lockkit's own
/// variants (`fair=false`), for MySQL, SQLite, PostgreSQL, memory, Redis
/// cluster and sentinel.
pub fn peers_for(url: &str) -> Vec<Peer> {
    let Ok(parsed) = lockkit::raw::ConnectUrl::parse(url) else {
        return Vec::new();
    };
    if !parsed.options.fair_value() {
        return Vec::new();
    }
    let all: &[Peer] = match parsed.scheme.as_str() {
        "redis" | "redlock" => &[Peer::Rslock, Peer::DistributedLockRedis],
        "zk" | "zookeeper" => &[Peer::ZookeeperClient],
        _ => &[],
    };
    all.iter()
        .copied()
        .filter(|p| cfg!(feature = "peers") && built(*p))
        .collect()
}

/// Whether this build has `peer`'s backend feature.
fn built(peer: Peer) -> bool {
    match peer {
        Peer::Rslock | Peer::DistributedLockRedis => cfg!(feature = "redis"),
        Peer::ZookeeperClient => cfg!(feature = "zookeeper"),
    }
}

/// `redis://[user:password@]host:port[/db]` for every host of a `redis://`
/// or `redlock://` URL (the database only for a single host), without
/// lockkit's query parameters.
#[cfg_attr(not(all(feature = "peers", feature = "redis")), allow(dead_code))]
pub fn redis_node_urls(url: &lockkit::raw::ConnectUrl) -> Vec<String> {
    let user = url.url.username();
    let auth = match (user, url.url.password()) {
        ("", None) => String::new(),
        (user, Some(pw)) => format!("{user}:{pw}@"),
        (user, None) => format!("{user}@"),
    };
    let db = url.url.path().trim_start_matches('/');
    let db = if url.hosts.len() == 1 && !db.is_empty() {
        format!("/{db}")
    } else {
        String::new()
    };
    url.hosts
        .iter()
        .map(|h| format!("redis://{auth}{}:{}{db}", h.host, h.port.unwrap_or(6379)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_urls_keep_auth_and_drop_params() {
        let one = lockkit::raw::ConnectUrl::parse("redis://u:pw@127.0.0.1:16379/2?ttl=5s").unwrap();
        assert_eq!(redis_node_urls(&one), ["redis://u:pw@127.0.0.1:16379/2"]);
        let five = lockkit::raw::ConnectUrl::parse("redlock://127.0.0.1:1,127.0.0.1:2,h3").unwrap();
        assert_eq!(
            redis_node_urls(&five),
            ["redis://127.0.0.1:1", "redis://127.0.0.1:2", "redis://h3:6379"]
        );
    }

    #[test]
    fn peers_skip_unfair_and_unknown_urls() {
        assert!(peers_for("memory://").is_empty());
        assert!(peers_for("redis://127.0.0.1:1?fair=false").is_empty());
        let redis = peers_for("redis://127.0.0.1:1");
        if cfg!(all(feature = "peers", feature = "redis")) {
            assert_eq!(redis, [Peer::Rslock, Peer::DistributedLockRedis]);
        } else {
            assert!(redis.is_empty());
        }
    }
}
