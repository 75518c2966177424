//! The in-process lines behind the server-side waits ([`WaitLines`]): who
//! stands in a name's line ([`Waiter`]) and what its first task is handed
//! ([`Turn`]: a [`Grant`], its owner's hold, or a [`WaitFailed`]).
//! `wait.rs` leads the lines.

use std::sync::Arc;

use lockkit_core::LockError;
use lockkit_core::raw::Lines;
use tokio::time::Instant;

use crate::conn::sessions::Session;
use lockkit_sql::raw::{Class, classify};

/// A task waiting in line: its owner, and until when it waits (`None`:
/// for ever).
#[derive(Debug, Clone)]
pub(crate) struct Waiter {
    pub owner: String,
    pub deadline: Option<Instant>,
}

/// What the leader hands a task in line.
#[derive(Debug)]
pub(crate) enum Turn {
    /// The server granted the name on this connection, with this token: the
    /// task records it as its owner's hold.
    Granted(Grant),
    /// The task's owner holds the name now: it re-enters that hold.
    OwnerHolds,
    /// The server-side wait failed.
    Failed(WaitFailed),
}

/// A name granted to a wait of this backend, not yet anybody's hold.
#[derive(Debug)]
pub(crate) struct Grant {
    pub token: u64,
    pub session: Arc<Session>,
}

/// The backend's lines of waiting tasks.
pub(crate) type WaitLines = Lines<Waiter, Turn>;

/// The error of a failed server-side wait, shared by the tasks it failed.
#[derive(Debug, Clone)]
pub(crate) struct WaitFailed(pub(super) Arc<sqlx::Error>);

impl std::fmt::Display for WaitFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for WaitFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0.source()
    }
}

impl WaitFailed {
    /// The error a task in line for `name` returns.
    pub(crate) fn to_error(&self, kind: &'static str, name: &str) -> LockError {
        let retryable = classify(&self.0) != Class::Permanent;
        LockError::backend(kind, "acquire", Some(name), retryable, self.clone())
    }
}
