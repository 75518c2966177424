//! The backend's connections: the primary one (tries and their holds),
//! the spare ones (for the server-side waits, one per name waited for; a
//! granted wait's connection carries that hold, and is a spare again when
//! its last hold is released), and a connection a statement failed on
//! (dropped with its holds). The connections themselves, [`Session`] and
//! [`Spare`], are in `sessions.rs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lockkit_core::LockError;

use crate::conn::driver::Conn;
use crate::conn::sessions::{Session, Spare};
use crate::handle::Inner;
use lockkit_sql::raw::{Class, backend_error, classify};

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

    /// A statement on `session` failed: unless the error is the
    /// statement's own (permanent), the connection is dropped and its holds
    /// are lost.
    pub(super) fn statement_failed(&self, session: &Arc<Session>, conn: &mut Option<Conn>, e: &sqlx::Error) {
        if classify(e) != Class::Permanent {
            *conn = None;
            self.forget_session(session);
        }
    }

    pub(super) fn lost_error(&self, operation: &'static str, name: &str, session: &Session) -> LockError {
        LockError::backend(
            self.kind,
            operation,
            Some(name),
            true,
            std::io::Error::other(format!("connection {} was lost", session.id)),
        )
    }
}
