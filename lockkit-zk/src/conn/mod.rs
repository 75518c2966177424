//! Sessions: one live ZooKeeper session per backend, its state turned into
//! loss signals, and a new session after expiry.
//!
//! Every lease hangs off the *connection epoch* it was proven in: a token
//! cancelled as soon as the connection is suspended (`Disconnected`) and
//! replaced by a fresh one when it is back (`SyncConnected`, same session).
//! A holder cannot know whether its session survives a disconnection, so it
//! must stop at once: another owner may acquire as soon as the session
//! expires on the server, and the client hears of that only later.
//!
//! Each held node is also watched (a get-data watch, re-armed on data
//! changes), so a node that disappears — deleted by an operator — fires the
//! loss too. A lease rests on its own session's node only (its contender
//! node, or its share node of a hold another session's node carries).
//!
//! In [`session`] the [`Session`](session::Session) and the backend's
//! [`Sessions`](session::Sessions), in [`connect`] making a session, in
//! [`watch`] the held nodes' watches, in [`heartbeat`] the session's
//! deadline, in [`liveness`] its liveness record, in [`reconnect`] waiting
//! out a lost connection.

mod acl;
mod arming;
mod connect;
pub(crate) mod counters;
pub(crate) mod heartbeat;
pub(crate) mod liveness;
mod mutex;
pub(crate) mod reconnect;
pub(crate) mod seq_guess;
pub(crate) mod session;
mod watch;
