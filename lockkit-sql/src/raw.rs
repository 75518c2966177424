//! What a second SQL backend built on this crate's configuration needs
//! (the session mode, `lockkit-sql-session`): how a sqlx error is to be
//! treated, the [`LockError`](lockkit_core::LockError) it becomes, and
//! whether a connection pooler that shares server sessions stands between
//! the client and Postgres ([`resolve_pooler`]). Applications do not need
//! this module.

pub use crate::conn::pooler::resolve_pooler;
pub use crate::error::{Class, backend_error, classify};
