//! The statements of semaphores and read-write locks, for every dialect:
//! two companion tables, `<table>_kinds` (one row per name of a kind: the
//! semaphore's permit count, the name's token counter and its last write
//! token) and `<table>_holds` (one row per hold — a permit, a reader's or
//! the writer's hold). Their waiters stand in the mutex's line table,
//! `<table>_waiters`, under the line key of `wait::line_key`; the
//! `queued` column of `<table>_holds` is no longer written (an older
//! lockkit kept places there).
//!
//! Statements are written once with `$n` placeholders, each argument used
//! once and in order, and turned into each dialect's (`?n` for SQLite, `?`
//! for MySQL) by [`placeholders`].

use std::sync::Arc;

use lockkit_core::LockKind;

use super::guard::GuardStatements;
use super::kinds_text::{KindText, Words, placeholders, plus, remaining};
use crate::config::Dialect;

/// A kind family's code in the tables (a name's holds of one family share
/// its rows; the families and the mutex exclude each other through the
/// guard row, `guard.rs`).
pub(crate) fn family(kind: LockKind) -> i64 {
    match kind {
        LockKind::Permit { .. } => 1,
        _ => 2,
    }
}

/// The statements of semaphores and read-write locks for one lock table.
#[derive(Debug, Clone)]
pub(crate) struct KindStatements {
    /// `(family, name)` → `(permits, last_token, last_write)`, locking the
    /// name's row to the end of the transaction (SQLite: the transaction
    /// holds the file's write lock already).
    pub lock_name: Arc<str>,
    /// The same read without a lock: a waiter's look whether the line
    /// moved (see `kinds/name.rs`).
    pub peek_name: Arc<str>,
    /// `(family, name)`: makes the name's row if it is missing.
    pub ensure_name: Arc<str>,
    /// `(family, name)` → the live holds `(seq, owner, token, writer,
    /// attempts, remaining_us)` in `seq` order (the order granted).
    ///
    /// Read in one round trip with the name's line: `(line key, attempt,
    /// line key, attempt, line key, family, name)` → first a row `(-1, '',
    /// writer ahead, others, head, 0)` of the name's line in
    /// `<table>_waiters`, counting only live waiters (see [`alive`](super::fragments::alive)): 1
    /// when a writer waits ahead of the attempt (anywhere in line for an
    /// attempt not in it), 1 when anybody else waits, the attempt id first
    /// in line ('' for none); and the holds. Unsorted: the reader sorts by
    /// `seq` (a sorted UNION costs MariaDB a temporary table on disk).
    pub rows: Arc<str>,
    /// `(attempt)`: takes a served attempt's place out of the line, in the
    /// claim's transaction.
    pub served: Arc<str>,
    /// `(permits, last_token, last_write, family, name)`.
    pub set_name: Arc<str>,
    /// `(family, name, seq, owner, token, writer, queued, attempts,
    /// ttl_us)`: a new hold or place in line.
    pub insert: Arc<str>,
    /// `(attempt, attempt, ttl_us, family, name, seq)`: the share of
    /// `attempt` joins a hold (once: a repeat changes nothing), in place —
    /// a release that takes another share out meanwhile (releases take no
    /// lock on the name) is not undone; the lease never shortens.
    pub join: Arc<str>,
    /// `(family, name, seq)` → `(attempts)` of a hold.
    pub shares_of: Arc<str>,
    /// `(family, name, owner, token, writer, attempt)`: deletes the live
    /// hold whose one share is `attempt`'s (Postgres, SQLite: → its `seq`
    /// as a row; MySQL: counts rows). Postgres adds `(line key, line key)`
    /// and notifies as [`notify`](Self::notify) does. Releases take no lock
    /// on the name: a hold only goes, which no claim can get wrong (one
    /// that read it still there waits for the wake-up the release sends),
    /// and a share that joins it meanwhile changes its row, which the
    /// delete then does not match.
    pub release_last: Arc<str>,
    /// `(attempt, family, name, owner, token, writer, attempt, attempt)`:
    /// takes `attempt`'s share out of a live hold of more than one →
    /// `(shares left)` as a row (MySQL: the OK packet's insert id).
    pub release_one: Arc<str>,
    /// `(attempt, family, name, owner, token, writer)` → `(shares,
    /// has_share)` of the live hold, `has_share` > 0 while `attempt`'s
    /// share is in it.
    pub share: Arc<str>,
    /// Whether `release_last` and `release_one` return rows.
    pub returns_rows: bool,
    /// `(family, name, writer)` → `(owner, attempts, token, remaining_us)`
    /// of the live holds, in the order granted.
    pub holders: Arc<str>,
    /// Postgres: `(line key, line key, seq)`: notifies the table's channel
    /// with the line key and the `seq` of the hold that came or went,
    /// unless nobody is on the key's wait list (as a mutex's release does,
    /// see `wait/waitlist.rs`).
    pub notify: Option<Arc<str>>,
    /// Postgres: a new hold's writes as one statement — `set_name`,
    /// `insert`, `served` and `notify` (each round trip is one more the
    /// name's row stays locked): `(permits, seq, last_write, family, name,
    /// seq, owner, token, writer, attempt, ttl_us, queued, room, line key)`,
    /// `queued` and `room` 0 or 1.
    pub grant: Option<Arc<str>>,
    /// `(batch)`: deletes at most `batch` expired rows; counts rows.
    pub sweep: Arc<str>,
    /// The guard rows that keep the mutex and the other family off a
    /// name with holds (see `guard.rs`).
    pub guard: GuardStatements,
    dialect: Dialect,
    holds: String,
    /// The two tables' names, unquoted.
    tables: [String; 2],
}

