//! The refusal of a connection pooler that shares server sessions
//! (PgBouncer `pool_mode=transaction` or `statement`): it hands a server
//! session to other clients between transactions, and a session lock stays
//! on that session, where another client's try of the same lock succeeds
//! (Postgres counts it as a re-entry of the session). `connect` refuses
//! what the probe finds (`lockkit_sql::raw::resolve_pooler`); a try that
//! finds itself on another server session than its connection's is
//! refused the same way.

use lockkit_core::LockError;
use lockkit_sql::Pooler;

/// The configuration error for session mode behind `pooler` (`None`: a
/// try found its statement on another server session, by a pooler of
/// either kind).
pub(crate) fn refused(pooler: Option<Pooler>) -> LockError {
    let pooling = match pooler {
        Some(p) => p.describe(),
        None => "transaction or statement pooling",
    };
    LockError::config(
        "query parameter mode",
        format!(
            "mode=session cannot run behind a connection pooler in {pooling} (PgBouncer \
             pool_mode=transaction/statement): the pooler hands a server session to other clients \
             between transactions, and a session lock held there would be theirs too. Connect \
             straight to Postgres (or through a pooler in session mode), or use the table mode \
             (leave out mode=session)"
        ),
    )
}
