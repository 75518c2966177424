//! Mapping Redis failures into [`LockError`], and the few errors of our own
//! that are chained as a [`LockError::Backend`] source.

use std::time::Duration;

use lockkit_core::LockError;
use redis::{ErrorKind, RedisError, RetryMethod, ServerErrorKind};

/// Whether a Redis error is worth trying again: lost connections, timeouts,
/// a server loading its data set, a failover in progress, a busy script.
/// Configuration and permission faults (wrong password, `NOPERM`, a script
/// error) are not.
pub(crate) fn is_retryable(e: &RedisError) -> bool {
    match e.kind() {
        ErrorKind::AuthenticationFailed
        | ErrorKind::InvalidClientConfig
        | ErrorKind::RESP3NotSupported
        | ErrorKind::UnexpectedReturnType
        | ErrorKind::Client => false,
        ErrorKind::Server(ServerErrorKind::NoPerm) => false,
        // Scripts are loaded on `NOSCRIPT` and sent again; a second one
        // means the connection reached another server meanwhile (a
        // failover): the next try loads them there.
        ErrorKind::Server(ServerErrorKind::NoScript) => true,
        ErrorKind::Server(ServerErrorKind::ResponseError) | ErrorKind::Extension => {
            // `BUSY` (a long script), `OOM`, `LOADING` and friends pass; an
            // `ERR` from our own scripts does not.
            matches!(e.code(), Some("BUSY" | "OOM" | "LOADING" | "MASTERDOWN" | "TRYAGAIN")) || is_replica_refusal(e)
        }
        _ => !matches!(e.retry_method(), RetryMethod::NoRetry),
    }
}

/// Whether a server refused `WAIT` because it is a replica: what a master
/// demoted by a failover answers (a plain `ERR`) to the `WAIT` after a
/// script that only read, so the client should look for the new master.
pub(crate) fn is_replica_refusal(e: &RedisError) -> bool {
    e.detail()
        .is_some_and(|d| d.starts_with("WAIT cannot be used with replica"))
}

/// A [`LockError::Backend`] for a failed Redis call.
pub(crate) fn redis_error(
    backend: &'static str,
    operation: &'static str,
    name: Option<&str>,
    e: RedisError,
) -> LockError {
    let retryable = is_retryable(&e);
    LockError::backend(backend, operation, name, retryable, e)
}

/// A reply none of lockkit's scripts gives: the key holds something else
/// (another program uses the prefix), or the server is not Redis-compatible.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unexpected reply from the server: {0}")]
pub struct UnexpectedReply(pub(crate) String);

/// A lock key holds data of another key layout: written by a lockkit
/// version whose layout differs from this one's (see `layout`: a mutex's
/// hold is a string of layout 2; before, a hash), or by
/// another program using the prefix. Never retried, and nothing is
/// granted over it: two layouts on one prefix refuse each other's keys
/// rather than both grant a name.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "a lock key holds data of another key layout (another lockkit version, or another program, uses the prefix; \
     run one lockkit layout per prefix, or give this one its own prefix): {0}"
)]
pub struct LayoutError(pub(crate) String);

/// A node did not answer within its timeout.
#[derive(Debug, Clone, thiserror::Error)]
#[error("no answer from {node} within {}", humantime_ms(*.timeout))]
pub struct NodeTimeout {
    /// The node, as `host:port`.
    pub node: String,
    /// The timeout that ran out.
    pub timeout: Duration,
}

/// Fewer replicas than `wait_replicas` acknowledged a change within
/// `wait_replicas_timeout`: the acquisition was taken back (or the extension
/// counts as failed). Retryable: the replicas may catch up.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{acknowledged} of {asked} replicas acknowledged within {}", humantime_ms(*.timeout))]
pub struct ReplicasError {
    /// Replicas that acknowledged.
    pub acknowledged: u32,
    /// Replicas asked for (`wait_replicas`).
    pub asked: u32,
    /// How long the master waited (`wait_replicas_timeout`).
    pub timeout: Duration,
}

/// A Redlock operation that could not reach a quorum of nodes because too
/// many of them failed (as opposed to being held by another owner).
#[derive(Debug, thiserror::Error)]
#[error("{succeeded} of {nodes} redlock nodes answered, {quorum} needed; first failure: {first}")]
pub struct QuorumError {
    /// Nodes that answered.
    pub succeeded: usize,
    /// Nodes needed (N/2 + 1).
    pub quorum: usize,
    /// Nodes configured.
    pub nodes: usize,
    /// The first node failure, as text.
    pub first: String,
    /// Whether every failure was retryable.
    pub retryable: bool,
}

