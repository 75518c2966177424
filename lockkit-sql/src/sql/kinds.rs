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

use super::fragments::{SQLITE_NOW, alive, pg_us};
use crate::config::Dialect;

/// A kind family's code in the tables: each family keeps its own names.
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
    /// `(family, name)`: makes the name's row if it is missing.
    pub ensure_name: Arc<str>,
    /// `(family, name)` → the live holds `(seq, owner, token, writer,
    /// attempts, remaining_us)` in `seq` order (the order granted).
    ///
    /// Read in one round trip with the name's line: `(line key, attempt,
    /// line key, attempt, line key, family, name)` → first a row `(-1, '',
    /// writer ahead, others, head, 0)` of the name's line in
    /// `<table>_waiters`, counting only live waiters (see [`alive`]): 1
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
    dialect: Dialect,
    holds: String,
    /// The two tables' names, unquoted.
    tables: [String; 2],
}

/// `$n` placeholders as the dialect writes them.
fn placeholders(dialect: Dialect, text: &str) -> Arc<str> {
    match dialect {
        Dialect::Postgres => text.into(),
        Dialect::Sqlite => text.replace('$', "?").into(),
        Dialect::Mysql => {
            let mut out = String::with_capacity(text.len());
            let mut chars = text.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '$' {
                    out.push('?');
                    while chars.peek().is_some_and(char::is_ascii_digit) {
                        chars.next();
                    }
                } else {
                    out.push(c);
                }
            }
            out.into()
        }
    }
}

/// What differs between the dialects' texts.
struct Words {
    quote: char,
    now: &'static str,
    greatest: &'static str,
    for_update: &'static str,
    /// What makes an integer expression decode as a 64-bit integer.
    int8: &'static str,
}

impl Words {
    fn of(dialect: Dialect) -> Words {
        match dialect {
            Dialect::Mysql => Words {
                quote: '`',
                now: "UTC_TIMESTAMP(6)",
                greatest: "GREATEST",
                for_update: " FOR UPDATE",
                int8: "",
            },
            // The statement's own time, not the transaction's: a
            // transaction that waited for the name's lock must not date
            // its leases back.
            Dialect::Postgres => Words {
                quote: '"',
                now: "statement_timestamp()",
                greatest: "GREATEST",
                for_update: " FOR UPDATE",
                int8: "::int8",
            },
            Dialect::Sqlite => Words {
                quote: '"',
                now: SQLITE_NOW,
                greatest: "MAX",
                for_update: "",
                int8: "",
            },
        }
    }
}

/// The database clock plus the microseconds of placeholder `p`.
fn plus(dialect: Dialect, p: &str) -> String {
    let now = Words::of(dialect).now;
    match dialect {
        Dialect::Mysql => format!("{now} + INTERVAL {p} MICROSECOND"),
        Dialect::Postgres => format!("{now} + {p}::int8 * interval '1 microsecond'"),
        Dialect::Sqlite => format!("({now} + {p})"),
    }
}

