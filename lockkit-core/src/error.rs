//! The one error type of lockkit.

use std::fmt;
use std::time::Duration;

/// A boxed error from a backend's client library, kept as the `source` of
/// [`LockError::Backend`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong with a lock, on every backend.
///
/// Messages name the backend and the lock; the cause of a backend failure is
/// chained as [`std::error::Error::source`], not repeated in the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock name is empty, too long, or otherwise not a valid name.
    #[error("invalid lock name {name:?}: {reason}")]
    InvalidName {
        /// The offending name (cut to 64 characters).
        name: String,
        /// Why it was refused.
        reason: String,
    },

    /// A URL, option or setting is not valid. Also the error of a call of
    /// the blocking API (`lockkit::blocking`) made inside an async runtime
    /// (part `blocking API`), where the async client is the one to use.
    #[error("invalid configuration: {part}: {reason}")]
    InvalidConfig {
        /// Which part is wrong, e.g. `url scheme`, `query parameter ttl`, `owner`.
        part: String,
        /// Why it is wrong.
        reason: String,
    },

    /// The URL names a backend whose cargo feature was not compiled in.
    #[error("the `{scheme}` scheme needs the `{feature}` cargo feature of lockkit, which is not enabled")]
    FeatureDisabled {
        /// The URL scheme that was asked for.
        scheme: String,
        /// The cargo feature that provides it.
        feature: &'static str,
    },

    /// The lock could not be acquired within the wait bound.
    #[error("{backend}: timed out after {} waiting for lock {name:?}", humantime::format_duration(*.waited))]
    WaitTimeout {
        /// The backend, e.g. `redis`.
        backend: &'static str,
        /// The lock name.
        name: String,
        /// How long the acquisition waited.
        waited: Duration,
    },

    /// The lock is not (or no longer) held by this owner: it expired, was taken
    /// over, or was never held. Nothing was changed.
    #[error("{backend}: lock {name:?} is not held by owner {owner:?}")]
    NotHeld {
        /// The backend.
        backend: &'static str,
        /// The lock name.
        name: String,
        /// The owner that tried to release or extend it.
        owner: String,
    },

    /// The holder can no longer be sure it holds the lock (see
    /// [`LockGuard::lost`](crate::LockGuard::lost)).
    #[error("{backend}: lock {name:?} was lost: {reason}")]
    Lost {
        /// The backend.
        backend: &'static str,
        /// The lock name.
        name: String,
        /// Why it was lost.
        reason: LostReason,
    },

    /// The name's state on the server does not allow the request: a
    /// semaphore held with another permit count, an upgrade of a read hold
    /// to a write hold, a downgrade of a guard that is not a write hold.
    /// Nothing was changed.
    #[error("{backend}: lock {name:?}: {reason}")]
    Conflict {
        /// The backend.
        backend: &'static str,
        /// The lock name.
        name: String,
        /// What disagrees.
        reason: String,
    },

    /// The backend does not support this operation.
    #[error("{backend}: {operation} is not supported by this backend")]
    Unsupported {
        /// The backend.
        backend: &'static str,
        /// The operation, e.g. `list`.
        operation: &'static str,
    },

    /// The backend's server or client library failed.
    #[error("{backend}: {operation}{} failed", lock_suffix(.name))]
    Backend {
        /// The backend.
        backend: &'static str,
        /// What was being done, e.g. `acquire`, `connect`.
        operation: &'static str,
        /// The lock involved, if the operation was about one.
        name: Option<String>,
        /// Whether trying again later may succeed (connection loss, timeouts,
        /// deadlocks) rather than a permanent fault (permissions, bad schema).
        retryable: bool,
        /// The underlying error.
        #[source]
        source: BoxError,
    },
}

fn lock_suffix(name: &Option<String>) -> String {
    match name {
        Some(n) => format!(" of lock {n:?}"),
        None => String::new(),
    }
}

impl LockError {
    /// Whether the same call may succeed if tried again: a wait that timed out,
    /// or a transient backend failure.
    pub fn is_retryable(&self) -> bool {
        match self {
            LockError::WaitTimeout { .. } => true,
            LockError::Backend { retryable, .. } => *retryable,
            _ => false,
        }
    }

    /// This error and its causes on one line, for logs and command-line
    /// tools: see [`one_line`].
    pub fn to_line(&self) -> String {
        one_line(self)
    }

    /// Shorthand for an [`LockError::InvalidConfig`].
    pub fn config(part: impl Into<String>, reason: impl Into<String>) -> Self {
        LockError::InvalidConfig {
            part: part.into(),
            reason: reason.into(),
        }
    }

    /// Shorthand for a [`LockError::Backend`] error.
    pub fn backend(
        backend: &'static str,
        operation: &'static str,
        name: Option<&str>,
        retryable: bool,
        source: impl Into<BoxError>,
    ) -> Self {
        LockError::Backend {
            backend,
            operation,
            name: name.map(str::to_owned),
            retryable,
            source: source.into(),
        }
    }
}

/// An error and its chain of causes on one line: `a: b: c`, leaving out a
/// cause whose text its predecessor already ends with (many client libraries
/// print their cause in their own message *and* return it as the source,
/// which would show every cause twice), and replacing line breaks with
/// spaces.
///
/// ```
/// # use lockkit_core::LockError;
/// let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
/// let e = LockError::backend("redis", "connect", None, true, io);
/// assert_eq!(lockkit_core::one_line(&e), "redis: connect failed: refused");
/// ```
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut last = line.clone();
    let mut cur = e.source();
    while let Some(cause) = cur {
        let text = cause.to_string();
        if !text.is_empty() && !last.ends_with(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        last = text;
        cur = cause.source();
    }
    line.split(['\r', '\n'])
        .filter(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The result type of lockkit.
pub type Result<T, E = LockError> = std::result::Result<T, E>;

/// Why a guard's lost signal fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The validity deadline passed without a successful extension.
    Expired,
    /// The backend reported that the owner no longer holds the lock (it
    /// expired on the server, or an operator released it).
    NotHeld,
    /// The backend's session was suspended or expired (ZooKeeper), or its
    /// own loss signal fired.
    Session,
}

impl fmt::Display for LostReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LostReason::Expired => "the lease ran out before it could be extended",
            LostReason::NotHeld => "the backend no longer has this owner as the holder",
            LostReason::Session => "the backend session was lost",
        })
    }
}
