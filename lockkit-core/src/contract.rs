//! The contract every backend keeps. The conformance kit (`testkit`, with
//! the feature of that name) checks each point against each backend with a
//! real server, one named case per point. Code that keeps a point cites it
//! by its heading: `contract#fair-by-default`.
//!
//! ## Mutual exclusion
//!
//! While a lease is valid, no two owners hold a name.
//!
//! ## Re-entry by owner
//!
//! An owner id (random 128-bit per client by default; settable, shared by
//! processes that should share holds) re-enters with a hold count kept by
//! the server; the fencing token does not change on re-entry. Clones of a
//! client share its owner: `client.with_new_owner()` gives independent
//! contenders in one process. On ZooKeeper each session's share of a shared
//! hold lives in a node of that session: the hold stands while any of them
//! does, and each process's guard rests on its own session alone.
//!
//! ## try_lock never waits
//!
//! `try_lock` returns `Ok(None)` at once when another owner holds the name.
//!
//! ## lock waits, cancel safe
//!
//! `lock` waits up to its bound and is cancel safe: dropping the future
//! leaves no hold and no queue entry. On ZooKeeper a `lock` that gives up
//! returns once its queued node is gone, which on a lost or slow connection
//! can take up to one session timeout past the bound (see
//! [attempts are idempotent](#attempts-are-idempotent)).
//!
//! ## Only the holder releases
//!
//! Releasing a lock one no longer holds changes nothing and says `NotHeld`.
//!
//! ## Leases
//!
//! TTL backends hold for `ttl`; one watchdog task per client extends every
//! held lock at ttl/3, batched where the backend can.
//!
//! ## Lost-lock signal
//!
//! `guard.lost()` and `guard.is_lost()` fire when the holder can no longer
//! be sure, no later than the moment another owner could acquire.
//! `is_lost()` also compares the lease's deadline with the clock (on
//! ZooKeeper, the session's: a session timeout after the last request the
//! server answered), so a process that did not run past its lease
//! (stopped, swapped out, starved) knows at its first look.
//!
//! ## Fencing tokens
//!
//! Tokens strictly increase per name.
//!
//! ## Crash release
//!
//! A dead holder's lock comes free after its ttl (or its session).
//!
//! ## Names
//!
//! A name is 1 to 255 bytes of UTF-8, any characters.
//!
//! ## Typed errors
//!
//! Failures are `LockError`s naming the backend and the lock, with their
//! causes chained.
//!
//! ## Fair by default
//!
//! Waiters get a name in the order they began waiting; a client that just
//! released it, or a `try_lock`, does not take it ahead of those queued;
//! re-entry by the holder stays immediate; a waiter that dies leaves the
//! queue within a bound (on ZooKeeper the waiter behind it takes its node
//! out about 0.3–0.4 s after its process stopped; on Redis its turn passes
//! after 200–400 ms). `fair=false` (URL) or `LockOptions::fair(false)` lets
//! whoever asks first after a release take it ("barging"), for raw
//! throughput. `client.waiting(name)` counts the queue (on Redis the queued
//! clients). A backend declares it with `Capabilities::fair`.
//!
//! ## Attempts are idempotent
//!
//! Every `lock`/`try_lock` call carries an attempt id that the server
//! records with its share of the hold, so a retried acquisition, re-entry
//! or release (lockkit's own after a lost reply, or a command a client
//! library sent again) takes effect once: never an extra hold count, never
//! a double decrement. A `lock` that fails after it may have been granted
//! (a reply lost to a timeout) takes its share back before it returns the
//! error, and again in the background while a late command could still
//! land. On ZooKeeper, where a queued node that comes first is its owner's
//! hold, a failed `lock` takes its node out before it returns, trying again
//! while the connection is lost or slow for up to one session timeout (by
//! then the server has ended a session it could not hear); a dropped `lock`
//! future does it in the background. On Redlock a hold is the quorum's:
//! re-entries count only where a quorum holds the owner's token, and every
//! guard rests on a quorum of its own shares.
