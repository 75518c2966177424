//! Redlock (`redlock://`): the conformance kit on the shared five nodes, and
//! scenarios on private `redis-server` nodes that go down or lose their keys.

#[path = "../common/mod.rs"]
mod common;

mod clock_step;
mod kit;
mod processes;
mod restart_guard;
mod scenarios;
