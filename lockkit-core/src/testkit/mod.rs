//! The conformance kit: one async case per contract point, run by every
//! backend against a real server (feature `testkit`).
//!
//! A backend's test file runs the whole kit with one line; each case becomes
//! its own `#[tokio::test]`, so a failure names the contract point:
//!
//! ```text
//! lockkit_core::conformance_tests!(lockkit_core::testkit::Kit::from_env("LOCKKIT_REDIS_URL", |url| async move {
//!     lockkit::connect(&url).await
//! }));
//! ```
//!
//! The caller's crate needs `tokio` with the `macros` and `rt-multi-thread`
//! features. Cases use unique names, so they run concurrently against one
//! server and can be re-run without cleanup.

pub mod cases;
pub mod fenced;
mod history;
mod kit;
pub mod proxy;

pub use fenced::{FencedStore, Snapshot as FencedSnapshot, StaleToken};
pub use history::{Grant, check_history};
pub use kit::{Kit, REQUIRE_SERVICES_VAR, error_chain, server_url, services_required};
pub use proxy::{Fault, FaultProxy};

/// The names of all conformance cases, in contract order.
pub const CASES: &[&str] = &[
    "mutual_exclusion",
    "reentrancy",
    "try_lock_never_waits",
    "bounded_wait",
    "cancellation_safety",
    "release_by_non_owner",
    "idempotent_attempts",
    "extend_and_auto_extend",
    "lost_signal",
    "lost_when_starved",
    "fencing_monotonic",
    "crash_release",
    "names",
    "invalid_input",
    "stress",
    "admin",
    "fifo_order",
    "releaser_does_not_overtake",
    "dead_waiter_skipped",
    "unfair_still_correct",
    "semaphore_permits",
    "semaphore_crash_release",
    "semaphore_order_and_bound",
    "rw_exclusion_and_tokens",
    "rw_writer_not_starved",
    "rw_reentry_and_downgrade",
    "rw_crash_release",
    "one_name_one_lock",
    "election_one_leader",
    "election_never_two_leaders",
    "election_observe_sees_every_change",
    "multi_lock_all_or_nothing",
    "multi_lock_no_deadlock",
    "job_runs_once_and_at_least_holds",
    "job_at_most_stops",
    "crowd_mutex",
    "crowd_semaphore",
    "crowd_rwlock",
    "crowd_one_name",
];

/// Expands to one `#[tokio::test]` per conformance case. The argument is an
/// expression of type `Option<Kit>`, evaluated in every test (`None`: the
/// server is not configured and the case prints that it skipped).
///
/// Cases of a capability the backend does not declare (fair queues,
/// idempotent attempts) are listed after `not_applicable:` with the reason;
/// they are generated `#[ignore]`d with it, so a run reports them as not
/// run. A listed case that applies, or one that does not and is not
/// listed, fails.
///
/// ```text
/// lockkit_core::conformance_tests!(
///     kit(),
///     not_applicable: [fifo_order, releaser_does_not_overtake, dead_waiter_skipped]
///         because "no fair queue: Capabilities::fair is not declared"
/// );
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($kit:expr) => {
        $crate::conformance_tests!($kit, not_applicable: [] because "");
    };
    ($kit:expr, not_applicable: [$($skip:ident),* $(,)?] because $why:literal) => {
        $crate::conformance_tests!(@with ($) ($kit) [$($skip)*] $why);
    };
    (@with ($d:tt) ($kit:expr) [$($skip:ident)*] $why:literal) => {
        macro_rules! __lockkit_conformance_case {
            $( ($skip) => { $crate::conformance_tests!(@case ($kit) $skip [ignore = $why]); }; )*
            ($d case:ident) => { $crate::conformance_tests!(@case ($kit) $d case []); };
        }
        $crate::conformance_tests!(@each
            mutual_exclusion reentrancy try_lock_never_waits bounded_wait cancellation_safety
            release_by_non_owner idempotent_attempts extend_and_auto_extend lost_signal lost_when_starved fencing_monotonic crash_release
            names invalid_input stress admin
            fifo_order releaser_does_not_overtake dead_waiter_skipped unfair_still_correct
            semaphore_permits semaphore_crash_release semaphore_order_and_bound
            rw_exclusion_and_tokens rw_writer_not_starved rw_reentry_and_downgrade rw_crash_release
            one_name_one_lock
            election_one_leader election_never_two_leaders election_observe_sees_every_change multi_lock_all_or_nothing multi_lock_no_deadlock
            job_runs_once_and_at_least_holds job_at_most_stops
            crowd_mutex crowd_semaphore crowd_rwlock crowd_one_name);
    };
    (@each $($case:ident)*) => {
        $( __lockkit_conformance_case!($case); )*
    };
    (@case ($kit:expr) $case:ident [$($attr:meta)?]) => {
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        $(#[$attr])?
        async fn $case() {
            let kit: ::std::option::Option<$crate::testkit::Kit> = $kit;
            if let ::std::option::Option::Some(kit) = kit {
                $crate::testkit::cases::$case(&kit).await;
            }
        }
    };
}
