//! The dialect layer: each database's SQL text, and nothing else.
//!
//! Every statement takes the same arguments in the same order on every
//! database (listed on each field), so the logic in `backend.rs` is written
//! once. MySQL's `?` placeholders bind by position, so its texts use each
//! argument exactly once, in order; Postgres (`$n`) and SQLite (`?n`) may
//! repeat them.
//!
//! Times are always the database's clock: MySQL `UTC_TIMESTAMP(6)`,
//! Postgres `now()`, SQLite `julianday('now')` (microseconds since the epoch
//! in an integer column). Each is constant within one statement.

use std::sync::Arc;

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
    /// take the same key exclusively (see `waitlist.rs`).
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
    /// SQLite, after a fair claim found the name busy: `(name, attempt)` →
    /// `(remaining_us or -1 when free, head)`.
    pub holder_fair: Arc<str>,
    /// `(name, owner, attempt, lease_us)`: joins the name's line (or, for an
    /// attempt already in it, renews its lease) → its `id` as a row, and
    /// marks the name's row `queued` in the same transaction, making a free
    /// one if there is none (SQLite: by trigger; MySQL: see
    /// [`mysql_join_batch`](Self::mysql_join_batch)).
    pub join: Arc<str>,
    /// `(attempt)`: leaves the line; counts rows. Postgres also notifies
    /// the name's channel when the row left was the head of its line.
    pub leave: Arc<str>,
    /// `(name)` → `(count)` of live waiter rows.
    pub waiting: Arc<str>,
    /// `(batch)`: delete at most `batch` expired waiter rows; counts rows.
    pub sweep_waiters: Arc<str>,
    dialect: Dialect,
    table: String,
}

/// A MySQL hex literal: `X'…'` (`X''` for no bytes).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2 + 3);
    out.push_str("X'");
    for b in bytes {
        out.push_str(&format!("{b:02X}"));
    }
    out.push('\'');
    out
}

/// A MySQL statement with its `?` placeholders replaced, in order, by
/// `args` as literals (hex for bytes and text, decimal for integers), for a
/// text batch of several statements in one round trip. Only statements of
/// this module go in, whose only `?` are placeholders (table names are
/// letters, digits and `_`), and the literals cannot change a statement:
/// nothing but `[0-9A-F]`, digits and `-`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn mysql_inline(statement: &str, args: &[crate::conn::Arg<'_>]) -> String {
    use crate::conn::Arg;
    let mut args = args.iter();
    let mut out = String::with_capacity(statement.len() + 64);
    for (i, part) in statement.split('?').enumerate() {
        if i > 0 {
            match args.next() {
                Some(Arg::Bytes(b)) => out.push_str(&hex(b)),
                Some(Arg::Int(v)) => out.push_str(&v.to_string()),
                Some(Arg::Text(Some(t))) => out.push_str(&hex(t.as_bytes())),
                Some(Arg::Text(None)) | None => out.push_str("NULL"),
            }
        }
        out.push_str(part);
    }
    out
}

fn s(text: String) -> Arc<str> {
    text.into()
}

/// Microseconds of the interval `x` as an int8 (Postgres).
fn pg_us(x: &str) -> String {
    format!("(extract(epoch from ({x})) * 1000000)::int8")
}

/// SQLite's clock in microseconds since the epoch (millisecond resolution).
/// Postgres, as a one-row subquery of a statement that writes only the
/// fair line (joining, leaving, renewing a place): its transaction's commit
/// does not wait for the flush to disk (see `Db::open_line`). Set locally
/// inside the statement, it is in force when the statement's own implicit
/// transaction commits, and gone after.
const PG_NO_FLUSH: &str = "SELECT set_config('synchronous_commit', 'off', true)";

const SQLITE_NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000000.0 AS INTEGER)";

/// MySQL: microseconds from now to `expires_at`, at least 1.
const MY_REMAINING: &str = "GREATEST(1, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at))";

/// MySQL: a hold's row made free (expired, no owner) for the line.
const MY_FREE: &str = "owner = X'', hold_count = 0, attempts = '', memo = NULL, expires_at = UTC_TIMESTAMP(6)";

/// MySQL's `queued` column.
const MY_QUEUED_COLUMN: &str = "queued TINYINT NOT NULL DEFAULT 0 \
    COMMENT '1: a fair waiter joined the line while it was held; a release leaves the row free'";

/// The number of attempt ids in `attempts` (each 16 characters, one space
/// between two): the hold count. MySQL reads the column's new value when
/// an earlier assignment of the same statement changed it.
const MY_SHARES: &str = "(LENGTH(attempts) + 1) DIV 17";

/// The same for an `attempts` value `x` (Postgres, SQLite).
fn shares(x: &str) -> String {
    format!("((length({x}) + 1) / 17)")
}

impl Statements {
    pub fn new(dialect: Dialect, table: &str) -> Self {
        match dialect {
            Dialect::Mysql => mysql(table),
            Dialect::Postgres => postgres(table),
            Dialect::Sqlite => sqlite(table),
        }
    }

