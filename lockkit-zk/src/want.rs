//! [`Want`]: what one acquisition asks for — the lock's name, the owner,
//! the attempt id and the kind of hold.

use lockkit_core::LockKind;

/// One acquisition: a mutex's hold, a semaphore's permit or a read-write
/// lock's read or write hold.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Want<'a> {
    pub(crate) name: &'a str,
    pub(crate) owner: &'a str,
    pub(crate) attempt: &'a str,
    pub(crate) kind: LockKind,
}
