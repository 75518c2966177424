//! ZooKeeper client errors as [`LockError`]s.

use lockkit_core::LockError;
use zookeeper_client::Error as ZkError;

/// The backend's name in messages, traces and errors.
pub const BACKEND: &str = "zookeeper";

/// A lock node whose data is not lockkit's: somebody else wrote under the
/// chroot. Chained as the source of a [`LockError::Backend`].
#[derive(Debug, thiserror::Error)]
#[error("node {path} does not hold lockkit lock data")]
pub struct ForeignNode {
    /// The node's path below the chroot.
    pub path: String,
}

/// Connecting took longer than the configured connect timeout.
#[derive(Debug, thiserror::Error)]
#[error("no session with {hosts} within {after:?}")]
pub struct ConnectTimeout {
    /// The servers tried.
    pub hosts: String,
    /// The connect timeout.
    pub after: std::time::Duration,
}

/// Whether the request's connection was lost before its answer came: the
/// request may or may not have run, and the session goes on over a new
/// connection. The client library says `ConnectionLoss` for a connection
/// that ended, but fails the requests in flight with its own error
/// (`Custom`) for a connection it gave up after a silence ("no response
/// from connection in …ms", 2/5 of the session timeout) or that broke
/// under it (an I/O error): to the caller the same thing. The library makes
/// `Custom` errors only for its connection (and for TLS setup, before any
/// request), so every lockkit check for a lost answer goes through here.
pub fn is_connection_loss(e: &ZkError) -> bool {
    matches!(e, ZkError::ConnectionLoss | ZkError::Custom(_))
}

/// Whether trying again (possibly with a new session) may succeed.
pub fn is_retryable(e: &ZkError) -> bool {
    is_connection_loss(e)
        || matches!(
            e,
            ZkError::SessionExpired
                | ZkError::SessionMoved
                | ZkError::Timeout
                | ZkError::NoHosts
                | ZkError::Throttled
                | ZkError::ClientClosed
        )
}

/// Whether the error means the session is over: its ephemeral nodes are (or
/// will be) gone and a new session is needed.
pub fn is_session_end(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::SessionExpired | ZkError::SessionMoved | ZkError::ClientClosed | ZkError::AuthFailed
    )
}

/// Maps a client error of `operation` (on lock `name`, if any).
pub fn zk(operation: &'static str, name: Option<&str>, e: ZkError) -> LockError {
    LockError::backend(BACKEND, operation, name, is_retryable(&e), e)
}

/// The error of an operation whose session ended under it again and again.
pub(crate) fn session_kept_ending(operation: &'static str, name: &str) -> LockError {
    LockError::backend(
        BACKEND,
        operation,
        Some(name),
        true,
        "the ZooKeeper session ended again and again",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_errors() {
        let e = zk("acquire", Some("n"), ZkError::ConnectionLoss);
        assert!(e.is_retryable());
        assert!(e.to_string().contains("zookeeper: acquire of lock \"n\" failed"), "{e}");
        assert!(!zk("acquire", None, ZkError::NoAuth).is_retryable());
        assert!(is_session_end(&ZkError::SessionExpired));
        assert!(!is_session_end(&ZkError::ConnectionLoss));
    }

    /// The library's `Custom` errors cannot be made outside it: the
    /// `*_too_late_*` cases of `tests/zookeeper/partial_failure.rs` get them
    /// from a real connection.
    #[test]
    fn connection_losses() {
        assert!(is_connection_loss(&ZkError::ConnectionLoss));
        assert!(!is_connection_loss(&ZkError::NoNode));
        assert!(!is_connection_loss(&ZkError::SessionExpired));
    }
}