/// A server refused an acquisition because it lost its data (restarted
/// without persistence, flushed, evicted) and with it holds that their
/// holders may still count on: with the restart guard on, such a server
/// grants nothing until every lease it may have carried has ended (see
/// the crate docs). Retryable: a waiting `lock` waits the quarantine out.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{node} lost its data (no restart-guard marker): quarantined{}", match .left {
    Some(left) => format!(" for {} more", humantime_ms(*left)),
    None => " until its quarantine is set".to_owned(),
})]
pub struct Quarantined {
    /// The server, as `host:port`.
    pub node: String,
    /// How long the quarantine lasts from the reply (`None`: the server
    /// had no marker; the client sets the quarantine next).
    pub left: Option<Duration>,
}

/// Why one request to one server failed.
#[derive(Debug, Clone)]
pub(crate) enum Fault {
    Redis(RedisError),
    Reply(UnexpectedReply),
    Layout(LayoutError),
    Timeout(NodeTimeout),
    Replicas(ReplicasError),
    Quarantined(Quarantined),
}

impl Fault {
    pub fn retryable(&self) -> bool {
        match self {
            Fault::Redis(e) => is_retryable(e),
            Fault::Reply(_) | Fault::Layout(_) => false,
            Fault::Timeout(_) | Fault::Replicas(_) | Fault::Quarantined(_) => true,
        }
    }

    pub fn into_error(self, backend: &'static str, operation: &'static str, name: Option<&str>) -> LockError {
        let retryable = self.retryable();
        match self {
            Fault::Redis(e) => LockError::backend(backend, operation, name, retryable, e),
            Fault::Reply(e) => LockError::backend(backend, operation, name, retryable, e),
            Fault::Layout(e) => LockError::backend(backend, operation, name, retryable, e),
            Fault::Timeout(e) => LockError::backend(backend, operation, name, retryable, e),
            Fault::Replicas(e) => LockError::backend(backend, operation, name, retryable, e),
            Fault::Quarantined(e) => LockError::backend(backend, operation, name, retryable, e),
        }
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fault::Redis(e) => e.fmt(f),
            Fault::Reply(e) => e.fmt(f),
            Fault::Layout(e) => e.fmt(f),
            Fault::Timeout(e) => e.fmt(f),
            Fault::Replicas(e) => e.fmt(f),
            Fault::Quarantined(e) => e.fmt(f),
        }
    }
}

impl From<RedisError> for Fault {
    fn from(e: RedisError) -> Self {
        match e.code() {
            Some("WRONGTYPE" | "LOCKKIT_LAYOUT") => Fault::Layout(LayoutError(e.to_string())),
            _ => Fault::Redis(e),
        }
    }
}

impl From<UnexpectedReply> for Fault {
    fn from(e: UnexpectedReply) -> Self {
        Fault::Reply(e)
    }
}

fn humantime_ms(d: Duration) -> String {
    format!("{} ms", d.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_kinds() {
        let io: RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into();
        assert!(is_retryable(&io));
        let auth: RedisError = (ErrorKind::AuthenticationFailed, "wrong password").into();
        assert!(!is_retryable(&auth));
        let e = redis_error("redis", "acquire", Some("x"), auth);
        assert!(matches!(e, LockError::Backend { retryable: false, .. }));
        assert!(std::error::Error::source(&e).is_some());
        let script_error: RedisError = (
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "user_script:1: oops".to_owned(),
        )
            .into();
        assert!(!is_retryable(&script_error));
        let demoted: RedisError = (
            ErrorKind::Server(ServerErrorKind::ResponseError),
            "An error was signalled by the server",
            "WAIT cannot be used with replica instances. Please also note …".to_owned(),
        )
            .into();
        assert!(is_replica_refusal(&demoted) && is_retryable(&demoted));
        let noscript: RedisError = (
            ErrorKind::Server(ServerErrorKind::NoScript),
            "An error was signalled by the server",
            "No matching script. Please use EVAL.".to_owned(),
        )
            .into();
        assert!(is_retryable(&noscript), "a script cache emptied by a failover");
    }
}
