//! Everything a backend author needs, in one place.
//!
//! Applications never need this module: they use
//! [`LockClient`](crate::LockClient). A backend implements
//! [`LockBackend`] — one short-lived request per method, the client does
//! the rest (validation, guards, the watchdog, traces) — and runs the
//! conformance kit (`lockkit_core::testkit`, feature `testkit`) against a
//! real server. `docs/writing-a-backend.md` in the repository walks
//! through one.
//!
//! - the trait and its types: [`LockBackend`], [`AcquireRequest`],
//!   [`TryAcquire`], [`Lease`], [`Hold`], [`ReleaseOutcome`],
//!   [`ExtendOutcome`]; what it reports and declares is the application's
//!   too, so it is at the crate root: [`LockInfo`](crate::LockInfo),
//!   [`LockKind`](crate::LockKind) and [`Capabilities`](crate::Capabilities)
//!   (declare what the backend supports:
//!   `Capabilities::ttl_leases().with_admin()`);
//! - cancel safety: [`detach`] runs one network attempt so that a caller
//!   who stops waiting cannot leave a hold behind, and
//!   [`detach_acquisition`] releases what such an acquisition got;
//! - waiting: [`acquire_with_backoff`], [`Backoff`] and [`bounded_delay`] for
//!   backends that must look again rather than be told; [`admitted`] (and
//!   [`admits_newcomer`]) for backends that keep a line: which waiters a
//!   change lets in, so that it wakes only those; [`Lines`] for backends
//!   that wait once per name on the server and line their other tasks up
//!   in-process behind that wait;
//! - lease arithmetic: [`valid_until`] turns a server's remaining lease
//!   into a local deadline (with the clock-drift allowance);
//!   [`SessionDeadline`] for session leases; [`ServerClock`] tells a
//!   step of a server's wall clock (which ends its stored leases early)
//!   from its readings against this process's monotonic clock;
//! - names, owners and attempt ids: [`validate_name`], [`random_owner`],
//!   [`new_attempt_id`], [`check_attempt_id`];
//! - configuration: [`ConnectUrl`] parses a backend's URL, [`redact`]
//!   hides its password in messages, [`BackendSchemes`] registers a scheme.

pub use crate::admission::{Held, admits_newcomer, admitted};
pub use crate::async_trait;
pub use crate::backend::{
    AcquireRequest, ExtendOutcome, Hold, HolderWatch, Lease, LockBackend, ReleaseOutcome, TryAcquire,
};
pub use crate::backoff::{Backoff, acquire_with_backoff, bounded_delay};
pub use crate::detach::{detach, detach_acquisition};
pub use crate::lease::{SessionDeadline, drift_allowance, valid_until};
pub use crate::line::{Joined, Lines, Place};
pub use crate::name::{
    ATTEMPT_ID_LEN, MAX_NAME_BYTES, MAX_OWNER_BYTES, check_attempt_id, is_attempt_id, new_attempt_id, random_owner,
    validate_name, validate_owner,
};
pub use crate::options::ttl_millis;
pub use crate::server_clock::{ClockStep, ServerClock};
pub use crate::url::{
    BackendSchemes, ConnectUrl, Connecting, Connector, HostPort, decode_component, is_scheme, redact,
};
