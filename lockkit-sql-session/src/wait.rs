//! Waiting: one server-side wait per name per backend, with the backend's
//! other tasks that wait for that name in line behind it, in-process.
//!
//! The tasks waiting for a name stand in the name's line
//! ([`lockkit_core::raw::Lines`]); the first to join a line nobody leads
//! starts its *leader*, a task of the backend's own that waits for the name
//! on one spare connection (`GET_LOCK(key, seconds)` / `pg_advisory_lock`
//! under `lock_timeout`) as long as the line has tasks, and hands each grant
//! to the first task in line; that task records the hold under its owner.
//! So a client has one wait in the server's queue per name, however many
//! of its tasks wait, and its tasks take that wait's turns in the order
//! they joined.
//!
//! - **A task that leaves** (its wait bound passed, or its `lock` dropped)
//!   just leaves the line; the server-side wait goes on for the others. If
//!   it was the last, the leader ends the wait at once: `KILL` /
//!   `pg_terminate_backend` from another connection, so no wait stays
//!   queued and nothing is granted to nobody (a wait due to end by itself
//!   within [`KILL_GRACE`] is left to end: a grant in that time is given
//!   back at once).
//! - **A grant whose task left** before reading it goes to the next task in
//!   line, or, with nobody left, is given back (`RELEASE_LOCK` /
//!   `pg_advisory_unlock`).
//! - **Wait bounds stay each task's own**: a task times out by its own
//!   deadline; the server-side wait is bounded by the latest deadline in line
//!   when it begins (a later one that joins meanwhile gets a new wait when
//!   that one ends).
//! - **Re-entry**: when a task's owner is granted the name, the other tasks
//!   of that owner in line re-enter its hold at once (different owners stay
//!   different holders and keep waiting).
//! - **A failed wait** (a connection lost or refused) is tried once more on
//!   another connection; a second failure is every waiting task's error.

use std::sync::{Arc, Weak};
use std::time::Duration;

use lockkit_core::raw::Lines;
use tokio::time::Instant;

use crate::conn::driver::{LONGEST_WAIT, Waited};
use crate::conn::sessions::{Session, Spare};
use crate::handle::Inner;
use crate::layout::Key;
use crate::line::{Grant, Turn, WaitFailed, WaitLines};
use lockkit_sql::raw::{Class, classify};

/// A wait whose bound ends within this is left to end by itself when its
/// last task leaves, rather than killed: the task's own deadline and the
/// server's bound end together, and a `KILL` costs a connection.
pub(crate) const KILL_GRACE: Duration = Duration::from_millis(50);

/// How one server-side wait ended.
enum Ended {
    Granted(Grant),
    /// Its bound passed (the connection is a spare again).
    TimedOut,
    /// Every task left; the wait was ended.
    Abandoned,
    Failed(sqlx::Error),
}

/// The lines of a backend whose shared state `inner` will be: a grant
/// whose task dropped its place unread goes on to the next task, or back.
pub(crate) fn lines(inner: Weak<Inner>) -> WaitLines {
    Lines::new(move |name, turn| {
        if let Turn::Granted(grant) = turn
            && let Some(inner) = inner.upgrade()
        {
            inner.pass_on(name, grant);
        }
    })
}

