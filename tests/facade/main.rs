//! The backend-independent tests of the facade: the memory backend's
//! conformance kit, URL dispatch and client options, `LockConfig`, the
//! bad-input matrix, fencing end to end on every backend, and the blocking
//! API.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
#[cfg(feature = "blocking")]
mod blocking;
mod client;
mod config;
mod fencing;
mod memory_kit;