    /// The Postgres channel releases are announced on.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub fn channel(&self) -> String {
        format!("lockkit_{}", self.table)
    }

    /// MySQL's acquisition as one multi-statement round trip: claim, then —
    /// only if the row is ours and unstamped — draw from the name's counter
    /// bucket and stamp, then read our hold back, in one transaction. The
    /// name's row lock is taken first and held to the commit, so the token is
    /// drawn after every earlier holder's. Values are spliced in as hex and
    /// decimal literals (the text protocol has no bind parameters), which
    /// cannot change the statements: nothing but `[0-9A-F]` and digits.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub fn mysql_claim_batch(
        &self,
        name: &[u8],
        owner: &[u8],
        ttl_us: i64,
        memo: Option<&str>,
        attempt: &str,
        bucket: i64,
    ) -> String {
        let t = &self.table;
        let (n, o) = (hex(name), hex(owner));
        let memo = memo.map_or_else(|| "NULL".to_owned(), |m| hex(m.as_bytes()));
        let claim = self.claim.replacen(
            "VALUES (?, ?, 1, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?)",
            &format!(
                "VALUES ({n}, {o}, 1, 0, UTC_TIMESTAMP(6) + INTERVAL {ttl_us} MICROSECOND, UTC_TIMESTAMP(6), \
                 {memo}, {})",
                hex(attempt.as_bytes())
            ),
            1,
        );
        format!(
            "BEGIN; {claim}; \
             INSERT INTO `{t}_tokens` (bucket, last_token) \
               SELECT {bucket}, LAST_INSERT_ID(1) FROM `{t}` WHERE name = {n} AND owner = {o} AND token = 0 \
               ON DUPLICATE KEY UPDATE last_token = LAST_INSERT_ID(last_token + 1); \
             UPDATE `{t}` SET token = LAST_INSERT_ID() WHERE name = {n} AND owner = {o} AND token = 0; \
             SELECT hold_count, token, {MY_REMAINING} FROM `{t}` WHERE name = {n} AND owner = {o}; \
             COMMIT"
        )
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

    /// MySQL's fair acquisition, like [`mysql_claim_batch`](Self::mysql_claim_batch)
    /// with the rules of [`claim_fair`](Self::claim_fair), in two forms.
    ///
    /// Without `line` (an attempt not in line yet: the uncontended case) the
    /// batch names no other table than the unfair one does — a statement
    /// that merely mentions the waiter table costs MariaDB ~10 % of an
    /// uncontended cycle, used or not. It takes a free row or an expired one
    /// not marked `queued`, re-enters a live hold, and marks a live row
    /// another holds; an expired marked row it leaves alone and reports
    /// with the insert id 1: ask the line (run the batch again with `line`).
    ///
    /// With `line` it also takes an expired marked row when the attempt
    /// heads the name's line, clearing the mark when nobody else waits;
    /// when `queued`, the attempt's waiter row goes in the same transaction
    /// once the name is its.
    ///
    /// Either way the read-back is the unfair batch's, and a claim that
    /// leaves the name to another puts `remaining_us × 2 + head` in its OK
    /// packet's insert id (`head`: whether the attempt heads the line, read
    /// only with `line`; 0 without).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    #[allow(clippy::too_many_arguments)]
    pub fn mysql_claim_batch_fair(
        &self,
        name: &[u8],
        owner: &[u8],
        ttl_us: i64,
        memo: Option<&str>,
        attempt: &str,
        bucket: i64,
        line: bool,
        queued: bool,
    ) -> String {
        let t = &self.table;
        let (n, o, a) = (hex(name), hex(owner), hex(attempt.as_bytes()));
        let memo = memo.map_or_else(|| "NULL".to_owned(), |m| hex(m.as_bytes()));
        let now = "UTC_TIMESTAMP(6)";
        let mine = format!("(owner = VALUES(owner) AND expires_at > {now})");
        // `take`: decided in the first assignment, read by the rest;
        // `busy`: the insert id of a claim that leaves the name to another;
        // `unmark`: the mark a take leaves.
        let (decide, take, busy, unmark) = if line {
            let head = format!(
                "(COALESCE((SELECT attempt FROM `{t}_waiters` WHERE name = {n} AND expires_at > {now} \
                   ORDER BY id LIMIT 1), {a}) = {a})"
            );
            (
                format!("(@lockkit_take := (expires_at <= {now} AND (queued = 0 OR {head})))"),
                "@lockkit_take".to_owned(),
                format!("{MY_REMAINING} * 2 + {head}"),
                format!(
                    "queued AND EXISTS (SELECT 1 FROM `{t}_waiters` WHERE name = {n} AND attempt <> {a} \
                       AND expires_at > {now})"
                ),
            )
        } else {
            let take = format!("(expires_at <= {now} AND queued = 0)");
            (
                take.clone(),
                take,
                format!("IF(expires_at <= {now}, 1, {MY_REMAINING} * 2)"),
                "queued".to_owned(),
            )
        };
        let served = if queued {
            format!(
                "DELETE FROM `{t}_waiters` WHERE attempt = {a} AND EXISTS (SELECT 1 FROM `{t}` \
                   WHERE name = {n} AND owner = {o} AND token > 0 AND expires_at > {now} AND LOCATE({a}, attempts) > 0); "
            )
        } else {
            String::new()
        };
        format!(
            "BEGIN; \
             INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
               VALUES ({n}, {o}, 1, 0, {now} + INTERVAL {ttl_us} MICROSECOND, {now}, {memo}, {a}) \
             ON DUPLICATE KEY UPDATE \
               attempts = IF({decide}, VALUES(attempts), \
                  IF({mine} AND LOCATE(VALUES(attempts), attempts) = 0, CONCAT(attempts, ' ', VALUES(attempts)), attempts)), \
               hold_count = IF({take} OR {mine}, LAST_INSERT_ID({MY_SHARES}), hold_count + 0 * LAST_INSERT_ID({busy})), \
               token = IF({take}, 0, token), \
               acquired_at = IF({take}, VALUES(acquired_at), acquired_at), \
               memo = IF({take}, VALUES(memo), memo), \
               queued = IF({take}, {unmark}, IF({mine} OR expires_at <= {now}, queued, 1)), \
               owner = IF({take}, VALUES(owner), owner), \
               expires_at = IF({take} OR {mine}, GREATEST(expires_at, VALUES(expires_at)), expires_at); \
             INSERT INTO `{t}_tokens` (bucket, last_token) \
               SELECT {bucket}, LAST_INSERT_ID(1) FROM `{t}` WHERE name = {n} AND owner = {o} AND token = 0 \
               ON DUPLICATE KEY UPDATE last_token = LAST_INSERT_ID(last_token + 1); \
             UPDATE `{t}` SET token = LAST_INSERT_ID() WHERE name = {n} AND owner = {o} AND token = 0; \
             {served}\
             SELECT hold_count, token, {MY_REMAINING} FROM `{t}` WHERE name = {n} AND owner = {o} AND expires_at > {now}; \
             COMMIT"
        )
    }

    /// MySQL's join (see [`join`](Self::join)) as one round trip: puts the
    /// attempt in line or renews its place (the id is the second OK
    /// packet's insert id), commits, then marks the name's row `queued` (a
    /// free one if there is none) in a statement of its own. Not one
    /// transaction: the mark's row lock would be held through the waiter
    /// row's commit, and the next holder's claim, which needs it, would
    /// wait for that flush; alone, a mark already set writes nothing and
    /// lets go at once. A claim between the two that takes the name
    /// without reading the line is one that came before the join (and a
    /// fair claim that finds the name held marks it again). Values spliced
    /// in as in [`mysql_claim_batch`](Self::mysql_claim_batch).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub fn mysql_join_batch(&self, name: &[u8], owner: &[u8], attempt: &str, lease_us: i64) -> String {
        let t = &self.table;
        let (n, o, a) = (hex(name), hex(owner), hex(attempt.as_bytes()));
        let now = "UTC_TIMESTAMP(6)";
        format!(
            "BEGIN; \
             INSERT INTO `{t}_waiters` (name, owner, attempt, expires_at) \
               VALUES ({n}, {o}, {a}, {now} + INTERVAL {lease_us} MICROSECOND) \
             ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), expires_at = VALUES(expires_at); \
             COMMIT; \
             INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts, queued) \
               VALUES ({n}, X'', 0, 0, {now}, {now}, NULL, '', 1) ON DUPLICATE KEY UPDATE queued = 1"
        )
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
                let triples = vec!["(?, ?, ?)"; n].join(", ");
                (
                    format!(
                        "UPDATE `{t}` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND) \
                         WHERE (name, owner, token) IN ({triples}) AND expires_at > UTC_TIMESTAMP(6)"
                    ),
                    Some(format!(
                        "SELECT name, owner, token, {MY_REMAINING} FROM `{t}` \
                         WHERE (name, owner, token) IN ({triples}) AND expires_at > UTC_TIMESTAMP(6)"
                    )),
                )
            }
            // Arrays, not n VALUES rows: a VALUES list let the planner scan
            // the whole table once per statement (its statistics had the
            // live rows at ~0), 1.5-2.8 s per 256 holds with 5,000 held.
            Dialect::Postgres => (
                format!(
                    "UPDATE \"{t}\" AS l SET expires_at = GREATEST(l.expires_at, now() + $1::int8 * interval '1 microsecond') \
                     FROM unnest($2::bytea[], $3::bytea[], $4::int8[]) AS v(name, owner, token) \
                     WHERE l.name = v.name AND l.owner = v.owner AND l.token = v.token AND l.expires_at > now() \
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

fn mysql(t: &str) -> Statements {
    // The ON DUPLICATE KEY UPDATE assignments run left to right and later ones
    // see the new values: every test of the old row comes before `owner` and
    // `expires_at` change.
    let expired = "expires_at <= UTC_TIMESTAMP(6)";
    Statements {
        create: vec![
            (
                t.to_owned(),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS `{t}` (\
                 name VARBINARY(255) NOT NULL COMMENT 'lock name: UTF-8 bytes, compared exactly', \
                 owner VARBINARY(255) NOT NULL, \
                 hold_count BIGINT NOT NULL, \
                 token BIGINT NOT NULL COMMENT 'fencing token', \
                 expires_at DATETIME(6) NOT NULL COMMENT 'UTC, by the database clock', \
                 acquired_at DATETIME(6) NOT NULL COMMENT 'UTC, by the database clock', \
                 memo VARCHAR(1024) NULL, \
                 attempts MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ('') \
                   COMMENT 'attempt ids of the shares of the hold, space-separated', \
                 {MY_QUEUED_COLUMN}, \
                 PRIMARY KEY (name)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin \
                 COMMENT='lockkit: one row per held lock'"
                )),
            ),
            (
                format!("{t}_tokens"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS `{t}_tokens` (\
                 bucket INT NOT NULL PRIMARY KEY, last_token BIGINT NOT NULL) ENGINE=InnoDB \
                 COMMENT='lockkit: fencing token counters, one per bucket of names'"
                )),
            ),
            (
                format!("{t}_waiters"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS `{t}_waiters` (\
                 id BIGINT NOT NULL AUTO_INCREMENT COMMENT 'place in line: lower waits longer', \
                 name VARBINARY(255) NOT NULL, \
                 owner VARBINARY(255) NOT NULL, \
                 attempt VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                 expires_at DATETIME(6) NOT NULL COMMENT 'UTC, by the database clock; renewed while it waits', \
                 PRIMARY KEY (id), UNIQUE KEY attempt (attempt), KEY name_id (name, id)) ENGINE=InnoDB \
                 COMMENT='lockkit: acquisitions waiting for a name, served oldest first'"
                )),
            ),
        ],
        exists: s(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?"
                .to_owned(),
        ),
        prepare: vec![],
        columns: s(
            "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
                    WHERE table_schema = DATABASE() AND table_name = ?"
                .to_owned(),
        ),
        name_types: &["varbinary", "binary"],
        // `attempts` first: the count is read off it.
        claim: s(format!(
            "INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
             VALUES (?, ?, 1, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?) \
             ON DUPLICATE KEY UPDATE \
             attempts = IF({expired}, VALUES(attempts), \
                IF(owner = VALUES(owner) AND LOCATE(VALUES(attempts), attempts) = 0, \
                   CONCAT(attempts, ' ', VALUES(attempts)), attempts)), \
             hold_count = IF({expired} OR owner = VALUES(owner), LAST_INSERT_ID({MY_SHARES}), \
                hold_count + 0 * LAST_INSERT_ID({MY_REMAINING})), \
             token = IF({expired}, 0, token), \
             acquired_at = IF({expired}, VALUES(acquired_at), acquired_at), \
             memo = IF({expired}, VALUES(memo), memo), \
             owner = IF({expired}, VALUES(owner), owner), \
             expires_at = IF(owner = VALUES(owner), GREATEST(expires_at, VALUES(expires_at)), expires_at)"
        )),
        claim_shape: ClaimShape::Batch,
        holder: s(format!("SELECT {MY_REMAINING} FROM `{t}` WHERE name = ?")),
        buckets: 64,
        release_last: s(format!(
            "DELETE FROM `{t}` WHERE name = ? AND owner = ? AND token = ? AND attempts = ? \
             AND expires_at > UTC_TIMESTAMP(6) AND queued = 0"
        )),
        release_last_queued: Some(s(format!(
            "UPDATE `{t}` SET {MY_FREE} WHERE name = ? AND owner = ? AND token = ? AND attempts = ? \
             AND expires_at > UTC_TIMESTAMP(6)"
        ))),
        // SET runs left to right: the count is read off the new `attempts`.
        release_one: s(format!(
            "UPDATE `{t}` SET attempts = TRIM(REPLACE(CONCAT(' ', attempts, ' '), CONCAT(' ', ?, ' '), ' ')), \
             hold_count = LAST_INSERT_ID({MY_SHARES}) \
             WHERE name = ? AND owner = ? AND token = ? AND hold_count > 1 AND expires_at > UTC_TIMESTAMP(6)"
        )),
        share: s(format!(
            "SELECT hold_count, LOCATE(?, attempts) FROM `{t}` \
             WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
        )),
        added_columns: vec![
            (
                "attempts",
                s(format!(
                    "ALTER TABLE `{t}` ADD COLUMN attempts MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin \
                     NOT NULL DEFAULT ('') COMMENT 'attempt ids of the shares of the hold, space-separated'"
                )),
            ),
            ("queued", s(format!("ALTER TABLE `{t}` ADD COLUMN {MY_QUEUED_COLUMN}"))),
        ],
        extend: s(format!(
            "UPDATE `{t}` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
             hold_count = hold_count + 0 * LAST_INSERT_ID({MY_REMAINING}) \
             WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
        )),
        inspect: s(format!(
            "SELECT owner, hold_count, token, {MY_REMAINING} FROM `{t}` \
             WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
        )),
        list: s(format!(
            "SELECT name, owner, hold_count, token, {MY_REMAINING} FROM `{t}` \
             WHERE name >= ? AND name < ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY name LIMIT ?"
        )),
        delete_hold: s(format!(
            "DELETE FROM `{t}` WHERE name = ? AND owner = ? AND token = ? AND queued = 0"
        )),
        delete_hold_queued: Some(s(format!(
            "UPDATE `{t}` SET {MY_FREE} WHERE name = ? AND owner = ? AND token = ?"
        ))),
        sweep: s(format!(
            "DELETE FROM `{t}` WHERE {expired} AND (queued = 0 OR NOT EXISTS (SELECT 1 FROM `{t}_waiters` w \
               WHERE w.name = `{t}`.name AND w.expires_at > UTC_TIMESTAMP(6))) LIMIT ?"
        )),
        deletes_return_rows: false,
        updates_return_rows: false,
        wait_join: None,
        wait_leave: None,
        // The fair claim and the join are batches of their own
        // (`mysql_claim_batch_fair`, `mysql_join_batch`).
        claim_fair: s(String::new()),
        claim_fair_contended: None,
        holder_fair: s(String::new()),
        join: s(String::new()),
        leave: s(format!("DELETE FROM `{t}_waiters` WHERE attempt = ?")),
        waiting: s(format!(
            "SELECT COUNT(*) FROM `{t}_waiters` WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
        )),
        sweep_waiters: s(format!(
            "DELETE FROM `{t}_waiters` WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT ?"
        )),
        dialect: Dialect::Mysql,
        table: t.to_owned(),
    }
}

