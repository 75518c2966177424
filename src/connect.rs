//! `connect(url)`: one `match` over the URL scheme.

use lockkit_core::url::{ConnectUrl, Scheme};
use std::sync::Arc;

use lockkit_core::{LockBackend, LockClient, LockError, memory::MemoryBackend};

/// Connects to the backend a URL names and returns a client with the URL's
/// default options (`ttl`, `wait`, `auto_extend`, `owner` query parameters).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), lockkit::LockError> {
/// let locks = lockkit::connect("memory://?ttl=10s&wait=2s").await?;
/// let guard = locks.lock("job:nightly-report").await?;
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// A backend of another crate registered with
/// [`register_scheme`](lockkit_core::url::register_scheme) is reached the
/// same way.
///
/// Errors: [`LockError::InvalidConfig`] for a malformed URL or an unknown
/// scheme or parameter (naming the part), [`LockError::FeatureDisabled`] for
/// a backend not compiled in, [`LockError::Backend`] if the server cannot be
/// reached.
pub async fn connect(url: &str) -> Result<LockClient, LockError> {
    #[allow(unused_mut)] // only the network backends take parameters of their own
    let mut url = ConnectUrl::parse(url)?;
    let backend: Arc<dyn LockBackend> = match url.scheme {
        Scheme::Memory => Arc::new(MemoryBackend::from_url(&url.url)?),
        #[cfg(feature = "redis")]
        Scheme::Redis | Scheme::RedisSentinel | Scheme::RedisCluster | Scheme::Redlock => {
            lockkit_redis::connect(&mut url).await?
        }
        #[cfg(feature = "sqlite")]
        Scheme::Sqlite => lockkit_sql::connect(&mut url).await?,
        #[cfg(feature = "mysql")]
        Scheme::Mysql => lockkit_sql::connect(&mut url).await?,
        #[cfg(feature = "postgres")]
        Scheme::Postgres => lockkit_sql::connect(&mut url).await?,
        #[cfg(feature = "zookeeper")]
        Scheme::Zookeeper => lockkit_zk::connect(&mut url).await?,
        // A scheme registered by another crate, or a backend not compiled in.
        other => match other.connector() {
            Some(connect) => connect(&mut url).await?,
            None => {
                return Err(LockError::FeatureDisabled {
                    scheme: url.url.scheme().to_owned(),
                    feature: other.feature(),
                });
            }
        },
    };
    // A parameter no backend took is a typo, not something to ignore. (The
    // network backends already checked this before connecting, so a typo
    // on an unreachable URL is reported as the typo; this covers memory://.)
    url.finish()?;
    LockClient::from_arc(backend, url.options)
}

/// Connects to the URL in `LOCKKIT_URL`.
pub async fn connect_from_env() -> Result<LockClient, LockError> {
    let url = std::env::var(URL_VAR)
        .map_err(|_| LockError::config(URL_VAR, "the environment variable is not set (or not UTF-8)"))?;
    connect(&url).await
}

/// The environment variable holding the default backend URL.
pub const URL_VAR: &str = "LOCKKIT_URL";

/// `LockClient::connect(url)`, for code that prefers it to
/// [`connect`](crate::connect).
pub trait Connect: Sized {
    /// See [`connect`](crate::connect).
    fn connect(url: &str) -> impl Future<Output = Result<Self, LockError>> + Send;
}

impl Connect for LockClient {
    fn connect(url: &str) -> impl Future<Output = Result<Self, LockError>> + Send {
        connect(url)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_core::url::register_scheme;

    fn inproc(url: &mut ConnectUrl) -> lockkit_core::url::Connecting<'_> {
        let named = url.take("store");
        Box::pin(async move {
            let backend = match named {
                Some(name) => MemoryBackend::shared(&name),
                None => MemoryBackend::new(),
            };
            Ok(Arc::new(backend) as Arc<dyn LockBackend>)
        })
    }

    /// A backend of another crate, registered under its own scheme, is
    /// reached through `connect` with its own parameter and the common
    /// ones; a typo is still refused.
    #[tokio::test]
    async fn a_registered_scheme_connects() {
        register_scheme("inproc-test", inproc).unwrap();
        let a = connect("inproc-test://?store=reg&ttl=5s").await.unwrap();
        let b = connect("INPROC-TEST://?store=reg").await.unwrap();
        assert_eq!(a.options().ttl_value(), std::time::Duration::from_secs(5));
        let held = a.lock("registered/x").await.unwrap();
        assert!(
            b.try_lock("registered/x").await.unwrap().is_none(),
            "one store behind both"
        );
        held.unlock().await.unwrap();
        let typo = connect("inproc-test://?stor=reg").await.unwrap_err();
        assert!(matches!(typo, LockError::InvalidConfig { .. }), "{typo:?}");
        assert!(register_scheme("inproc-test", inproc).is_err(), "registered twice");
        assert!(register_scheme("zk", inproc).is_err(), "a built-in scheme");
    }
}
