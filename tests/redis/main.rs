//! The Redis backend (single node, sentinel, cluster): the conformance kit
//! on the shared servers, and scenarios on private `redis-server` processes
//! (auth, TLS, restarts, failover, partial failures, replica
//! acknowledgements, waiting, the watchdog). Redlock has its own binary.

#[path = "../common/mod.rs"]
mod common;

mod auth;
mod clock_step;
mod cluster_kit;
mod failover;
mod harness;
mod kinds;
mod kit;
mod layout;
mod partial_failure;
mod processes;
mod recovery;
mod restart_guard;
mod sentinel_failover;
mod sentinel_kit;
mod tls;
mod wait_replicas;
mod waiting;
mod watchdog;