fn postgres(t: &str) -> Statements {
    let remaining = pg_us("expires_at - now()");
    let l_shares = shares("l.attempts");
    // `attempts` without the share `$1`.
    let left = "btrim(replace(' ' || attempts || ' ', ' ' || $1 || ' ', ' '))".to_owned();
    let chan = format!("lockkit_{t}");
    // The wait-list key of the name in `$x`: waiters hold it shared.
    let wait_key = |x: &str| format!("hashtext('lockkit-wait:{t}'), hashtext(encode({x}, 'hex'))");
    // Deletes announce the freed name (hex) and the hold's token to waiters,
    // delivered at commit — only when somebody holds its wait-list key (a
    // NOTIFY serializes commits). The releasing process has woken its own
    // waiters already: by the token it knows the notification for its own.
    // One statement: the row goes unless marked `queued`, else it is left
    // free for the line. (A join that marks the row between this
    // statement's snapshot and its row lock makes both miss it: the
    // release then finds its hold still there and runs again.)
    let notify = |cond: &str| {
        s(format!(
            "WITH gone AS (DELETE FROM \"{t}\" WHERE name = $1 AND owner = $2 AND token = $3{cond} AND NOT queued \
               RETURNING name), \
             freed AS (UPDATE \"{t}\" SET owner = ''::bytea, hold_count = 0, attempts = '', memo = NULL, \
               expires_at = now() WHERE name = $1 AND owner = $2 AND token = $3{cond} AND queued RETURNING name), \
             d AS (SELECT name FROM gone UNION ALL SELECT name FROM freed) \
             SELECT CASE WHEN pg_try_advisory_xact_lock({}) THEN 1::int8 \
               ELSE (SELECT 1::int8 FROM pg_notify('{chan}', encode(d.name, 'hex') || ' ' || $3::text)) END FROM d",
            wait_key("d.name")
        ))
    };
    // Whether waiters other than the attempt `$5` are in `$1`'s line.
    let others =
        format!("EXISTS (SELECT 1 FROM \"{t}_waiters\" WHERE name = $1 AND attempt <> $5 AND expires_at > now())");
    // Whether the attempt `$5` may take a free name: it is the oldest live
    // waiter for `$1`, or nobody waits.
    let head = format!(
        "(COALESCE((SELECT attempt FROM \"{t}_waiters\" WHERE name = $1 AND expires_at > now() \
           ORDER BY id LIMIT 1), $5) = $5)"
    );
    let claim_set = "owner = EXCLUDED.owner, \
                 attempts = CASE WHEN l.expires_at <= now() THEN $5 \
                   WHEN strpos(l.attempts, $5) > 0 THEN l.attempts ELSE l.attempts || ' ' || $5 END, \
                 hold_count = CASE WHEN l.expires_at <= now() THEN 1 \
                   WHEN strpos(l.attempts, $5) > 0 THEN {l_shares} ELSE {l_shares} + 1 END, \
                 token = CASE WHEN l.expires_at <= now() THEN EXCLUDED.token ELSE l.token END, \
                 acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END, \
                 memo = CASE WHEN l.expires_at <= now() THEN EXCLUDED.memo ELSE l.memo END, \
                 expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at)"
        .replace("{l_shares}", &l_shares);
    let guard =
        format!("guard AS (SELECT pg_advisory_xact_lock(hashtext('lockkit:{t}'), hashtext(encode($1, 'hex'))))");
    // The fair claim; `only` may keep it from inserting at all.
    let claim_fair = |only: &str| {
        let (source, only) = if only.is_empty() {
            ("VALUES (", ")".to_owned())
        } else {
            ("SELECT", only.to_owned())
        };
        s(format!(
            "WITH {guard}, \
             claim AS (\
               INSERT INTO \"{t}\" AS l (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
               {source} $1, $2, 1, (SELECT nextval('\"{t}_token_seq\"') FROM guard), \
                 now() + $3::int8 * interval '1 microsecond', now(), $4::text, $5::text {only} \
               ON CONFLICT (name) DO UPDATE SET {claim_set}, \
                 queued = CASE WHEN l.expires_at <= now() THEN l.queued AND {others} ELSE l.queued END \
               WHERE (l.expires_at <= now() AND (NOT l.queued OR {head})) \
                 OR (l.owner = EXCLUDED.owner AND l.expires_at > now()) \
               RETURNING hold_count, token, expires_at), \
             mark AS (UPDATE \"{t}\" SET queued = true WHERE name = $1 AND NOT queued AND expires_at > now() \
               AND NOT EXISTS (SELECT 1 FROM claim)), \
             served AS (DELETE FROM \"{t}_waiters\" WHERE attempt = $5 AND EXISTS (SELECT 1 FROM claim)) \
             SELECT 1::int8, hold_count, token, {remaining}, 1::int8 FROM claim \
             UNION ALL \
             SELECT 0::int8, hold_count, token, {remaining}, {head}::int::int8 FROM \"{t}\" \
               WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM claim)"
        ))
    };
    Statements {
        create: vec![
            (
                t.to_owned(),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}\" (\
                 name BYTEA PRIMARY KEY, \
                 owner BYTEA NOT NULL, \
                 hold_count BIGINT NOT NULL, \
                 token BIGINT NOT NULL, \
                 expires_at TIMESTAMPTZ NOT NULL, \
                 acquired_at TIMESTAMPTZ NOT NULL, \
                 memo TEXT, \
                 attempts TEXT NOT NULL DEFAULT '', \
                 queued BOOLEAN NOT NULL DEFAULT false)"
                )),
            ),
            (
                format!("{t}_token_seq"),
                s(format!("CREATE SEQUENCE IF NOT EXISTS \"{t}_token_seq\"")),
            ),
            (
                format!("{t}_waiters"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}_waiters\" (\
                 id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
                 name BYTEA NOT NULL, \
                 owner BYTEA NOT NULL, \
                 attempt TEXT NOT NULL UNIQUE, \
                 expires_at TIMESTAMPTZ NOT NULL, \
                 UNIQUE (name, id))"
                )),
            ),
        ],
        exists: s("SELECT COUNT(*)::int8 FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   WHERE n.nspname = current_schema() AND c.relname = $1"
            .to_owned()),
        prepare: vec![],
        columns: s(
            "SELECT column_name::text, data_type::text FROM information_schema.columns \
                    WHERE table_schema = current_schema() AND table_name = $1"
                .to_owned(),
        ),
        name_types: &["bytea"],
        // The token is drawn in the claim itself, after taking a transaction
        // advisory lock on the name (held to the commit): any earlier holder
        // drew its token under the same lock, so before ours.
        claim: s(format!(
            "WITH guard AS (SELECT pg_advisory_xact_lock(hashtext('lockkit:{t}'), hashtext(encode($1, 'hex')))), \
             claim AS (\
               INSERT INTO \"{t}\" AS l (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
               VALUES ($1, $2, 1, (SELECT nextval('\"{t}_token_seq\"') FROM guard), \
                 now() + $3::int8 * interval '1 microsecond', now(), $4::text, $5::text) \
               ON CONFLICT (name) DO UPDATE SET \
                 owner = EXCLUDED.owner, \
                 attempts = CASE WHEN l.expires_at <= now() THEN $5 \
                   WHEN strpos(l.attempts, $5) > 0 THEN l.attempts ELSE l.attempts || ' ' || $5 END, \
                 hold_count = CASE WHEN l.expires_at <= now() THEN 1 \
                   WHEN strpos(l.attempts, $5) > 0 THEN {l_shares} ELSE {l_shares} + 1 END, \
                 token = CASE WHEN l.expires_at <= now() THEN EXCLUDED.token ELSE l.token END, \
                 acquired_at = CASE WHEN l.expires_at <= now() THEN now() ELSE l.acquired_at END, \
                 memo = CASE WHEN l.expires_at <= now() THEN EXCLUDED.memo ELSE l.memo END, \
                 expires_at = GREATEST(l.expires_at, EXCLUDED.expires_at) \
               WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner \
               RETURNING hold_count, token, expires_at) \
             SELECT 1::int8, hold_count, token, {remaining} FROM claim \
             UNION ALL \
             SELECT 0::int8, hold_count, token, {remaining} FROM \"{t}\" \
               WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM claim)"
        )),
        claim_shape: ClaimShape::Rows,
        holder: s(format!("SELECT {remaining} FROM \"{t}\" WHERE name = $1")),
        buckets: 1,
        release_last: notify(" AND attempts = $4 AND expires_at > now()"),
        release_last_queued: None,
        release_one: s(format!(
            "UPDATE \"{t}\" SET attempts = {left}, hold_count = {} \
             WHERE name = $2 AND owner = $3 AND token = $4 AND hold_count > 1 AND expires_at > now() \
             RETURNING hold_count",
            shares(&left)
        )),
        share: s(format!(
            "SELECT hold_count, strpos(attempts, $1)::int8 FROM \"{t}\" \
             WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > now()"
        )),
        added_columns: vec![
            (
                "attempts",
                s(format!(
                    "ALTER TABLE \"{t}\" ADD COLUMN IF NOT EXISTS attempts TEXT NOT NULL DEFAULT ''"
                )),
            ),
            (
                "queued",
                s(format!(
                    "ALTER TABLE \"{t}\" ADD COLUMN IF NOT EXISTS queued BOOLEAN NOT NULL DEFAULT false"
                )),
            ),
        ],
        extend: s(format!(
            "UPDATE \"{t}\" SET expires_at = GREATEST(expires_at, now() + $1::int8 * interval '1 microsecond') \
             WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > now() RETURNING {remaining}"
        )),
        inspect: s(format!(
            "SELECT owner, hold_count, token, {remaining} FROM \"{t}\" WHERE name = $1 AND expires_at > now()"
        )),
        list: s(format!(
            "SELECT name, owner, hold_count, token, {remaining} FROM \"{t}\" \
             WHERE name >= $1 AND name < $2 AND expires_at > now() ORDER BY name LIMIT $3"
        )),
        delete_hold: notify(""),
        delete_hold_queued: None,
        // SKIP LOCKED: concurrent sweepers split the work instead of queueing.
        sweep: s(format!(
            "DELETE FROM \"{t}\" WHERE name IN (SELECT name FROM \"{t}\" x WHERE expires_at <= now() \
               AND (NOT queued OR NOT EXISTS (SELECT 1 FROM \"{t}_waiters\" w \
                 WHERE w.name = x.name AND w.expires_at > now())) \
             LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()"
        )),
        deletes_return_rows: true,
        updates_return_rows: true,
        wait_join: Some(s(format!("SELECT pg_advisory_lock_shared({})", wait_key("$1")))),
        wait_leave: Some(s(format!("SELECT pg_advisory_unlock_shared({})", wait_key("$1")))),
        // As `claim`; the conflict update takes over an expired row marked
        // `queued` only for the head of the line, and a row found held is
        // marked (`mark`).
        claim_fair: claim_fair(""),
        // A claim that cannot win (the name held by another, or free for a
        // waiter ahead) inserts nothing: its conflict would take the name's
        // advisory lock and row lock, which the next waiter's take then
        // waits for. The look costs an uncontended claim ~8 % (the probe of
        // a name whose index entries churn), so only where waiters are seen.
        claim_fair_contended: Some(claim_fair(&format!(
            "WHERE NOT EXISTS (SELECT 1 FROM \"{t}\" WHERE name = $1 AND CASE WHEN expires_at > now() \
               THEN owner <> $2 ELSE queued AND NOT {head} END)"
        ))),
        holder_fair: s(String::new()),
        join: s(format!(
            "WITH free AS (INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, \
                 attempts, queued) VALUES ($1, ''::bytea, 0, 0, now(), now(), NULL, '', true) \
               ON CONFLICT (name) DO NOTHING), \
             mark AS (UPDATE \"{t}\" SET queued = true WHERE name = $1 AND NOT queued) \
             INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at) \
             SELECT $1, $2, $3::text, now() + $4::int8 * interval '1 microsecond' FROM ({PG_NO_FLUSH}) AS cfg \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = EXCLUDED.expires_at RETURNING id"
        )),
        // A head that leaves tells the next in line (the name may be free).
        leave: s(format!(
            "WITH d AS (DELETE FROM \"{t}_waiters\" WHERE attempt = $1::text RETURNING name, id) \
             SELECT pg_notify('{chan}', encode(d.name, 'hex')) FROM d, ({PG_NO_FLUSH}) AS cfg WHERE NOT EXISTS \
               (SELECT 1 FROM \"{t}_waiters\" w WHERE w.name = d.name AND w.id < d.id AND w.expires_at > now())"
        )),
        waiting: s(format!(
            "SELECT COUNT(*)::int8 FROM \"{t}_waiters\" WHERE name = $1 AND expires_at > now()"
        )),
        sweep_waiters: s(format!(
            "DELETE FROM \"{t}_waiters\" WHERE id IN (SELECT id FROM \"{t}_waiters\" WHERE expires_at <= now() \
             LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()"
        )),
        dialect: Dialect::Postgres,
        table: t.to_owned(),
    }
}

