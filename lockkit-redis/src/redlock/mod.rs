//! Redlock over N independent Redis masters: see [`RedlockBackend`].
//!
//! The backend's type, its nodes, connecting and the calls to every node
//! are in `nodes`; one acquisition attempt in `acquire`; the quorum
//! arithmetic (agreement on a token, validity after clock drift, the
//! holder a quorum reports) in `quorum`; semaphores and read-write locks
//! in `kinds`; the `LockBackend` impl on top, in `backend`.

mod acquire;
mod backend;
mod kinds;
mod nodes;
mod quorum;

pub use nodes::RedlockBackend;
