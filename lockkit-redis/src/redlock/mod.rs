//! Redlock over N independent Redis masters: see [`RedlockBackend`].
//!
//! The files keep the single-server backend's roles: the backend's type,
//! its nodes, connecting and the calls to every node in `nodes`;
//! acquiring in `acquire` (the rounds of one attempt over the nodes in
//! `rounds`, their answers sorted in `answers`, an attempt taken back in
//! `undo`); releasing and the operator's forced release in `release`;
//! extending in `extend`; inspecting and listing in `inspect`; the quorum
//! arithmetic (agreement on a token, validity after clock drift, the
//! holder a quorum reports) in `quorum`; semaphores and read-write locks
//! in `kinds`; the restart guard's quarantine of a node that lost its
//! data in `guard`; and the `LockBackend` impl, delegating to them, in
//! `backend`.

mod acquire;
mod answers;
mod backend;
mod extend;
mod guard;
mod inspect;
mod kinds;
mod nodes;
mod quorum;
mod release;
mod rounds;
mod undo;

pub use nodes::RedlockBackend;
