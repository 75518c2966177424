//! The text of the kinds' statements: what differs between the dialects
//! ([`Words`], [`placeholders`], the clock), and [`KindText`], which
//! writes each statement of [`KindStatements::new`](super::KindStatements)
//! with `$n` placeholders, one group of methods per concern.

use std::sync::Arc;

use super::fragments::{SQLITE_NOW, alive, pg_us};
use crate::config::Dialect;

/// `$n` placeholders as the dialect writes them.
pub(super) fn placeholders(dialect: Dialect, text: &str) -> Arc<str> {
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
pub(super) struct Words {
    pub quote: char,
    pub now: &'static str,
    pub greatest: &'static str,
    pub for_update: &'static str,
    /// What makes an integer expression decode as a 64-bit integer.
    pub int8: &'static str,
}

impl Words {
    /// `dialect`'s words.
    pub fn of(dialect: Dialect) -> Words {
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
pub(super) fn plus(dialect: Dialect, p: &str) -> String {
    let now = Words::of(dialect).now;
    match dialect {
        Dialect::Mysql => format!("{now} + INTERVAL {p} MICROSECOND"),
        Dialect::Postgres => format!("{now} + {p}::int8 * interval '1 microsecond'"),
        Dialect::Sqlite => format!("({now} + {p})"),
    }
}

/// Microseconds from the database clock to `expires_at`.
pub(super) fn remaining(dialect: Dialect) -> String {
    let now = Words::of(dialect).now;
    match dialect {
        Dialect::Mysql => format!("TIMESTAMPDIFF(MICROSECOND, {now}, expires_at)"),
        Dialect::Postgres => pg_us(&format!("expires_at - {now}")),
        Dialect::Sqlite => format!("expires_at - {now}"),
    }
}

/// The pieces of text that several of one table's kind statements share,
/// and the methods that write each statement (with `$n` placeholders,
/// turned into the dialect's by [`p`](Self::p)).
pub(super) struct KindText<'t> {
    dialect: Dialect,
    table: &'t str,
    /// The dialect's words.
    w: Words,
    /// The quoted names of `<table>_kinds`, `<table>_holds` and
    /// `<table>_waiters`.
    k: String,
    pub(super) h: String,
    wt: String,
    /// A live hold (`expires_at` after the database clock).
    live: String,
    /// Microseconds from the database clock to `expires_at`.
    rem: String,
    /// `attempts` without the share `$1`, whether it has the share `$n`,
    /// and how many shares it has.
    left: &'static str,
    has: &'static str,
    shares: &'static str,
}

impl<'t> KindText<'t> {
    /// The shared pieces for `table` on `dialect`.
    pub(super) fn new(dialect: Dialect, table: &'t str) -> Self {
        let w = Words::of(dialect);
        let q = w.quote;
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
        KindText {
            dialect,
            table,
            k: format!("{q}{table}_kinds{q}"),
            h: format!("{q}{table}_holds{q}"),
            wt: format!("{q}{table}_waiters{q}"),
            live: format!("expires_at > {}", w.now),
            rem: remaining(dialect),
            w,
            left,
            has,
            shares,
        }
    }

    /// `text`'s `$n` placeholders as the dialect writes them.
    fn p(&self, text: String) -> Arc<str> {
        placeholders(self.dialect, &text)
    }

    /// A live waiter of the line `$n` (alias `w`).
    fn waiter(&self, n: u8) -> String {
        format!(
            "w.name = ${n} AND w.expires_at > {} AND {}",
            self.w.now,
            alive(self.dialect, self.table, "w")
        )
    }

    /// The hold of `(family, name, owner, token, writer)` from `$n` on.
    fn the_hold(&self, n: u8) -> String {
        let live = &self.live;
        format!(
            "family = ${n} AND name = ${} AND owner = ${} AND token = ${} AND writer = ${} AND queued = 0 AND {live}",
            n + 1,
            n + 2,
            n + 3,
            n + 4
        )
    }
}

/// The name's row in `<table>_kinds`.
impl KindText<'_> {
    /// Locks the name's row (see [`KindStatements::lock_name`](super::KindStatements::lock_name)).
    pub(super) fn lock_name(&self) -> Arc<str> {
        self.name_row(self.w.for_update)
    }

    /// Reads the name's row without a lock (see [`KindStatements::peek_name`](super::KindStatements::peek_name)).
    pub(super) fn peek_name(&self) -> Arc<str> {
        self.name_row("")
    }

    fn name_row(&self, upd: &str) -> Arc<str> {
        let k = &self.k;
        self.p(format!(
            "SELECT permits, last_token, last_write FROM {k} WHERE family = $1 AND name = $2{upd}"
        ))
    }

    /// Makes the name's row if it is missing.
    pub(super) fn ensure_name(&self) -> Arc<str> {
        let k = &self.k;
        let ensure = match self.dialect {
            Dialect::Mysql => "INSERT IGNORE INTO",
            Dialect::Postgres => "INSERT INTO",
            Dialect::Sqlite => "INSERT OR IGNORE INTO",
        };
        let conflict = if self.dialect == Dialect::Postgres {
            " ON CONFLICT DO NOTHING"
        } else {
            ""
        };
        self.p(format!(
            "{ensure} {k} (family, name, permits, last_token, last_write) VALUES ($1, $2, 0, 0, 0){conflict}"
        ))
    }

    /// Records the name's permits, last token and last write token.
    pub(super) fn set_name(&self) -> Arc<str> {
        let k = &self.k;
        self.p(format!(
            "UPDATE {k} SET permits = $1, last_token = $2, last_write = $3 WHERE family = $4 AND name = $5"
        ))
    }
}

/// Reading the name's line and holds.
impl KindText<'_> {
    /// The name's line and live holds in one read (see [`KindStatements::rows`](super::KindStatements::rows)).
    pub(super) fn rows(&self) -> Arc<str> {
        let KindText {
            w, h, wt, live, rem, ..
        } = self;
        let int8 = w.int8;
        let no_bytes = if self.dialect == Dialect::Postgres {
            "''::bytea"
        } else {
            "X''"
        };
        self.p(format!(
            "SELECT -1{int8} AS seq, {no_bytes} AS owner, \
               (CASE WHEN EXISTS (SELECT 1 FROM {wt} w WHERE {} AND w.writer = 1 \
                 AND w.id < COALESCE((SELECT x.id FROM {wt} x WHERE x.attempt = $2), {})) THEN 1 ELSE 0 END){int8}, \
               (CASE WHEN EXISTS (SELECT 1 FROM {wt} w WHERE {} AND w.attempt <> $4) THEN 1 ELSE 0 END){int8}, \
               COALESCE((SELECT w.attempt FROM {wt} w WHERE {} ORDER BY w.id LIMIT 1), ''), 0{int8} \
             UNION ALL \
             SELECT seq, owner, token, writer, attempts, {rem} FROM {h} \
             WHERE family = $6 AND name = $7 AND queued = 0 AND {live}",
            self.waiter(1),
            i64::MAX,
            self.waiter(3),
            self.waiter(5),
        ))
    }

    /// The live holds of one side of a name, in the order granted.
    pub(super) fn holders(&self) -> Arc<str> {
        let KindText { h, live, rem, .. } = self;
        self.p(format!(
            "SELECT owner, attempts, token, {rem} FROM {h} WHERE family = $1 AND name = $2 AND writer = $3 \
             AND queued = 0 AND {live} ORDER BY seq"
        ))
    }

    /// The shares of one hold.
    pub(super) fn shares_of(&self) -> Arc<str> {
        let h = &self.h;
        self.p(format!(
            "SELECT attempts FROM {h} WHERE family = $1 AND name = $2 AND seq = $3"
        ))
    }

    /// A live hold's share count, and whether the attempt's share is in it.
    pub(super) fn share(&self) -> Arc<str> {
        let h = &self.h;
        self.p(format!(
            "SELECT {}, {} FROM {h} WHERE {}",
            self.shares,
            self.has.replace("$n", "$1"),
            self.the_hold(2)
        ))
    }
}

