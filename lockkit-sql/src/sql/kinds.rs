//! The statements of semaphores and read-write locks, for every dialect:
//! two companion tables, `<table>_kinds` (one row per name of a kind: the
//! semaphore's permit count, the name's token counter and its last write
//! token) and `<table>_holds` (one row per hold — a permit, a reader's or
//! the writer's hold — and per place in the name's line, `queued = 1`).
//! The mutex's table and statements are not touched.
//!
//! Statements are written once with `$n` placeholders, each argument used
//! once and in order, and turned into each dialect's (`?n` for SQLite, `?`
//! for MySQL) by [`placeholders`].

use std::sync::Arc;

use crate::config::Dialect;

/// The statements of semaphores and read-write locks for one lock table.
#[derive(Debug, Clone)]
pub(crate) struct KindStatements {
    /// `(family, name)` → `(permits, last_token, last_write)`, locking the
    /// name's row to the end of the transaction (SQLite: the transaction
    /// holds the file's write lock already).
    pub lock_name: Arc<str>,
    /// `(family, name)`: makes the name's row if it is missing.
    pub ensure_name: Arc<str>,
    /// `(family, name)` → live rows `(seq, owner, token, writer, queued,
    /// attempts, remaining_us)` in `seq` order: holds in the order granted,
    /// places in line in the order joined.
    pub rows: Arc<str>,
    /// `(permits, last_token, last_write, family, name)`.
    pub set_name: Arc<str>,
    /// `(family, name, seq, owner, token, writer, queued, attempts,
    /// ttl_us)`: a new hold or place in line.
    pub insert: Arc<str>,
    /// `(attempts, ttl_us, family, name, seq)`: a share joins a hold; the
    /// lease never shortens.
    pub join: Arc<str>,
    /// `(lease_us, family, name, attempt)`: renews a live place in line;
    /// counts rows.
    pub renew: Arc<str>,
    /// `(family, name, seq)`: deletes a hold.
    pub delete: Arc<str>,
    /// `(family, name, attempt)`: leaves the line; counts rows.
    pub leave: Arc<str>,
    /// `(family, name, owner, token, writer)` → `(seq, attempts)` of the
    /// live hold, locked to the end of the transaction.
    pub hold: Arc<str>,
    /// `(attempts, family, name, seq)`.
    pub set_attempts: Arc<str>,
    /// `(family, name, writer)` → `(owner, attempts, token, remaining_us)`
    /// of the live holds, in the order granted.
    pub holders: Arc<str>,
    /// `(family, name)` → `(count)` of live places in line.
    pub waiting: Arc<str>,
    /// Postgres: `(line key, family, name)`: notifies the table's channel
    /// with the line key when somebody waits in the name's line.
    pub notify: Option<Arc<str>>,
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
}

impl Words {
    fn of(dialect: Dialect) -> Words {
        match dialect {
            Dialect::Mysql => Words {
                quote: '`',
                now: "UTC_TIMESTAMP(6)",
                greatest: "GREATEST",
                for_update: " FOR UPDATE",
            },
            // The statement's own time, not the transaction's: a
            // transaction that waited for the name's lock must not date
            // its leases back.
            Dialect::Postgres => Words {
                quote: '"',
                now: "statement_timestamp()",
                greatest: "GREATEST",
                for_update: " FOR UPDATE",
            },
            Dialect::Sqlite => Words {
                quote: '"',
                now: super::SQLITE_NOW,
                greatest: "MAX",
                for_update: "",
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
        Dialect::Postgres => super::pg_us(&format!("expires_at - {now}")),
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
        let rem = remaining(dialect);
        let live = format!("expires_at > {now}");
        let p = |text: String| placeholders(dialect, &text);
        let ensure = match dialect {
            Dialect::Mysql => "INSERT IGNORE INTO",
            Dialect::Postgres => "INSERT INTO",
            Dialect::Sqlite => "INSERT OR IGNORE INTO",
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
                "SELECT seq, owner, token, writer, queued, attempts, {rem} FROM {h} \
                 WHERE family = $1 AND name = $2 AND {live} ORDER BY seq"
            )),
            set_name: p(format!(
                "UPDATE {k} SET permits = $1, last_token = $2, last_write = $3 WHERE family = $4 AND name = $5"
            )),
            insert: p(format!(
                "INSERT INTO {h} (family, name, seq, owner, token, writer, queued, attempts, expires_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {})",
                plus(dialect, "$9")
            )),
            join: p(format!(
                "UPDATE {h} SET attempts = $1, expires_at = {}(expires_at, {}) \
                 WHERE family = $3 AND name = $4 AND seq = $5",
                w.greatest,
                plus(dialect, "$2")
            )),
            renew: p(format!(
                "UPDATE {h} SET expires_at = {} WHERE family = $2 AND name = $3 AND queued = 1 \
                 AND attempts = $4 AND {live}",
                plus(dialect, "$1")
            )),
            delete: p(format!("DELETE FROM {h} WHERE family = $1 AND name = $2 AND seq = $3")),
            leave: p(format!(
                "DELETE FROM {h} WHERE family = $1 AND name = $2 AND queued = 1 AND attempts = $3"
            )),
            hold: p(format!(
                "SELECT seq, attempts FROM {h} WHERE family = $1 AND name = $2 AND owner = $3 AND token = $4 \
                 AND writer = $5 AND queued = 0 AND {live}{upd}"
            )),
            set_attempts: p(format!(
                "UPDATE {h} SET attempts = $1 WHERE family = $2 AND name = $3 AND seq = $4"
            )),
            holders: p(format!(
                "SELECT owner, attempts, token, {rem} FROM {h} WHERE family = $1 AND name = $2 AND writer = $3 \
                 AND queued = 0 AND {live} ORDER BY seq"
            )),
            waiting: p(format!(
                "SELECT COUNT(*) FROM {h} WHERE family = $1 AND name = $2 AND queued = 1 AND {live}"
            )),
            notify: (dialect == Dialect::Postgres).then(|| {
                p(format!(
                    "SELECT pg_notify('lockkit_{table}', encode($1::bytea, 'hex')) FROM {h} \
                     WHERE family = $2 AND name = $3 AND queued = 1 AND {live} LIMIT 1"
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
