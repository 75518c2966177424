//! One name the backend holds ([`Entry`]): its owner, token, the attempts'
//! shares and the connection the server lock is on; and the lease and
//! the description it gives. `holds.rs` keeps the backend's table of them.

use std::sync::Arc;

use lockkit_core::LockInfo;
use lockkit_core::raw::Lease;

use crate::conn::sessions::Session;

/// One held name.
#[derive(Debug)]
pub(crate) struct Entry {
    pub owner: String,
    pub token: u64,
    /// One attempt id per share of the hold (the hold count is their number).
    pub attempts: Vec<String>,
    /// The connection the server lock is on.
    pub session: Arc<Session>,
}

impl Entry {
    pub(super) fn lease(&self) -> Lease {
        Lease {
            token: self.token,
            hold_count: u32::try_from(self.attempts.len()).unwrap_or(u32::MAX),
            valid_until: None,
            lost: Some(self.session.lost.child_token()),
            session_deadline: None,
        }
    }

    pub(crate) fn info(&self, name: &str) -> LockInfo {
        LockInfo {
            name: name.to_owned(),
            owner: self.owner.clone(),
            hold_count: u32::try_from(self.attempts.len()).unwrap_or(u32::MAX),
            token: self.token,
            remaining: None,
            kind: lockkit_core::LockKind::Mutex,
        }
    }
}
