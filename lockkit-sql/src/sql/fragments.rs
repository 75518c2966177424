//! Pieces of SQL text that the statement builders of this layer share:
//! each database's clock and the remaining lease by it, Postgres's
//! no-flush setting of the line's statements, the share count of an
//! `attempts` value, and whether a waiter's process lives ([`alive`]).

use std::sync::Arc;

use crate::config::Dialect;

/// A statement's text, as statements are kept.
pub(super) fn s(text: String) -> Arc<str> {
    text.into()
}

/// SQLite's clock in microseconds since the epoch (millisecond resolution).
pub(super) const SQLITE_NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

/// Microseconds of the interval `x` as an int8 (Postgres).
pub(super) fn pg_us(x: &str) -> String {
    format!("(extract(epoch from ({x})) * 1000000)::int8")
}

/// Postgres, as a one-row subquery of a statement that writes only the
/// fair line (joining, leaving, renewing a place): its transaction's commit
/// does not wait for the flush to disk (see `Db::open_line`). Set locally
/// inside the statement, it is in force when the statement's own implicit
/// transaction commits, and gone after.
pub(super) const PG_NO_FLUSH: &str = "SELECT set_config('synchronous_commit', 'off', true)";

/// MySQL: microseconds from now to `expires_at`, at least 1.
pub(super) const MY_REMAINING: &str = "GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at))";

/// Whether the waiter row `w` belongs to a live process: each backend that
/// waits holds a liveness key (`wait/live.rs`) that its rows name in
/// `live` — MySQL/MariaDB a `GET_LOCK` on a connection of its own, Postgres
/// an advisory lock on its wait-list connection, both gone the moment the
/// server sees the connection close; SQLite, which has no server, a row of
/// `<table>_live` whose short lease the process renews. A row without a key
/// (an older lockkit's) lives by its lease alone. Postgres: the shared try
/// fails while the owner's session holds the key; on a dead key it takes a
/// shared lock to the end of the transaction, which nobody waits for.
pub(super) fn alive(dialect: Dialect, table: &str, w: &str) -> String {
    match dialect {
        Dialect::Mysql => format!("({w}.live IS NULL OR IS_USED_LOCK(CONCAT('lockkit-live-', {w}.live)) IS NOT NULL)"),
        Dialect::Postgres => format!("({w}.live IS NULL OR NOT pg_try_advisory_xact_lock_shared({w}.live))"),
        Dialect::Sqlite => format!(
            "({w}.live IS NULL OR EXISTS (SELECT 1 FROM \"{table}_live\" v WHERE v.id = {w}.live \
             AND v.expires_at > {SQLITE_NOW}))"
        ),
    }
}

/// The number of attempt ids in an `attempts` value `x`: the hold count
/// (Postgres, SQLite; MySQL's is in `mysql.rs`).
pub(super) fn shares(x: &str) -> String {
    format!("((length({x}) + 1) / 17)")
}