fn sqlite(t: &str) -> Statements {
    let now = SQLITE_NOW;
    let t_shares = shares(&format!("\"{t}\".attempts"));
    // `attempts` without the share `?1`.
    let left = "trim(replace(' ' || attempts || ' ', ' ' || ?1 || ' ', ' '))".to_owned();
    // The whole statement holds SQLite's write lock, so a token read from the
    // counter here cannot be overtaken by another acquire + release.
    let next = format!("(SELECT last_token + 1 FROM \"{t}_tokens\" WHERE bucket = 0)");
    // Whether the attempt (`?5`, or `?2` in `holder_fair`) may take the free
    // name `?1`: it is the oldest live waiter for it, or nobody waits.
    let head = |a: &str| {
        format!(
            "(COALESCE((SELECT attempt FROM \"{t}_waiters\" WHERE name = ?1 AND expires_at > {now} \
               ORDER BY id LIMIT 1), {a}) = {a})"
        )
    };
    let (head5, head2) = (head("?5"), head("?2"));
    // A hold's row made free (expired, no owner) for the line.
    let free = format!("owner = x'', hold_count = 0, attempts = '', memo = NULL, expires_at = {now}");
    Statements {
        create: vec![
            (
                t.to_owned(),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}\" (\
                 name BLOB PRIMARY KEY NOT NULL, \
                 owner BLOB NOT NULL, \
                 hold_count INTEGER NOT NULL, \
                 token INTEGER NOT NULL, \
                 expires_at INTEGER NOT NULL, \
                 acquired_at INTEGER NOT NULL, \
                 memo TEXT, \
                 attempts TEXT NOT NULL DEFAULT '', \
                 queued INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID"
                )),
            ),
            (
                format!("{t}_tokens"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}_tokens\" (bucket INTEGER PRIMARY KEY, last_token INTEGER NOT NULL)"
                )),
            ),
            (
                format!("{t}_waiters"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}_waiters\" (\
                 id INTEGER PRIMARY KEY, \
                 name BLOB NOT NULL, \
                 owner BLOB NOT NULL, \
                 attempt TEXT NOT NULL UNIQUE, \
                 expires_at INTEGER NOT NULL, \
                 UNIQUE (name, id))"
                )),
            ),
        ],
        exists: s("SELECT COUNT(*) FROM sqlite_master WHERE name = ?1".to_owned()),
        prepare: vec![
            s(format!(
                "INSERT OR IGNORE INTO \"{t}_tokens\" (bucket, last_token) \
                 VALUES (0, (SELECT COALESCE(MAX(token), 0) FROM \"{t}\"))"
            )),
            // Every token written to the table moves the counter, in the same
            // statement: SQLite runs one writer at a time, so the claim can
            // take its token directly (no separate stamp).
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_token_insert\" AFTER INSERT ON \"{t}\" BEGIN \
                 UPDATE \"{t}_tokens\" SET last_token = MAX(last_token, NEW.token) WHERE bucket = 0; END"
            )),
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_token_update\" AFTER UPDATE OF token ON \"{t}\" \
                 WHEN NEW.token > OLD.token BEGIN \
                 UPDATE \"{t}_tokens\" SET last_token = MAX(last_token, NEW.token) WHERE bucket = 0; END"
            )),
            // A claim that gives an attempt its share (a new hold, a take
            // over, a re-entry: the share is the last id in `attempts`)
            // takes the attempt's waiter row out of the line, in the same
            // statement.
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_waiter_served_insert\" AFTER INSERT ON \"{t}\" BEGIN \
                 DELETE FROM \"{t}_waiters\" WHERE attempt = NEW.attempts; END"
            )),
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_waiter_served_update\" AFTER UPDATE OF attempts ON \"{t}\" \
                 WHEN length(NEW.attempts) > length(OLD.attempts) OR NEW.token <> OLD.token BEGIN \
                 DELETE FROM \"{t}_waiters\" WHERE attempt = substr(NEW.attempts, -16); END"
            )),
            // A waiter joining the line marks the name's row `queued` (a
            // free one if there is none), in the same statement.
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_waiter_joined\" AFTER INSERT ON \"{t}_waiters\" BEGIN \
                 INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts, queued) \
                 VALUES (NEW.name, x'', 0, 0, {now}, {now}, NULL, '', 1) \
                 ON CONFLICT (name) DO UPDATE SET queued = 1; END"
            )),
        ],
        columns: s("SELECT name, lower(type) FROM pragma_table_info(?1)".to_owned()),
        name_types: &[],
        claim: s(format!(
            "INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
             VALUES (?1, ?2, 1, {next}, {now} + ?3, {now}, ?4, ?5) \
             ON CONFLICT (name) DO UPDATE SET \
               owner = excluded.owner, \
               attempts = CASE WHEN \"{t}\".expires_at <= {now} THEN ?5 \
                 WHEN instr(\"{t}\".attempts, ?5) > 0 THEN \"{t}\".attempts \
                 ELSE \"{t}\".attempts || ' ' || ?5 END, \
               hold_count = CASE WHEN \"{t}\".expires_at <= {now} THEN 1 \
                 WHEN instr(\"{t}\".attempts, ?5) > 0 THEN {t_shares} ELSE {t_shares} + 1 END, \
               token = CASE WHEN \"{t}\".expires_at <= {now} THEN {next} ELSE \"{t}\".token END, \
               acquired_at = CASE WHEN \"{t}\".expires_at <= {now} THEN {now} ELSE \"{t}\".acquired_at END, \
               memo = CASE WHEN \"{t}\".expires_at <= {now} THEN excluded.memo ELSE \"{t}\".memo END, \
               expires_at = MAX(\"{t}\".expires_at, excluded.expires_at) \
             WHERE \"{t}\".expires_at <= {now} OR \"{t}\".owner = excluded.owner \
             RETURNING hold_count, token, expires_at - {now}"
        )),
        claim_shape: ClaimShape::RowsOrHolder,
        holder: s(format!("SELECT expires_at - {now} FROM \"{t}\" WHERE name = ?1")),
        buckets: 1,
        release_last: s(format!(
            "DELETE FROM \"{t}\" WHERE name = ?1 AND owner = ?2 AND token = ?3 AND attempts = ?4 \
             AND expires_at > {now} AND queued = 0"
        )),
        release_last_queued: Some(s(format!(
            "UPDATE \"{t}\" SET {free} WHERE name = ?1 AND owner = ?2 AND token = ?3 AND attempts = ?4 \
             AND expires_at > {now}"
        ))),
        release_one: s(format!(
            "UPDATE \"{t}\" SET attempts = {left}, hold_count = {} \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND hold_count > 1 AND expires_at > {now} \
             RETURNING hold_count",
            shares(&left)
        )),
        share: s(format!(
            "SELECT hold_count, instr(attempts, ?1) FROM \"{t}\" \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND expires_at > {now}"
        )),
        added_columns: vec![
            (
                "attempts",
                s(format!(
                    "ALTER TABLE \"{t}\" ADD COLUMN attempts TEXT NOT NULL DEFAULT ''"
                )),
            ),
            (
                "queued",
                s(format!(
                    "ALTER TABLE \"{t}\" ADD COLUMN queued INTEGER NOT NULL DEFAULT 0"
                )),
            ),
        ],
        extend: s(format!(
            "UPDATE \"{t}\" SET expires_at = MAX(expires_at, {now} + ?1) \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND expires_at > {now} RETURNING expires_at - {now}"
        )),
        inspect: s(format!(
            "SELECT owner, hold_count, token, expires_at - {now} FROM \"{t}\" WHERE name = ?1 AND expires_at > {now}"
        )),
        list: s(format!(
            "SELECT name, owner, hold_count, token, expires_at - {now} FROM \"{t}\" \
             WHERE name >= ?1 AND name < ?2 AND expires_at > {now} ORDER BY name LIMIT ?3"
        )),
        delete_hold: s(format!(
            "DELETE FROM \"{t}\" WHERE name = ?1 AND owner = ?2 AND token = ?3 AND queued = 0"
        )),
        delete_hold_queued: Some(s(format!(
            "UPDATE \"{t}\" SET {free} WHERE name = ?1 AND owner = ?2 AND token = ?3"
        ))),
        sweep: s(format!(
            "DELETE FROM \"{t}\" WHERE name IN (SELECT name FROM \"{t}\" x WHERE expires_at <= {now} \
               AND (queued = 0 OR NOT EXISTS (SELECT 1 FROM \"{t}_waiters\" w \
                 WHERE w.name = x.name AND w.expires_at > {now})) LIMIT ?1) \
             AND expires_at <= {now}"
        )),
        deletes_return_rows: false,
        updates_return_rows: true,
        wait_join: None,
        wait_leave: None,
        // SQLite runs one writer at a time: a mark is never lost to a
        // concurrent statement, so a claim that finds the name held need
        // not mark it (the join did).
        claim_fair: s(format!(
            "INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
             VALUES (?1, ?2, 1, {next}, {now} + ?3, {now}, ?4, ?5) \
             ON CONFLICT (name) DO UPDATE SET \
               queued = CASE WHEN \"{t}\".expires_at <= {now} THEN \"{t}\".queued AND EXISTS \
                 (SELECT 1 FROM \"{t}_waiters\" WHERE name = ?1 AND attempt <> ?5 AND expires_at > {now}) \
                 ELSE \"{t}\".queued END, \
               owner = excluded.owner, \
               attempts = CASE WHEN \"{t}\".expires_at <= {now} THEN ?5 \
                 WHEN instr(\"{t}\".attempts, ?5) > 0 THEN \"{t}\".attempts \
                 ELSE \"{t}\".attempts || ' ' || ?5 END, \
               hold_count = CASE WHEN \"{t}\".expires_at <= {now} THEN 1 \
                 WHEN instr(\"{t}\".attempts, ?5) > 0 THEN {t_shares} ELSE {t_shares} + 1 END, \
               token = CASE WHEN \"{t}\".expires_at <= {now} THEN {next} ELSE \"{t}\".token END, \
               acquired_at = CASE WHEN \"{t}\".expires_at <= {now} THEN {now} ELSE \"{t}\".acquired_at END, \
               memo = CASE WHEN \"{t}\".expires_at <= {now} THEN excluded.memo ELSE \"{t}\".memo END, \
               expires_at = MAX(\"{t}\".expires_at, excluded.expires_at) \
             WHERE (\"{t}\".expires_at <= {now} AND (\"{t}\".queued = 0 OR {head5})) \
               OR (\"{t}\".owner = excluded.owner AND \"{t}\".expires_at > {now}) \
             RETURNING hold_count, token, expires_at - {now}"
        )),
        claim_fair_contended: None,
        holder_fair: s(format!(
            "SELECT COALESCE((SELECT expires_at - {now} FROM \"{t}\" WHERE name = ?1), -1), {head2}"
        )),
        join: s(format!(
            "INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at) VALUES (?1, ?2, ?3, {now} + ?4) \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = excluded.expires_at RETURNING id"
        )),
        leave: s(format!("DELETE FROM \"{t}_waiters\" WHERE attempt = ?1")),
        waiting: s(format!(
            "SELECT COUNT(*) FROM \"{t}_waiters\" WHERE name = ?1 AND expires_at > {now}"
        )),
        sweep_waiters: s(format!(
            "DELETE FROM \"{t}_waiters\" WHERE id IN \
             (SELECT id FROM \"{t}_waiters\" WHERE expires_at <= {now} LIMIT ?1) AND expires_at <= {now}"
        )),
        dialect: Dialect::Sqlite,
        table: t.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_inline_fills_each_placeholder_in_order() {
        use crate::conn::Arg;
        let sql = mysql_inline(
            "DELETE FROM `t` WHERE name = ? AND token = ? AND attempts = ? AND memo = ?",
            &[Arg::Bytes(b"a'?"), Arg::Int(-7), Arg::Text(Some("0f")), Arg::Text(None)],
        );
        assert_eq!(
            sql,
            "DELETE FROM `t` WHERE name = X'61273F' AND token = -7 AND attempts = X'3066' AND memo = NULL"
        );
    }

    #[test]
    fn mysql_batch_splices_only_literals() {
        let sql = Statements::new(Dialect::Mysql, "locks");
        let batch = sql.mysql_claim_batch(
            "a'; DROP TABLE x; --".as_bytes(),
            b"o",
            1500,
            Some("m"),
            "0123456789abcdef",
            7,
        );
        assert!(!batch.contains('?'), "every placeholder is filled: {batch}");
        assert!(!batch.contains("DROP"), "the name is hex: {batch}");
        assert!(batch.contains("X'61273B2044524F50205441424C4520783B202D2D'"));
        assert!(batch.contains("INTERVAL 1500 MICROSECOND") && batch.contains("SELECT 7,"));
        assert_eq!(hex(b""), "X''");
    }
}
