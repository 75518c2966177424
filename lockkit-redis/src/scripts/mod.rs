//! The Lua scripts: every change to a lock is one script call, so one
//! round trip and atomic. Semaphores and read-write locks have scripts of
//! their own (`kinds`), with the same arguments and replies where they
//! can; the mutex's are untouched by them. The scripts' sources are the files in `lua/`;
//! their arguments and replies are documented here, on each constant (one
//! file per family: acquire, release, extend, inspect; `take_back` sends a
//! release or an undo to the script of the hold's kind). The keys they
//! work on are described in `layout`.
//!
//! # Attempts
//!
//! Every acquisition attempt carries an id (one per `lock` call); the hold
//! keeps one share per attempt (`ID:AT,` in a mutex's value, an `a:ID`
//! field of a semaphore's or read-write lock's hash), so the count is
//! their number. An attempt whose share is already there is a repeat —
//! lockkit's retry after a lost reply, or a command a client library sent
//! again — and changes nothing; a release takes its attempt's share out,
//! and a release whose share is gone changes nothing either. Every script is therefore safe to run twice.
//!
//! # Tokens
//!
//! A first acquisition takes `max(counter + 1, server time in µs)` from the
//! name's counter. Tokens therefore grow strictly per name, and even a server
//! that lost its counter (restart without persistence, failover to a lagging
//! replica) keeps issuing greater tokens — unless its clock is behind the
//! clock that issued the old ones. Tokens stay below 2^53 (until the year
//! 2255), so Lua's doubles hold them exactly.

mod acquire;
mod call;
mod extend;
mod guard;
mod inspect;
mod kinds;
mod leave;
mod release;
mod reply;
mod take_back;

pub(crate) use acquire::{AcquireReply, Claim, Queueing, Share, Slot, acquire};
pub(crate) use call::{ClockReading, Publish, Replicas, read_clock};
pub(crate) use extend::{ExtendItem, Extended, extend};
pub(crate) use guard::{Marker, check_clock, read_marker, set_quarantine};
pub(crate) use inspect::{Stored, inspect, scan};
pub(crate) use kinds::{holders, nonce};
pub(crate) use leave::{Leaving, leave_line};
pub(crate) use release::{LineAfter, ReleaseOf, Released, Telling, UndoOf, UndoThen, force_release};
pub(crate) use reply::millis;
pub(crate) use take_back::{release, undo};

#[cfg(test)]
mod tests;