/// Writing a hold: a new one, a share joining one, and Postgres's grant.
impl KindText<'_> {
    /// A new hold or place in line.
    pub(super) fn insert(&self) -> Arc<str> {
        let h = &self.h;
        self.p(format!(
            "INSERT INTO {h} (family, name, seq, owner, token, writer, queued, attempts, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, {})",
            plus(self.dialect, "$9")
        ))
    }

    /// A share joins a hold, once; the lease never shortens.
    pub(super) fn join(&self) -> Arc<str> {
        let KindText { h, live, .. } = self;
        self.p(format!(
            "UPDATE {h} SET attempts = {}, expires_at = {}(expires_at, {}) \
             WHERE family = $4 AND name = $5 AND seq = $6 AND queued = 0 AND {live}",
            match self.dialect {
                Dialect::Mysql => "IF(LOCATE($1, attempts) > 0, attempts, CONCAT(attempts, ' ', $2))",
                Dialect::Postgres => "CASE WHEN strpos(attempts, $1) > 0 THEN attempts ELSE attempts || ' ' || $2 END",
                Dialect::Sqlite => "CASE WHEN instr(attempts, $1) > 0 THEN attempts ELSE attempts || ' ' || $2 END",
            },
            self.w.greatest,
            plus(self.dialect, "$3")
        ))
    }

    /// Postgres: a new hold's writes and the wake-up of the next in line as one statement.
    pub(super) fn grant(&self) -> Arc<str> {
        let KindText { table, k, h, wt, .. } = self;
        self.p(format!(
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
            plus(self.dialect, "$11")
        ))
    }

    /// Takes a served attempt's place out of the line.
    pub(super) fn served(&self) -> Arc<str> {
        self.p(format!("DELETE FROM {} WHERE attempt = $1", self.wt))
    }
}

