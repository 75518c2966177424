//! Waiting for a lock: this process's registry of waiters and the Postgres
//! listener (`listener.rs`), the Postgres wait lists (`waitlist.rs`), and
//! the upkeep of places in the fair line (`queue.rs`).

pub(crate) mod listener;
pub(crate) mod queue;
#[cfg(feature = "postgres")]
pub(crate) mod waitlist;
