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
//! ## One name, one lock
//!
//! A name is one lock whatever the kind: a mutex, a semaphore's permits
//! ([`LockKind::Permit`](crate::LockKind::Permit)) and a read-write lock's
//! read and write holds of one name never stand together (read and write
//! holds follow the read-write lock's own rules; permits of one name follow
//! the semaphore's, and a request with another permit count is a
//! `Conflict` while the semaphore is in use). While the name is held as
//! one kind, a request of another kind is busy (`try_lock`, `try_acquire`,
//! `try_read`, `try_write`: `Ok(None)`), and a waiting one (`lock`,
//! `acquire`, `read`, `write`) is granted once the other kind's holds are
//! gone, or fails with `WaitTimeout` when its bound runs out. That holds
//! for the owner of those holds too: a holder that asks for its own name
//! as another kind waits for itself. `inspect(name)` answers whatever the
//! kind, and `LockInfo::kind` names the kind that holds the name (the
//! first hold of a semaphore or read-write lock). The shared rule is
//! [`LockKind::same_lock`](crate::LockKind::same_lock) and, for backends
//! that keep a line, [`raw::admitted`](crate::raw::admitted).
//!
//! How each backend makes it atomic, and how a waiter kept out by another
//! kind learns that the name came free:
//!
//! - memory: one line per name for every kind, in arrival order (FIFO
//!   across kinds); a release wakes the waiters it admits, whatever their
//!   kind.
//! - SQL table: a semaphore's or read-write lock's holds keep a guard row
//!   in the lock table (the mutex's unique row of the name), taken in the
//!   claim's transaction and freed by the last release under the name's
//!   row lock, so the unique key orders a mutex's claim and a guard's take.
//!   Each kind keeps its own line: a waiter kept out by another kind is
//!   woken at once by a release in its own process; in another process the
//!   head of its line looks again on its backoff (at most `max_backoff`,
//!   250 ms; Postgres 1 s). A crashed holder's guard ends with the longest
//!   of its holds' leases.
//! - SQL session locks (`mode=session`), `file_lock`: the mutex is the only
//!   kind; the others are `Unsupported`.
//! - Redis and Redlock: each kind keeps its keys, and every acquisition
//!   script reads the other kinds' keys of the name (one hash slot: the
//!   same tag) and refuses a new hold while theirs stand. Each kind keeps
//!   its own line and channels: a waiter kept out by another kind looks
//!   again after at most 200 ms (or when the other holds' leases end).
//! - ZooKeeper: one line per name for every kind (every contender node
//!   under the name's one parent, in sequence order): a mutex or writer
//!   holds when first, a permit when only fewer than N permits are ahead,
//!   a reader when only readers are; each waiter watches the node ahead
//!   that keeps it out, whatever its kind (FIFO across kinds, no herd).
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