/// Releasing a hold, and the sweeper.
impl KindText<'_> {
    /// Deletes the hold whose one share is the attempt's (Postgres: and
    /// notifies).
    pub(super) fn release_last(&self) -> Arc<str> {
        let KindText { table, h, .. } = self;
        self.p(match self.dialect {
            Dialect::Mysql => format!("DELETE FROM {h} WHERE {} AND attempts = $6", self.the_hold(1)),
            Dialect::Postgres => format!(
                "WITH d AS (DELETE FROM {h} WHERE {} AND attempts = $6 RETURNING seq) \
                 SELECT d.seq, CASE WHEN pg_try_advisory_xact_lock(hashtext('lockkit-wait:{table}'), \
                   hashtext(encode($7::bytea, 'hex'))) THEN 0::int8 \
                 ELSE (SELECT 1::int8 FROM pg_notify('lockkit_{table}', encode($8::bytea, 'hex') || ' ' || d.seq::text)) \
                 END FROM d",
                self.the_hold(1)
            ),
            Dialect::Sqlite => format!("DELETE FROM {h} WHERE {} AND attempts = $6 RETURNING seq", self.the_hold(1)),
        })
    }

    /// Takes the attempt's share out of a hold of more than one.
    pub(super) fn release_one(&self) -> Arc<str> {
        let KindText {
            h, left, has, shares, ..
        } = self;
        self.p(match self.dialect {
            // SET runs left to right: the count is read off the new value.
            Dialect::Mysql => format!(
                "UPDATE {h} SET attempts = {left}, writer = writer + 0 * LAST_INSERT_ID({}) \
                 WHERE {} AND attempts <> $7 AND {} > 0",
                shares,
                self.the_hold(2),
                has.replace("$n", "$8")
            ),
            _ => format!(
                "UPDATE {h} SET attempts = {left} WHERE {} AND attempts <> $7 AND {} > 0 RETURNING {}",
                self.the_hold(2),
                has.replace("$n", "$8"),
                shares
            ),
        })
    }

    /// Postgres: tells the line that a hold came or went, unless nobody
    /// waits.
    pub(super) fn notify(&self) -> Arc<str> {
        let table = self.table;
        self.p(format!(
            "SELECT CASE WHEN pg_try_advisory_xact_lock(hashtext('lockkit-wait:{table}'), \
               hashtext(encode($1::bytea, 'hex'))) THEN 0::int8 \
             ELSE (SELECT 1::int8 FROM pg_notify('lockkit_{table}', encode($2::bytea, 'hex') || ' ' || $3::text)) END"
        ))
    }

    /// Deletes expired holds.
    pub(super) fn sweep(&self) -> Arc<str> {
        let KindText { h, .. } = self;
        let now = self.w.now;
        self.p(match self.dialect {
            Dialect::Mysql => format!("DELETE FROM {h} WHERE expires_at <= {now} LIMIT $1"),
            Dialect::Postgres => format!(
                "DELETE FROM {h} WHERE ctid IN (SELECT ctid FROM {h} WHERE expires_at <= {now} LIMIT $1 \
                 FOR UPDATE SKIP LOCKED) AND expires_at <= {now}"
            ),
            Dialect::Sqlite => format!(
                "DELETE FROM {h} WHERE rowid IN (SELECT rowid FROM {h} WHERE expires_at <= {now} LIMIT $1) \
                 AND expires_at <= {now}"
            ),
        })
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
