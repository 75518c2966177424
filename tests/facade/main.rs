//! The backend-independent tests of the facade: the memory backend's
//! conformance kit, URL dispatch and client options, `LockConfig`, the
//! bad-input matrix, and fencing end to end on every backend.

#[path = "../common/mod.rs"]
mod common;

mod bad_input;
mod client;
mod config;
mod fencing;
mod memory_kit;
