//! `connect(url)`: one `match` over the URL scheme.

use lockkit_core::url::{ConnectUrl, Scheme};
use lockkit_core::{LockClient, LockError, memory::MemoryBackend};

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
/// Errors: [`LockError::InvalidConfig`] for a malformed URL or an unknown
/// scheme or parameter (naming the part), [`LockError::FeatureDisabled`] for
/// a backend not compiled in, [`LockError::Backend`] if the server cannot be
/// reached.
pub async fn connect(url: &str) -> Result<LockClient, LockError> {
    let url = ConnectUrl::parse(url)?;
    match url.scheme {
        Scheme::Memory => {
            url.finish()?;
            let backend = MemoryBackend::from_url(&url.url)?;
            LockClient::new(backend, url.options)
        }
        other => Err(LockError::FeatureDisabled {
            scheme: url.url.scheme().to_owned(),
            feature: other.feature(),
        }),
    }
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
