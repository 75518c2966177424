//! The backend's server connections as it keeps them: a [`Session`]
//! carries holds (the primary connection, or one a wait was granted on),
//! a [`Spare`] carries none and is ready for a wait. `carrier.rs` hands
//! them out and takes them back.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio_util::sync::CancellationToken;

use crate::conn::driver::Conn;

/// A server connection and the holds on it. The holds end with it: when
/// a ping or a statement finds it gone, `lost` is cancelled (every lease
/// taken on it carries that token) and the connection is dropped.
#[derive(Debug)]
pub(crate) struct Session {
    /// The connection; `None` once it was found dead (or handed back to
    /// the spares).
    pub conn: tokio::sync::Mutex<Option<Conn>>,
    /// The server's id of the connection (for messages).
    pub id: i64,
    /// Cancelled when the connection, and so every hold on it, is lost.
    pub lost: CancellationToken,
    /// How many names this backend holds on it.
    pub holds: AtomicUsize,
    /// The primary connection (tries); the others came from a wait.
    pub primary: bool,
}

impl Session {
    pub(crate) fn new(conn: Conn, id: i64, primary: bool) -> Arc<Session> {
        Arc::new(Session {
            conn: tokio::sync::Mutex::new(Some(conn)),
            id,
            lost: CancellationToken::new(),
            holds: AtomicUsize::new(0),
            primary,
        })
    }

    /// Whether the connection was found dead.
    pub(crate) fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    pub(crate) fn hold_count(&self) -> usize {
        self.holds.load(Ordering::Acquire)
    }
}

/// A connection not carrying holds, ready for a wait, with its id.
#[derive(Debug)]
pub(crate) struct Spare {
    pub conn: Conn,
    pub id: i64,
}
