//! [`FencedStore`]: the storage side of fencing tokens (Kleppmann, "How to
//! do distributed locking"), as a tiny in-memory store for tests.
//!
//! A lock alone cannot stop a holder that was paused (GC, SIGSTOP, a slow
//! network) past its lease from writing after another owner took over; the
//! storage it writes to must check the token. This store keeps the highest
//! token any accepted write carried and refuses every write whose token is
//! not above it. (The CLI's demo keeps the same rule in a file,
//! `lockkit-cli/src/fenced_store.rs`, so that several processes can share
//! it; this one lives in the test process, and a child process reaches it
//! through whatever channel the test gives it.)

use std::fmt;
use std::sync::{Mutex, MutexGuard};

/// A write refused because its token is not above the highest one seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StaleToken {
    /// The refused write's token.
    pub token: u64,
    /// The highest token an accepted write carried.
    pub highest: u64,
}

impl fmt::Display for StaleToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "write with fencing token {} refused: the store has seen token {}",
            self.token, self.highest
        )
    }
}

impl std::error::Error for StaleToken {}

/// What the store holds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// The last accepted value (`None` before the first write).
    pub value: Option<String>,
    /// The token of the last accepted write (0 before the first).
    pub highest: u64,
    /// Writes accepted so far.
    pub accepted: usize,
    /// Writes refused so far.
    pub refused: usize,
}

/// An in-memory value that accepts a write only with a fencing token above
/// every token it has accepted before. Thread safe; share it with an `Arc`.
#[derive(Debug, Default)]
pub struct FencedStore {
    state: Mutex<Snapshot>,
}

impl FencedStore {
    /// An empty store.
    pub fn new() -> Self {
        FencedStore::default()
    }

    fn state(&self) -> MutexGuard<'_, Snapshot> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stores `value` if `token` is above every token accepted so far;
    /// otherwise leaves the store as it was and says why.
    pub fn write(&self, token: u64, value: impl Into<String>) -> Result<(), StaleToken> {
        let mut st = self.state();
        if token <= st.highest {
            st.refused += 1;
            return Err(StaleToken {
                token,
                highest: st.highest,
            });
        }
        st.highest = token;
        st.value = Some(value.into());
        st.accepted += 1;
        Ok(())
    }

    /// The current content and counts.
    pub fn read(&self) -> Snapshot {
        self.state().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_tokens_not_above_the_highest() {
        let store = FencedStore::new();
        assert_eq!(store.read(), Snapshot::default());
        store.write(5, "a").unwrap();
        assert_eq!(store.write(5, "again"), Err(StaleToken { token: 5, highest: 5 }));
        assert_eq!(store.write(3, "stale"), Err(StaleToken { token: 3, highest: 5 }));
        store.write(9, "b").unwrap();
        let e = store.write(6, "late").unwrap_err();
        assert_eq!(
            e.to_string(),
            "write with fencing token 6 refused: the store has seen token 9"
        );
        assert_eq!(
            store.read(),
            Snapshot {
                value: Some("b".into()),
                highest: 9,
                accepted: 2,
                refused: 3,
            }
        );
    }
}
