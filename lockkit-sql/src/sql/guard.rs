//! The guard row: how a semaphore or a read-write lock keeps the mutex
//! off its name ([one name, one lock](lockkit_core::contract#one-name-one-lock)).
//!
//! While a name has holds of one of those kinds, the lock table has a row
//! for the name whose owner is that kind's [`guard_owner`] (two bytes that
//! are not UTF-8, so never an owner id) and whose lease covers the holds.
//! The mutex's statements need no change: to them the row is a hold of
//! another owner, so a claim finds the name busy until the row's lease
//! ends or the guard is freed, and the row's unique key makes a mutex's
//! claim and a guard's take one at a time. A claim of the other family
//! finds another owner's guard and is busy too.
//!
//! Statements are written with `$n` placeholders, each argument used once
//! and in order (MySQL binds by position).

use std::sync::Arc;

use super::kinds_text::{Words, placeholders, plus, remaining};
use crate::config::Dialect;

/// The owner bytes of the guard row of the kind family `family` (see
/// `sql::family`): 0xFF (never in UTF-8) and the family.
pub(crate) fn guard_owner(family: i64) -> [u8; 2] {
    [0xFF, family as u8]
}

/// Whether `owner` (a lock table row's) is a guard row's.
pub(crate) fn is_guard_owner(owner: &[u8]) -> bool {
    owner.len() == 2 && owner[0] == 0xFF
}

/// The guard row's statements for one lock table.
#[derive(Debug, Clone)]
pub(crate) struct GuardStatements {
    /// `(name, guard owner)`: makes the name's row (expired) if it has none.
    pub ensure: Arc<str>,
    /// `(name)` → `(owner, remaining_us)`, locking the row to the end of
    /// the transaction (SQLite: the transaction holds the write lock).
    pub lock: Arc<str>,
    /// `(guard owner, ttl_us, guard owner, name)`: the row becomes the
    /// guard, its lease at least `ttl` from now (an expired row's is
    /// replaced).
    pub take: Arc<str>,
    /// `(guard owner, family, name, name)`: frees the guard (expired, no
    /// owner, as a mutex's release frees a row for its line) unless a live
    /// hold of the family stands on the name.
    pub free: Arc<str>,
    dialect: Dialect,
    table: String,
}

impl GuardStatements {
    /// The statements of the lock table `table` on `dialect`.
    pub fn new(dialect: Dialect, table: &str) -> Self {
        let w = Words::of(dialect);
        let q = w.quote;
        let (t, h) = (format!("{q}{table}{q}"), format!("{q}{table}_holds{q}"));
        let now = w.now;
        let insert = match dialect {
            Dialect::Mysql => "INSERT IGNORE INTO",
            Dialect::Postgres => "INSERT INTO",
            Dialect::Sqlite => "INSERT OR IGNORE INTO",
        };
        let nothing = if dialect == Dialect::Postgres {
            " ON CONFLICT (name) DO NOTHING"
        } else {
            ""
        };
        let no_owner = match dialect {
            Dialect::Mysql => "X''",
            Dialect::Postgres => "''::bytea",
            Dialect::Sqlite => "x''",
        };
        let p = |text: String| placeholders(dialect, &text);
        GuardStatements {
            ensure: p(format!(
                "{insert} {t} (name, owner, hold_count, token, expires_at, acquired_at, attempts) \
                 VALUES ($1, $2, 0, 0, {now}, {now}, ''){nothing}"
            )),
            lock: p(format!(
                "SELECT owner, {} FROM {t} WHERE name = $1{}",
                remaining(dialect),
                w.for_update
            )),
            // MySQL assigns left to right: the lease first, from the row's
            // owner before the change.
            take: p(format!(
                "UPDATE {t} SET expires_at = {g}(CASE WHEN owner = $1 AND expires_at > {now} THEN expires_at \
                 ELSE {now} END, {ttl}), hold_count = 0, owner = $3 WHERE name = $4",
                g = w.greatest,
                ttl = plus(dialect, "$2"),
            )),
            free: p(format!(
                "UPDATE {t} SET owner = {no_owner}, hold_count = 0, expires_at = {now} WHERE owner = $1 \
                 AND NOT EXISTS (SELECT 1 FROM {h} WHERE family = $2 AND name = $3 AND queued = 0 \
                 AND expires_at > {now}) AND name = $4"
            )),
            dialect,
            table: t,
        }
    }

    /// `(ttl_us, (guard owner, name) × n)`: extends the live guards of `n`
    /// names to at least `ttl` from now, as their holds were (the lease
    /// never shortens).
    pub fn extend_many(&self, n: usize) -> Arc<str> {
        let (t, w) = (&self.table, Words::of(self.dialect));
        let list = (0..n)
            .map(|i| format!("(${}, ${})", 2 + 2 * i, 3 + 2 * i))
            .collect::<Vec<_>>()
            .join(", ");
        let list = match self.dialect {
            Dialect::Sqlite => format!("VALUES {list}"),
            _ => list,
        };
        placeholders(
            self.dialect,
            &format!(
                "UPDATE {t} SET expires_at = {}(expires_at, {}) WHERE expires_at > {} AND (owner, name) IN ({list})",
                w.greatest,
                plus(self.dialect, "$1"),
                w.now
            ),
        )
    }
}