/// The tables, as `migrate` creates them (object name, DDL).
pub(crate) fn create(dialect: Dialect, table: &str) -> Vec<(String, Arc<str>)> {
    let q = Words::of(dialect).quote;
    let (int, bytes, text, time, tail) = match dialect {
        Dialect::Mysql => (
            "BIGINT",
            "VARBINARY(255)",
            "MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin",
            "DATETIME(6)",
            " ENGINE=InnoDB",
        ),
        Dialect::Postgres => ("BIGINT", "BYTEA", "TEXT", "TIMESTAMPTZ", ""),
        Dialect::Sqlite => ("INTEGER", "BLOB", "TEXT", "INTEGER", ""),
    };
    let (kinds, holds) = (format!("{table}_kinds"), format!("{table}_holds"));
    vec![
        (
            kinds.clone(),
            format!(
                "CREATE TABLE IF NOT EXISTS {q}{kinds}{q} (family {int} NOT NULL, name {bytes} NOT NULL, \
                 permits {int} NOT NULL DEFAULT 0, last_token {int} NOT NULL DEFAULT 0, \
                 last_write {int} NOT NULL DEFAULT 0, PRIMARY KEY (family, name)){tail}"
            )
            .into(),
        ),
        (
            holds.clone(),
            format!(
                "CREATE TABLE IF NOT EXISTS {q}{holds}{q} (family {int} NOT NULL, name {bytes} NOT NULL, \
                 seq {int} NOT NULL, owner {bytes} NOT NULL, token {int} NOT NULL, writer {int} NOT NULL, \
                 queued {int} NOT NULL, attempts {text} NOT NULL, expires_at {time} NOT NULL, \
                 PRIMARY KEY (family, name, seq)){tail}"
            )
            .into(),
        ),
    ]
}

impl KindStatements {
    /// The statements of the lock table `table`'s kinds on `dialect`.
    pub fn new(dialect: Dialect, table: &str) -> Self {
        let x = KindText::new(dialect, table);
        KindStatements {
            lock_name: x.lock_name(),
            peek_name: x.peek_name(),
            ensure_name: x.ensure_name(),
            rows: x.rows(),
            served: x.served(),
            set_name: x.set_name(),
            insert: x.insert(),
            join: x.join(),
            shares_of: x.shares_of(),
            release_last: x.release_last(),
            release_one: x.release_one(),
            share: x.share(),
            returns_rows: dialect != Dialect::Mysql,
            holders: x.holders(),
            notify: (dialect == Dialect::Postgres).then(|| x.notify()),
            grant: (dialect == Dialect::Postgres).then(|| x.grant()),
            sweep: x.sweep(),
            guard: GuardStatements::new(dialect, table),
            dialect,
            holds: x.h,
            tables: [format!("{table}_kinds"), format!("{table}_holds")],
        }
    }

    /// Whether `object` is one of these statements' tables.
    pub fn owns(&self, object: &str) -> bool {
        self.tables.iter().any(|t| t == object)
    }

    /// `(ttl_us, (family, name, owner, token, writer) × n)`: extends `n`
    /// live holds in one statement (the lease never shortens).
    pub fn extend_many(&self, n: usize) -> Arc<str> {
        let (h, w) = (&self.holds, Words::of(self.dialect));
        placeholders(
            self.dialect,
            &format!(
                "UPDATE {h} SET expires_at = {}(expires_at, {}) WHERE queued = 0 AND expires_at > {} \
                 AND (family, name, owner, token, writer) IN ({})",
                w.greatest,
                plus(self.dialect, "$1"),
                w.now,
                self.tuples(n, 2)
            ),
        )
    }

    /// `((family, name, owner, token, writer) × n)` → rows `(family, name,
    /// owner, token, writer, remaining_us)` of those holds that are live.
    pub fn read_back(&self, n: usize) -> Arc<str> {
        let (h, w) = (&self.holds, Words::of(self.dialect));
        placeholders(
            self.dialect,
            &format!(
                "SELECT family, name, owner, token, writer, {} FROM {h} WHERE queued = 0 AND expires_at > {} \
                 AND (family, name, owner, token, writer) IN ({})",
                remaining(self.dialect),
                w.now,
                self.tuples(n, 1)
            ),
        )
    }

    /// `n` tuples of five placeholders from `$first` on.
    fn tuples(&self, n: usize, first: usize) -> String {
        let list = (0..n)
            .map(|i| {
                let b = first + 5 * i;
                format!("(${}, ${}, ${}, ${}, ${})", b, b + 1, b + 2, b + 3, b + 4)
            })
            .collect::<Vec<_>>()
            .join(", ");
        match self.dialect {
            Dialect::Sqlite => format!("VALUES {list}"),
            _ => list,
        }
    }
}
