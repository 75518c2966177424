//! The holds of one backend: which name it holds for which owner, under
//! which token, with which attempts' shares, on which connection. Re-entry
//! and idempotent attempts are answered here, without a round trip: the
//! server keeps one lock per name and connection.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use lockkit_core::LockInfo;
use lockkit_core::raw::{Lease, TryAcquire};

use crate::conn::sessions::Session;
use crate::entry::Entry;
use crate::handle::Inner;

impl Inner {
    /// What this backend can answer alone: re-entry by the holding owner
    /// (a repeated attempt counts once), or `Busy` when another owner of
    /// this backend holds the name. `None`: the server decides.
    pub(crate) fn local_try(&self, name: &str, owner: &str, attempt: &str) -> Option<TryAcquire> {
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        let entry = holds.get_mut(name)?;
        if entry.session.is_lost() {
            holds.remove(name);
            return None;
        }
        if entry.owner != owner {
            return Some(TryAcquire::Busy { retry_in: None });
        }
        if !entry.attempts.iter().any(|a| a == attempt) {
            entry.attempts.push(attempt.to_owned());
        }
        Some(TryAcquire::Acquired(entry.lease()))
    }

    /// Records a hold the server just granted on `session`.
    pub(crate) fn record(&self, name: &str, owner: &str, attempt: &str, token: u64, session: &Arc<Session>) -> Lease {
        let entry = Entry {
            owner: owner.to_owned(),
            token,
            attempts: vec![attempt.to_owned()],
            session: session.clone(),
        };
        let lease = entry.lease();
        session.holds.fetch_add(1, Ordering::AcqRel);
        let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = holds.insert(name.to_owned(), entry) {
            // Cannot happen while the server keeps exclusion; keep the
            // count of the session it was on right.
            old.session.holds.fetch_sub(1, Ordering::AcqRel);
        }
        lease
    }

    /// The hold of `name` if this backend has it.
    pub(crate) fn local_info(&self, name: &str) -> Option<LockInfo> {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds.get(name).filter(|e| !e.session.is_lost()).map(|e| e.info(name))
    }

    /// Whether `owner` holds `name` under `token` here.
    pub(crate) fn holds_now(&self, name: &str, owner: &str, token: u64) -> bool {
        let holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
        holds
            .get(name)
            .is_some_and(|e| e.owner == owner && e.token == token && !e.session.is_lost())
    }

    /// The connection was lost: every hold on it is gone (their lost
    /// signals fire).
    pub(crate) fn forget_session(&self, session: &Arc<Session>) {
        session.lost.cancel();
        {
            let mut holds = self.holds.lock().unwrap_or_else(|e| e.into_inner());
            holds.retain(|_, e| !Arc::ptr_eq(&e.session, session));
        }
        session.holds.store(0, Ordering::Release);
        let mut carriers = self.carriers.lock().unwrap_or_else(|e| e.into_inner());
        carriers.retain(|s| !Arc::ptr_eq(s, session));
    }
}
