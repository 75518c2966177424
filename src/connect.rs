//! `connect(url)`: the scheme table's backend for the URL (see
//! [`schemes`](crate::schemes)).

use lockkit_core::raw::ConnectUrl;

use lockkit_core::{LockClient, LockError};

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
/// [`register_backend`](crate::register_backend) is reached the same way.
///
/// Errors: [`LockError::InvalidConfig`] for a malformed URL or an unknown
/// scheme or parameter (naming the part), [`LockError::FeatureDisabled`] for
/// a backend not compiled in, [`LockError::Backend`] if the server cannot be
/// reached.
pub async fn connect(url: &str) -> Result<LockClient, LockError> {
    let mut url = ConnectUrl::parse(url)?;
    let connect = crate::schemes::connector(&url.scheme)?;
    let backend = connect(&mut url).await?;
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
    use crate::register_backend;
    use lockkit_core::memory::MemoryBackend;
    use lockkit_core::raw::BackendSchemes;
    use lockkit_core::raw::LockBackend;
    use std::sync::Arc;

    fn inproc(url: &mut ConnectUrl) -> lockkit_core::raw::Connecting<'_> {
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
        let schemes = |names| BackendSchemes { names, connect: inproc };
        register_backend(schemes(&["inproc-test", "inproc-test2"])).unwrap();
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
        assert!(connect("inproc-test2://").await.is_ok(), "every scheme it declared");
        let refused = [
            (&["inproc-test"][..], "registered twice"),
            (
                &["inproc-test3", "zk"],
                "a built-in scheme (this one is refused, the other not registered)",
            ),
            (&["inproc-test4", "INPROC-TEST4"], "one scheme twice"),
            (&["not a scheme"], "not a URL scheme"),
        ];
        for (names, why) in refused {
            let e = register_backend(schemes(names)).unwrap_err();
            assert!(matches!(e, LockError::InvalidConfig { .. }), "{why}: {e:?}");
        }
        let unknown = connect("inproc-test3://").await.unwrap_err();
        assert!(
            matches!(&unknown, LockError::InvalidConfig { part, .. } if part == "url scheme"),
            "nothing of a refused registration stays: {unknown:?}"
        );
    }
}
