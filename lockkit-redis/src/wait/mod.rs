//! Waiting without polling: one pub/sub connection per backend (per node for
//! Redlock), shared by every waiter.
//!
//! A waiter subscribes to its lock's channel *before* it tries again, so a
//! release between its attempt and its sleep is never missed; it then sleeps
//! until a release message arrives or the holder's lease runs out,
//! whichever comes first. Subscriptions are counted per channel: the first
//! waiter on a name sends `SUBSCRIBE`, the last one to leave (acquired, timed
//! out, or dropped) `UNSUBSCRIBE`.
//!
//! A release message wakes **one** local waiter of that name (the next in
//! line), not all of them: the Redis commands spent per hand-off do not grow
//! with the number of waiters in a process. The woken waiter carries a
//! [`Baton`]: if it gives up without a definite answer (cancelled, or its
//! attempt failed), the baton wakes the next waiter instead.
//!
//! Across processes, the waiting clients queue on the server (see the key
//! layout in `layout`), and each also listens on a channel of its own per
//! name: a release message goes to the client whose turn it is, which
//! wakes a waiter at once, and to the next in line, which only arms a
//! short fallback timer, cancelled when the lock is announced as taken, so
//! a client that crashed while queued delays a hand-off by that much once
//! and is then dropped from the queue. The clients further back hear
//! nothing: a hand-off costs two messages however many clients wait.
//!
//! When a pub/sub connection drops, messages may be lost while it is down:
//! after it is back (and resubscribed) every name with waiters gets one
//! wake-up.
//!
//! The registry of waiters is here ([`Waiters`]); the pub/sub connections
//! and the messages they bring are in `pubsub`, one waiter's registration in
//! `subscription`, and the wait loop of an acquisition in `wait_loop`.

mod pubsub;
mod pubsub_conn;
mod state;
mod subscription;
mod wait_loop;
mod waiters;

pub(crate) use pubsub_conn::PubSubConn;
pub(crate) use state::{Leave, UNKNOWN_LEASE_RECHECK};
pub(crate) use wait_loop::{Attempt, wait_loop};
pub(crate) use waiters::Waiters;
