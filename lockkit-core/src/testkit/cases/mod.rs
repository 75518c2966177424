//! The conformance cases, one per point of [the contract](crate::contract).
//!
//! Each case panics with a message naming what broke. Cases wait for events
//! within [`Kit::bound`](crate::testkit::Kit::bound); the only sleeps are
//! the ones that let a lease run for a multiple of its ttl.

mod admin;
mod crowd;
mod election;
mod exclusion;
mod fairness;
mod fencing;
mod jobs;
mod leases;
mod multi_lock;
mod names;
mod one_name;
mod ownership;
mod reentry;
mod rwlock;
mod semaphore;
mod steps;
mod waiting;

pub use admin::admin;
pub use crowd::{crowd_mutex, crowd_rwlock, crowd_semaphore};
pub use election::{election_never_two_leaders, election_observe_sees_every_change, election_one_leader};
pub use exclusion::{mutual_exclusion, stress, try_lock_never_waits};
pub use fairness::{dead_waiter_skipped, fifo_order, releaser_does_not_overtake, unfair_still_correct};
pub use fencing::fencing_monotonic;
pub use jobs::{job_at_most_stops, job_runs_once_and_at_least_holds};
pub use leases::{crash_release, extend_and_auto_extend, lost_signal, lost_when_starved};
pub use multi_lock::{multi_lock_all_or_nothing, multi_lock_no_deadlock};
pub use names::{invalid_input, names};
pub use one_name::{crowd_one_name, one_name_one_lock};
pub use ownership::release_by_non_owner;
pub use reentry::{idempotent_attempts, reentrancy};
pub use rwlock::{rw_crash_release, rw_exclusion_and_tokens, rw_reentry_and_downgrade, rw_writer_not_starved};
pub use semaphore::{semaphore_crash_release, semaphore_order_and_bound, semaphore_permits};
pub use waiting::{bounded_wait, cancellation_safety};
