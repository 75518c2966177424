//! What teams build with a lock, again and again: several names locked at
//! once ([`MultiGuard`]), a leader elected among candidates ([`Election`]),
//! and a scheduled job run once across machines
//! ([`LockClient::run_exclusive`](crate::LockClient::run_exclusive)). Each
//! is built on the mutex alone, so every backend has them with the same
//! guarantees.

mod election;
mod job;
mod multi;

pub use election::{DEFAULT_OBSERVE_INTERVAL, Election, Leader, Leadership, PUSHED_RECHECK};
pub use job::{JobContext, JobLimits};
pub use multi::MultiGuard;
