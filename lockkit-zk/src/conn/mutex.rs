//! Locking the standard mutexes of a session's state whether or not a
//! panic poisoned them.

use std::sync::{Mutex, MutexGuard};

/// Locks `m`, poisoned or not.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
