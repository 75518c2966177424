//! What a second SQL backend built on this crate's configuration needs
//! (the session mode, `lockkit-sql-session`): how a sqlx error is to be
//! treated, and the [`LockError`](lockkit_core::LockError) it becomes.
//! Applications do not need this module.

pub use crate::error::{Class, backend_error, classify};