/// Microseconds from the database clock to `expires_at`.
fn remaining(dialect: Dialect) -> String {
    let now = Words::of(dialect).now;
    match dialect {
        Dialect::Mysql => format!("TIMESTAMPDIFF(MICROSECOND, {now}, expires_at)"),
        Dialect::Postgres => pg_us(&format!("expires_at - {now}")),
        Dialect::Sqlite => format!("expires_at - {now}"),
    }
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
    pub fn new(dialect: Dialect, table: &str) -> Self {
        let w = Words::of(dialect);
        let (q, now, upd) = (w.quote, w.now, w.for_update);
        let k = format!("{q}{table}_kinds{q}");
        let h = format!("{q}{table}_holds{q}");
        let wt = format!("{q}{table}_waiters{q}");
        let int8 = w.int8;
        let no_bytes = if dialect == Dialect::Postgres {
            "''::bytea"
        } else {
            "X''"
        };
        // A live waiter of the line `$n` (alias `w`).
        let waiter = |n: u8| {
            format!(
                "w.name = ${n} AND w.expires_at > {now} AND {}",
                alive(dialect, table, "w")
            )
        };
        let rem = remaining(dialect);
        let live = format!("expires_at > {now}");
        let p = |text: String| placeholders(dialect, &text);
        let ensure = match dialect {
            Dialect::Mysql => "INSERT IGNORE INTO",
            Dialect::Postgres => "INSERT INTO",
            Dialect::Sqlite => "INSERT OR IGNORE INTO",
        };
        // The hold of `(family, name, owner, token, writer)` from `$n` on.
        let the_hold = |n: u8| {
            format!(
                "family = ${n} AND name = ${} AND owner = ${} AND token = ${} AND writer = ${} AND queued = 0 AND {live}",
                n + 1,
                n + 2,
                n + 3,
                n + 4
            )
        };
        // `attempts` without the share `$1`, whether it has the share `$n`,
        // and how many shares it has.
        let (left, has, shares) = match dialect {
            Dialect::Mysql => (
                "TRIM(REPLACE(CONCAT(' ', attempts, ' '), CONCAT(' ', $1, ' '), ' '))",
                "LOCATE($n, attempts)",
                "(LENGTH(attempts) + 1) DIV 17",
            ),
            Dialect::Postgres => (
                "btrim(replace(' ' || attempts || ' ', ' ' || $1 || ' ', ' '))",
                "strpos(attempts, $n)::int8",
                "((length(attempts) + 1) / 17)::int8",
            ),
            Dialect::Sqlite => (
                "trim(replace(' ' || attempts || ' ', ' ' || $1 || ' ', ' '))",
                "instr(attempts, $n)",
                "((length(attempts) + 1) / 17)",
            ),
        };
        let release_last = match dialect {
            Dialect::Mysql => format!("DELETE FROM {h} WHERE {} AND attempts = $6", the_hold(1)),
            Dialect::Postgres => format!(
                "WITH d AS (DELETE FROM {h} WHERE {} AND attempts = $6 RETURNING seq) \
                 SELECT d.seq, CASE WHEN pg_try_advisory_xact_lock(hashtext('lockkit-wait:{table}'), \
                   hashtext(encode($7::bytea, 'hex'))) THEN 0::int8 \
                 ELSE (SELECT 1::int8 FROM pg_notify('lockkit_{table}', encode($8::bytea, 'hex') || ' ' || d.seq::text)) \
                 END FROM d",
                the_hold(1)
            ),
            Dialect::Sqlite => format!("DELETE FROM {h} WHERE {} AND attempts = $6 RETURNING seq", the_hold(1)),
        };
        let release_one = match dialect {
            // SET runs left to right: the count is read off the new value.
            Dialect::Mysql => format!(
                "UPDATE {h} SET attempts = {left}, writer = writer + 0 * LAST_INSERT_ID({}) \
                 WHERE {} AND attempts <> $7 AND {} > 0",
                shares,
                the_hold(2),
                has.replace("$n", "$8")
            ),
            _ => format!(
                "UPDATE {h} SET attempts = {left} WHERE {} AND attempts <> $7 AND {} > 0 RETURNING {}",
                the_hold(2),
                has.replace("$n", "$8"),
                shares
            ),
        };
        let conflict = if dialect == Dialect::Postgres {
            " ON CONFLICT DO NOTHING"
        } else {
            ""
        };
        let sweep = match dialect {
            Dialect::Mysql => format!("DELETE FROM {h} WHERE expires_at <= {now} LIMIT $1"),
            Dialect::Postgres => format!(
                "DELETE FROM {h} WHERE ctid IN (SELECT ctid FROM {h} WHERE expires_at <= {now} LIMIT $1 \
                 FOR UPDATE SKIP LOCKED) AND expires_at <= {now}"
            ),
            Dialect::Sqlite => format!(
                "DELETE FROM {h} WHERE rowid IN (SELECT rowid FROM {h} WHERE expires_at <= {now} LIMIT $1) \
                 AND expires_at <= {now}"
            ),
        };
        KindStatements {
            lock_name: p(format!(
                "SELECT permits, last_token, last_write FROM {k} WHERE family = $1 AND name = $2{upd}"
            )),
            ensure_name: p(format!(
                "{ensure} {k} (family, name, permits, last_token, last_write) VALUES ($1, $2, 0, 0, 0){conflict}"
            )),
            rows: p(format!(
                "SELECT -1{int8} AS seq, {no_bytes} AS owner, \
                   (CASE WHEN EXISTS (SELECT 1 FROM {wt} w WHERE {} AND w.writer = 1 \
                     AND w.id < COALESCE((SELECT x.id FROM {wt} x WHERE x.attempt = $2), {})) THEN 1 ELSE 0 END){int8}, \
                   (CASE WHEN EXISTS (SELECT 1 FROM {wt} w WHERE {} AND w.attempt <> $4) THEN 1 ELSE 0 END){int8}, \
                   COALESCE((SELECT w.attempt FROM {wt} w WHERE {} ORDER BY w.id LIMIT 1), ''), 0{int8} \
                 UNION ALL \
                 SELECT seq, owner, token, writer, attempts, {rem} FROM {h} \
                 WHERE family = $6 AND name = $7 AND queued = 0 AND {live}",
                waiter(1),
                i64::MAX,
                waiter(3),
                waiter(5),
            )),
            served: p(format!("DELETE FROM {wt} WHERE attempt = $1")),
            set_name: p(format!(
                "UPDATE {k} SET permits = $1, last_token = $2, last_write = $3 WHERE family = $4 AND name = $5"
            )),
            insert: p(format!(
                "INSERT INTO {h} (family, name, seq, owner, token, writer, queued, attempts, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {})",
                plus(dialect, "$9")
            )),
            join: p(format!(
                "UPDATE {h} SET attempts = {}, expires_at = {}(expires_at, {}) \
                 WHERE family = $4 AND name = $5 AND seq = $6 AND queued = 0 AND {live}",
                match dialect {
                    Dialect::Mysql => "IF(LOCATE($1, attempts) > 0, attempts, CONCAT(attempts, ' ', $2))",
                    Dialect::Postgres => "CASE WHEN strpos(attempts, $1) > 0 THEN attempts ELSE attempts || ' ' || $2 END",
                    Dialect::Sqlite => "CASE WHEN instr(attempts, $1) > 0 THEN attempts ELSE attempts || ' ' || $2 END",
                },
                w.greatest,
                plus(dialect, "$3")
            )),
            shares_of: p(format!(
                "SELECT attempts FROM {h} WHERE family = $1 AND name = $2 AND seq = $3"
            )),
            release_last: p(release_last),
            release_one: p(release_one),
            share: p(format!(
                "SELECT {}, {} FROM {h} WHERE {}",
                shares,
                has.replace("$n", "$1"),
                the_hold(2)
            )),
            returns_rows: dialect != Dialect::Mysql,
            holders: p(format!(
                "SELECT owner, attempts, token, {rem} FROM {h} WHERE family = $1 AND name = $2 AND writer = $3 \
                 AND queued = 0 AND {live} ORDER BY seq"
            )),
            notify: (dialect == Dialect::Postgres).then(|| {
                p(format!(
                    "SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext('lockkit-wait:{table}'), \
                       hashtext(encode($1::bytea, 'hex'))) THEN 0::int8 \
                     ELSE (SELECT 1::int8 FROM pg_notify('lockkit_{table}', encode($2::bytea, 'hex') || ' ' || $3::text)) END"
                ))
            }),
            grant: (dialect == Dialect::Postgres).then(|| {
                p(format!(
                    "WITH s AS (UPDATE {k} SET permits = $1, last_token = $2, last_write = $3 \
                       WHERE family = $4 AND name = $5), \
                     i AS (INSERT INTO {h} (family, name, seq, owner, token, writer, queued, attempts, expires_at) \
                       VALUES ($4, $5, $6, $7, $8, $9, 0, $10, {})), \
                     d AS (DELETE FROM {wt} WHERE attempt = $10 AND $12 = 1) \
                     SELECT CASE WHEN $13 = 0 THEN 0::int8 \
                       WHEN pg_try_advisory_xact_lock(hashtext('lockkit-wait:{table}'), \
                         hashtext(encode($14::bytea, 'hex'))) THEN 0::int8 \
                       ELSE (SELECT 1::int8 FROM pg_notify('lockkit_{table}', \
                         encode($14::bytea, 'hex') || ' ' || $6::text)) END",
                    plus(dialect, "$11")
                ))
            }),
            sweep: p(sweep),
            dialect,
            holds: h,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_per_dialect() {
        let text = "a = $1 AND b = $12";
        assert_eq!(&*placeholders(Dialect::Mysql, text), "a = ? AND b = ?");
        assert_eq!(&*placeholders(Dialect::Sqlite, text), "a = ?1 AND b = ?12");
        assert_eq!(&*placeholders(Dialect::Postgres, text), text);
    }
}
