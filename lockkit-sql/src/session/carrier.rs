//! [`Session`]: a connection that carries holds, watched while it does;
//! and the backend's connections: the primary one (tries and their holds)
//! and the spare ones (for the server-side waits, one per name waited for;
//! a granted wait's connection carries that hold, and is a spare again when
//! its last hold is released).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use lockkit_core::LockError;
use tokio_util::sync::CancellationToken;

use super::Inner;
use super::conn::Conn;
use crate::error::backend_error;

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

/// A connection counted as returning to the spares (see
/// [`Inner::returning`]); the count goes down, and waits looking for a
/// connection look again, when it is dropped.
pub(crate) struct Returning<'a>(&'a Inner);

impl Drop for Returning<'_> {
    fn drop(&mut self) {
        self.0.returning.fetch_sub(1, Ordering::AcqRel);
        self.0.spare_back.notify_waiters();
    }
}

impl Inner {
    /// The primary connection, opened again if it was lost.
    pub(crate) async fn primary(&self) -> Result<Arc<Session>, LockError> {
        let mut primary = self.primary.lock().await;
        if let Some(session) = primary.as_ref()
            && !session.is_lost()
        {
            return Ok(session.clone());
        }
        let spare = self
            .take_spare()
            .await
            .map_err(|e| backend_error(self.kind, "connect", None, e))?;
        let session = Session::new(spare.conn, spare.id, true);
        *primary = Some(session.clone());
        Ok(session)
    }

    /// A connection without holds: a spare one, or a new one.
    pub(crate) async fn take_spare(&self) -> Result<Spare, sqlx::Error> {
        let spare = self.spares.lock().unwrap_or_else(|e| e.into_inner()).pop();
        if let Some(spare) = spare {
            return Ok(spare);
        }
        let mut conn = Conn::open(&self.config).await?;
        let id = conn.id(&self.sql).await?;
        Ok(Spare { conn, id })
    }

    /// Keeps a connection without holds for the next wait (at most
    /// `max_connections` of them; more are closed).
    pub(crate) fn put_spare(&self, spare: Spare) {
        let mut spares = self.spares.lock().unwrap_or_else(|e| e.into_inner());
        if spares.len() < self.config.max_connections as usize {
            spares.push(spare);
        }
    }

    /// A connection that came from a wait and carries no holds any more
    /// goes back to the spares (its `conn` is taken out of the session).
    pub(crate) fn retire_if_idle(&self, session: &Arc<Session>, conn: &mut Option<Conn>) {
        if session.primary || session.hold_count() > 0 {
            return;
        }
        if let Some(conn) = conn.take() {
            let mut carriers = self.carriers.lock().unwrap_or_else(|e| e.into_inner());
            carriers.retain(|s| !Arc::ptr_eq(s, session));
            drop(carriers);
            self.put_spare(Spare { conn, id: session.id });
        }
    }

    /// Counts `session` as returning while the guard lives: its last hold
    /// is being released, so a wait that needs a connection takes it when
    /// it comes back rather than open a new one.
    pub(crate) fn returning(&self) -> Returning<'_> {
        self.returning.fetch_add(1, Ordering::AcqRel);
        Returning(self)
    }

    /// A connection for a wait: a spare one; else one whose release is
    /// being answered (it comes back within a round trip; so a crowd on
    /// one name never needs a third connection beside the try connection);
    /// else, or when none came back within the connect timeout, a new one.
    pub(crate) async fn spare_for_wait(&self) -> Result<Spare, sqlx::Error> {
        let give_up = tokio::time::Instant::now() + self.config.connect_timeout;
        loop {
            let back = self.spare_back.notified();
            tokio::pin!(back);
            back.as_mut().enable();
            if self.returning.load(Ordering::Acquire) == 0 || tokio::time::Instant::now() >= give_up {
                return self.take_spare().await;
            }
            if let Some(spare) = self.spares.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                return Ok(spare);
            }
            let _ = tokio::time::timeout_at(give_up, back).await;
        }
    }
}
