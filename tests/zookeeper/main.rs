//! The ZooKeeper backend: the conformance kit (single server and ensemble),
//! and scenarios on the single server (a killed holder process, the herd,
//! semaphores and read-write locks, crowds and killed waiters over processes,
//! partial failures, attempts restarted in a new session, sessions cut off).
//! The ensemble's fault tests, which stop servers, are the
//! `zookeeper_ensemble` binary.

#[path = "../common/mod.rs"]
mod common;

mod acl;
mod crash;
mod fence;
mod herd;
mod kinds;
mod kit;
mod partial_failure;
mod processes;
mod restarted_attempt;
mod session;
mod stalled;
mod support;
mod uncontended;