impl Inner {
    /// Hands `grant` to the first task in `name`'s line; with nobody in
    /// line, gives it back to the server (in the background).
    pub(crate) fn pass_on(self: &Arc<Self>, name: &str, grant: Grant) {
        let Err(Turn::Granted(grant)) = self.lines.hand(name, Turn::Granted(grant)) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (inner, name) = (self.clone(), name.to_owned());
                runtime.spawn(async move { inner.give_back(&name, grant).await });
            }
            // No runtime to talk to the server: drop the connection, which
            // frees the lock.
            Err(_) => {
                if let Ok(mut conn) = grant.session.conn.try_lock() {
                    *conn = None;
                }
                self.forget_session(&grant.session);
            }
        }
    }

    /// Releases a grant nobody took; its connection is a spare again.
    async fn give_back(&self, name: &str, grant: Grant) {
        let session = grant.session;
        let _returning = self.returning();
        let mut guard = session.conn.lock().await;
        if let Some(conn) = guard.as_mut() {
            let key = Key::of(self.config.dialect, name);
            if let Err(error) = conn.unlock(&self.sql, &key).await {
                // Dropping the connection frees the lock whatever the error.
                tracing::debug!(backend = self.kind, lock = %name, %error, "giving back a grant failed; dropping its connection");
                *guard = None;
                self.forget_session(&session);
            }
        }
        self.retire_if_idle(&session, &mut guard);
    }

    /// Leads `name`'s line: waits for the name on the server while tasks
    /// stand in line, handing each grant to the first of them.
    pub(crate) async fn lead(self: Arc<Self>, name: String) {
        let key = Key::of(self.config.dialect, &name);
        let mut failed = 0;
        while !self.lines.finish_lead(&name) {
            let Some(changed) = self.lines.changed(&name) else {
                continue;
            };
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            // The latest deadline in line (`None`: somebody waits for ever).
            let until = self.lines.peek(&name, |mut w| {
                Iterator::try_fold(&mut w, Instant::now(), |m, w| w.deadline.map(|d| m.max(d)))
            });
            if until.is_some_and(|u| u <= Instant::now()) {
                // Everybody's bound has passed: they are leaving.
                notified.await;
                continue;
            }
            match self.wait_once(&name, &key, until).await {
                Ended::Granted(grant) => {
                    failed = 0;
                    self.pass_on(&name, grant);
                }
                Ended::TimedOut | Ended::Abandoned => failed = 0,
                Ended::Failed(e) => {
                    failed += 1;
                    if failed > 1 || classify(&e) == Class::Permanent {
                        tracing::debug!(backend = self.kind, lock = %name, error = %e, "the server-side wait failed");
                        let e = WaitFailed(Arc::new(e));
                        self.lines.hand_where(&name, |_| true, |_| Turn::Failed(e.clone()));
                        failed = 0;
                    }
                }
            }
        }
    }

    /// One server-side wait for `name`, on a spare connection, until
    /// `until` (`None`: the longest), ended early when every task left.
    async fn wait_once(&self, name: &str, key: &Key, until: Option<Instant>) -> Ended {
        let Spare { mut conn, id } = match self.spare_for_wait().await {
            Ok(spare) => spare,
            Err(e) => return Ended::Failed(e),
        };
        let left = until.map_or(LONGEST_WAIT, |u| u.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            self.put_spare(Spare { conn, id });
            return Ended::TimedOut;
        }
        let ends = Instant::now() + left;
        let changed = match self.lines.changed(name) {
            Some(changed) if !self.lines.is_empty(name) => changed,
            // Everybody left while the connection was being had.
            _ => {
                self.put_spare(Spare { conn, id });
                return Ended::Abandoned;
            }
        };
        let out = {
            let wait = conn.wait_lock(&self.sql, key, left);
            tokio::pin!(wait);
            loop {
                let notified = changed.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if self.lines.is_empty(name) && Instant::now() + KILL_GRACE < ends {
                    break None;
                }
                tokio::select! {
                    biased;
                    out = &mut wait => break Some(out),
                    () = notified => {}
                }
            }
        };
        match out {
            None => {
                self.kill(id).await;
                drop(conn);
                Ended::Abandoned
            }
            Some(Ok(Waited::Granted(token))) => {
                let session = Session::new(conn, id, false);
                self.carriers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(session.clone());
                Ended::Granted(Grant { token, session })
            }
            Some(Ok(Waited::TimedOut)) => {
                self.put_spare(Spare { conn, id });
                Ended::TimedOut
            }
            // The connection may be broken: it is dropped (and the server
            // drops whatever it waited for).
            Some(Err(e)) => Ended::Failed(e),
        }
    }

    /// Ends the connection `id` (a wait nobody waits for any more), from
    /// a spare connection. Logged on failure: the server then drops the
    /// wait when it finds the connection closed.
    async fn kill(&self, id: i64) {
        let result = async {
            let mut spare = self.take_spare().await?;
            spare.conn.kill(id).await?;
            self.put_spare(spare);
            Ok::<_, sqlx::Error>(())
        }
        .await;
        if let Err(error) = result {
            tracing::warn!(backend = self.kind, connection = id, %error, "ending an abandoned wait failed");
        }
    }
}
