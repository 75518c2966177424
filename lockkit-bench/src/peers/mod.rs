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
#[cfg(all(feature = "peers", feature = "redis"))]
mod rslock;
#[cfg(all(feature = "peers", feature = "zookeeper"))]
mod zk;

use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;

use crate::workloads::BenchError;

/// The lease every peer is given: the ttl lockkit runs with in the
/// workloads (a peer's default, e.g. distributed-lock-redis's 30 s, would
/// make a stall longer, not a cycle cheaper).
#[cfg(feature = "peers")]
pub(crate) const TTL: Duration = Duration::from_secs(10);

/// A lock held through a [`Locker`]; `release` gives it back.
#[async_trait]
pub trait Held: Send {
    /// Releases the lock (waits for the library's release to return).
    async fn release(self: Box<Self>) -> Result<(), BenchError>;
}

/// One connected client of a lock library (lockkit or a peer): the
/// contenders of w2 and the cycles of w1 go through this.
#[async_trait]
pub trait Locker: Send + Sync {
    /// Acquires `name`, waiting while another client holds it.
    async fn lock(&self, name: &str) -> Result<Box<dyn Held>, BenchError>;
}

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
        let parsed = lockkit::url::ConnectUrl::parse(url)?;
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
    let Ok(parsed) = lockkit::url::ConnectUrl::parse(url) else {
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
pub fn redis_node_urls(url: &lockkit::url::ConnectUrl) -> Vec<String> {
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

/// Retries `attempt` until it returns a hold, pausing `first` after the first
/// miss and doubling the pause up to `most`: the loop a library whose
/// acquire returns at once when busy runs in its own waiting kinds.
#[cfg_attr(not(all(feature = "peers", feature = "redis")), allow(dead_code))]
pub async fn retry_with_backoff<F, Fut>(
    first: Duration,
    most: Duration,
    mut attempt: F,
) -> Result<Box<dyn Held>, BenchError>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Option<Box<dyn Held>>, BenchError>> + Send,
{
    let mut pause = first;
    loop {
        if let Some(held) = attempt().await? {
            return Ok(held);
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(most);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    struct Nothing;

    #[async_trait]
    impl Held for Nothing {
        async fn release(self: Box<Self>) -> Result<(), BenchError> {
            Ok(())
        }
    }

    #[test]
    fn node_urls_keep_auth_and_drop_params() {
        let one = lockkit::url::ConnectUrl::parse("redis://u:pw@127.0.0.1:16379/2?ttl=5s").unwrap();
        assert_eq!(redis_node_urls(&one), ["redis://u:pw@127.0.0.1:16379/2"]);
        let five = lockkit::url::ConnectUrl::parse("redlock://127.0.0.1:1,127.0.0.1:2,h3").unwrap();
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

    #[tokio::test]
    async fn backoff_doubles_to_the_cap_until_a_hold() {
        let tries = Arc::new(AtomicU32::new(0));
        let started = std::time::Instant::now();
        let t = tries.clone();
        retry_with_backoff(Duration::from_millis(10), Duration::from_millis(40), move || {
            let t = t.clone();
            async move { Ok((t.fetch_add(1, Ordering::SeqCst) == 4).then(|| Box::new(Nothing) as Box<dyn Held>)) }
        })
        .await
        .unwrap();
        assert_eq!(tries.load(Ordering::SeqCst), 5);
        // Pauses 10 + 20 + 40 + 40 ms after the four misses.
        assert!(started.elapsed() >= Duration::from_millis(110));
        assert!(started.elapsed() < Duration::from_millis(1_000));
    }
}
