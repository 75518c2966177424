//! [`Statements`]: one database's statements for one lock table, as each
//! dialect's file fills them in, and [`ClaimShape`], how a claim reports
//! what it did; also the statements built per call for a number of rows
//! (`renew_many`, `extend_many`), whose text differs by a line per
//! dialect.

use std::sync::Arc;

use super::fragments::{MY_REMAINING, PG_NO_FLUSH, SQLITE_NOW, pg_us};
use crate::config::Dialect;

/// How a claim reports what it did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClaimShape {
    /// One row `(acquired, hold_count, token, remaining_us)`: acquired = 1
    /// for our hold, 0 for the holder's row; no row: busy, holder unknown.
    Rows,
    /// One row `(hold_count, token, remaining_us)` if we hold it; no row:
    /// busy, ask [`Statements::holder`].
    RowsOrHolder,
    /// MySQL, which has no `RETURNING`: one round trip carrying a whole
    /// transaction (see [`Statements::mysql_claim_batch`]), giving a row
    /// `(hold_count, token, remaining_us)` if we hold the name, and the
    /// claim's OK packet. Its affected rows (with `CLIENT_FOUND_ROWS`, which
    /// sqlx sets): 1 for an insert or an unchanged row, 2 for an update;
    /// `LAST_INSERT_ID(x)` in the update carries the holder's remaining
    /// microseconds when the row is left unchanged (busy).
    Batch,
}

/// One database's statements for one lock table.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    /// DDL run by `migrate`, in order, each with the name of the object it
    /// creates: a statement runs only when [`exists`](Self::exists) does not
    /// find its object, so a user without CREATE rights can use tables that
    /// exist (`CREATE … IF NOT EXISTS` checks the right first on MySQL and
    /// Postgres, and fails without it).
    pub create: Vec<(String, Arc<str>)>,
    /// `(object name)` → `(count)`: whether a table or sequence of that name
    /// exists in the current database/schema. Needs no privilege on it.
    pub exists: Arc<str>,
    /// Run by `migrate` once the lock table is checked, also with
    /// `create_table=false` (SQLite's token counter row and triggers).
    pub prepare: Vec<Arc<str>>,
    /// `(table)` → rows `(column_name TEXT, data_type TEXT)`.
    pub columns: Arc<str>,
    /// The data type the name column must have (lowercase), if checked.
    pub name_types: &'static [&'static str],
    /// `(name, owner, ttl_us, memo, attempt)`: insert, take over an expired
    /// row, or re-enter one's own; see [`ClaimShape`]. The row's `attempts`
    /// keeps the attempt id of each share of the hold (space-separated, so
    /// `hold_count` is their number): an attempt already in it is a repeat
    /// and changes nothing but the lease. (MySQL: the template of the
    /// batch's claim.)
    pub claim: Arc<str>,
    pub claim_shape: ClaimShape,
    /// `(name)` → `(remaining_us)` of the current row.
    pub holder: Arc<str>,
    /// MySQL: counter rows in `<table>_tokens`, names hashed over them.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub buckets: u64,
    /// `(name, owner, token, attempt)`: delete the hold whose one share is
    /// `attempt`'s; counts rows. A row marked `queued` (a fair waiter joined
    /// the name's line while it was held) is not deleted but left free —
    /// expired, no owner — so that a claim that finds no row for a name
    /// knows that nobody waits for it and need not read the line (MySQL,
    /// SQLite: by [`release_last_queued`](Self::release_last_queued)).
    pub release_last: Arc<str>,
    /// `(name, owner, token, attempt)`, run when `release_last` deleted
    /// nothing, where one statement cannot both delete and update (MySQL,
    /// SQLite; Postgres does both in one): frees the hold's row, marked
    /// `queued`; counts rows.
    pub release_last_queued: Option<Arc<str>>,
    /// `(attempt, name, owner, token)`: take `attempt`'s share out of a hold
    /// of more than one → `(hold_count)` left as a row, or (MySQL) the OK
    /// packet's insert id. A share already gone changes nothing and reports
    /// the count again (a repeated release).
    pub release_one: Arc<str>,
    /// `(attempt, name, owner, token)` → `(hold_count, has_share)` of the
    /// live hold, `has_share` > 0 while `attempt`'s share is in it.
    pub share: Arc<str>,
    /// `(column, DDL adding it)` for each column a lock table made by an
    /// older lockkit may lack, in order: `attempts` (the shares of a hold),
    /// `queued` (somebody waits in line for the name). `migrate` adds what
    /// is missing.
    pub added_columns: Vec<(&'static str, Arc<str>)>,
    /// `(ttl_us, name, owner, token)`: extend → `(remaining_us)` as a row,
    /// or (MySQL) the OK packet's insert id.
    pub extend: Arc<str>,
    /// `(name)` → `(owner, hold_count, token, remaining_us)` if held.
    pub inspect: Arc<str>,
    /// `(from, to, limit)` → `(name, owner, hold_count, token, remaining_us)`.
    pub list: Arc<str>,
    /// `(name, owner, token)`: delete whatever the count (a row marked
    /// `queued`: free it, as `release_last`); counts rows.
    pub delete_hold: Arc<str>,
    /// As [`release_last_queued`](Self::release_last_queued) for `delete_hold`.
    pub delete_hold_queued: Option<Arc<str>>,
    /// `(batch)`: delete at most `batch` expired rows — not one marked
    /// `queued` while a live waiter is in its line; counts rows.
    pub sweep: Arc<str>,
    /// Whether the release/delete statements count by returned rows
    /// (Postgres, which also `NOTIFY`s in them) instead of affected rows.
    pub deletes_return_rows: bool,
    /// Whether `release_one` and `extend` return a row (else: OK packet).
    pub updates_return_rows: bool,
    /// Postgres: `(name)` → take / drop a shared place on the name's wait
    /// list (a session advisory lock); a release notifies only when it cannot
    /// take the same key exclusively (see `wait/waitlist.rs`).
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub wait_join: Option<Arc<str>>,
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub wait_leave: Option<Arc<str>>,
    /// The fair claim (Postgres, SQLite; MySQL: see
    /// [`mysql_claim_batch_fair`](Self::mysql_claim_batch_fair)): the same
    /// arguments and shape as [`claim`](Self::claim) — Postgres adds a
    /// fifth column, `head` — but an expired row marked `queued` is taken
    /// only when nobody waits in `<table>_waiters` ahead of this attempt
    /// (its own waiter row, if any, is the oldest live one, or there is no
    /// live one). No row, or an expired one not marked: nobody waits (a
    /// waiter marks the row as it joins), so the claim takes it without
    /// reading the line — an uncontended claim costs what an unfair one
    /// does. Re-entry by the holder is taken at once. A claim that takes a
    /// marked row clears the mark when nobody else waits; one that finds
    /// the name held marks it (Postgres; MySQL), so a mark lost to a
    /// concurrent statement's older snapshot comes back. A claim that takes
    /// the name deletes the attempt's waiter row in the same statement
    /// (SQLite: by trigger).
    pub claim_fair: Arc<str>,
    /// Postgres: `claim_fair` for a name this process sees waiters for (or
    /// an attempt in line), which inserts nothing when it cannot win — so
    /// it takes no lock that the next waiter's take must wait for.
    pub claim_fair_contended: Option<Arc<str>>,
    /// Postgres: `(name, owner, ttl_us, memo, attempt)` → one row `(1,
    /// hold_count, token, remaining_us)` when the name had no row and is
    /// now ours; no row when it had one (held, re-entered, expired, or
    /// marked by a waiter: ask `claim`/`claim_fair`). Fair or not, a name
    /// without a row has no holder and nobody in line, so it is the first
    /// try of an uncontended name: a plain insert, without the conflict
    /// rules, the line and the mark, which make the full claim a costly
    /// statement for the most common case.
    pub claim_absent: Option<Arc<str>>,
    /// SQLite, after a fair claim found the name busy: `(name, attempt)` →
    /// `(remaining_us or -1 when free, head)`.
    pub holder_fair: Arc<str>,
    /// `(name, owner, attempt, lease_us, live)`: joins the name's line (or,
    /// for an attempt already in it, renews its lease) → its `id` as a row,
    /// and marks the name's row `queued` in the same transaction, making a
    /// free one if there is none (SQLite: by trigger; MySQL: see
    /// [`mysql_join_batch`](Self::mysql_join_batch)). `live`: the process's
    /// liveness key (see [`alive`](super::fragments::alive)), 0 for none.
    pub join: Arc<str>,
    /// `(line key, owner, attempt, lease_us, live, writer)`: a semaphore's
    /// or read-write lock's place in its line (the line key of
    /// `wait::line_key` in the `name` column, so that every kind's line is
    /// one table's), or its renewal → its `id` as a row (MySQL: the OK
    /// packet's insert id). No mark: the kinds' claims always read the line.
    pub kind_join: Arc<str>,
    /// `(column, DDL adding it)` for each column a waiter table made by an
    /// older lockkit lacks: `live`, `writer`. `migrate` adds what is missing.
    pub waiter_columns: Vec<(&'static str, Arc<str>)>,
    /// `(key)`: MySQL `GET_LOCK` / Postgres `pg_advisory_lock` of a
    /// process's liveness key, on the connection that carries it; SQLite
    /// `(key, lease_us)`: the upsert of its liveness row (see [`alive`](super::fragments::alive)).
    pub live_take: Arc<str>,
    /// SQLite: `(batch)`: deletes at most `batch` expired liveness rows.
    pub sweep_live: Option<Arc<str>>,
    /// `(attempt)`: leaves the line; counts rows. Postgres also notifies
    /// the name's channel when the row left was the head of its line.
    pub leave: Arc<str>,
    /// `(name)` → `(count)` of live waiter rows (also a kind's line key).
    pub waiting: Arc<str>,
    /// `(batch)`: delete at most `batch` expired waiter rows; counts rows.
    pub sweep_waiters: Arc<str>,
    pub(super) dialect: Dialect,
    pub(super) table: String,
}

impl Statements {
    /// The Postgres channel releases are announced on.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn channel(&self) -> String {
        format!("lockkit_{}", self.table)
    }

    /// The waiter table's name.
    pub fn waiters_table(&self) -> String {
        format!("{}_waiters", self.table)
    }

    /// The statement creating the waiter table (the one `migrate` runs, and
    /// names when it may not).
    pub fn create_waiters(&self) -> Option<&Arc<str>> {
        let w = self.waiters_table();
        self.create
            .iter()
            .find(|(object, _)| *object == w)
            .map(|(_, stmt)| stmt)
    }

    /// `(lease_us, attempt × n)`: renews the lease of `n` waiter rows in one
    /// statement; counts the rows found (MySQL: matched rows).
    pub fn renew_many(&self, n: usize) -> String {
        let t = &self.table;
        match self.dialect {
            Dialect::Mysql => format!(
                "UPDATE `{t}_waiters` SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
                 WHERE attempt IN ({})",
                vec!["?"; n].join(", ")
            ),
            Dialect::Postgres => format!(
                "UPDATE \"{t}_waiters\" SET expires_at = now() + $1::int8 * interval '1 microsecond' \
                 FROM ({PG_NO_FLUSH}) AS cfg WHERE attempt IN ({})",
                (0..n).map(|i| format!("${}", i + 2)).collect::<Vec<_>>().join(", ")
            ),
            Dialect::Sqlite => format!(
                "UPDATE \"{t}_waiters\" SET expires_at = {SQLITE_NOW} + ?1 WHERE attempt IN ({})",
                (0..n).map(|i| format!("?{}", i + 2)).collect::<Vec<_>>().join(", ")
            ),
        }
    }

    /// `extend_many` for `n` holds with one ttl: `(ttl_us, (name, owner,
    /// token) × n)` → rows `(name, owner, token, remaining_us)` of the holds
    /// that were extended. MySQL needs a second statement to read them back:
    /// the pair is `(update, Some(select))`, the select taking the triples only.
    /// Postgres takes `(ttl_us, names[], owners[], tokens[])` instead, any `n`.
    pub fn extend_many(&self, n: usize) -> (String, Option<String>) {
        let t = &self.table;
        match self.dialect {
            Dialect::Mysql => {
                // One hold by equalities: MariaDB plans `(name, owner,
                // token) IN ((?, ?, ?))` of a single triple as a scan of
                // the whole primary key, and the update then waits for the
                // lock of every row a claim has locked (two of them are a
                // range over the key, probing only those rows).
                let holds = if n == 1 {
                    "name = ? AND owner = ? AND token = ?".to_owned()
                } else {
                    format!("(name, owner, token) IN ({})", vec!["(?, ?, ?)"; n].join(", "))
                };
                (
                    format!(
                        "UPDATE `{t}` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) \
                         WHERE {holds} AND expires_at > UTC_TIMESTAMP(6)"
                    ),
                    Some(format!(
                        "SELECT name, owner, token, {MY_REMAINING} FROM `{t}` \
                         WHERE {holds} AND expires_at > UTC_TIMESTAMP(6)"
                    )),
                )
            }
            // The names as an index condition and no join: a lock table is
            // often analyzed while it holds nothing, and a planner that
            // believes it empty joined it to the arrays (or to VALUES rows)
            // by scanning all of it, once per statement or once per hold.
            // Each name appears once in the arrays (the caller's part).
            Dialect::Postgres => (
                format!(
                    "UPDATE \"{t}\" AS l SET expires_at = GREATEST(l.expires_at, now() + $1::int8 * interval '1 microsecond') \
                     WHERE l.name = ANY($2::bytea[]) AND l.expires_at > now() \
                     AND l.owner = ($3::bytea[])[array_position($2::bytea[], l.name)] \
                     AND l.token = ($4::int8[])[array_position($2::bytea[], l.name)] \
                     RETURNING l.name, l.owner, l.token, {}",
                    pg_us("l.expires_at - now()")
                ),
                None,
            ),
            Dialect::Sqlite => {
                let triples = (0..n)
                    .map(|i| format!("(?{}, ?{}, ?{})", 3 * i + 2, 3 * i + 3, 3 * i + 4))
                    .collect::<Vec<_>>()
                    .join(", ");
                (
                    format!(
                        "UPDATE \"{t}\" SET expires_at = MAX(expires_at, {SQLITE_NOW} + ?1) \
                         WHERE (name, owner, token) IN (VALUES {triples}) AND expires_at > {SQLITE_NOW} \
                         RETURNING name, owner, token, expires_at - {SQLITE_NOW}"
                    ),
                    None,
                )
            }
        }
    }
}
