//! MySQL/MariaDB's statements ([`mysql`]) and the DDL of its token
//! sources ([`MysqlTokens`]); the multi-statement batches are in
//! `mysql_batch.rs`.

use std::sync::Arc;

use super::fragments::{MY_REMAINING, alive, s};
use super::statements::{ClaimShape, Statements};
use crate::config::Dialect;

/// Where a MySQL/MariaDB lock table's fencing tokens come from, and the
/// DDL of each source (`migrate` picks one per table: see
/// `token_source.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) enum MysqlTokens {
    /// MariaDB: the sequence `<table>_token_seq`, drawn by the stamp's
    /// `NEXTVAL` once the claim holds the name's row.
    Sequence,
    /// MySQL (no sequences), and tables made by a lockkit before the
    /// sequence: 64 counter rows in `<table>_tokens`, names hashed over them.
    Buckets,
}

#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
impl MysqlTokens {
    /// The name of `table`'s token sequence.
    pub(crate) fn sequence(table: &str) -> String {
        format!("{table}_token_seq")
    }

    /// The name of `table`'s bucket table.
    pub(crate) fn buckets(table: &str) -> String {
        format!("{table}_tokens")
    }

    /// Creates the sequence, starting at `start`. `CACHE 1000`: a MariaDB sequence's cache is
    /// shared by every connection, so values still grow in the order they
    /// are drawn, and the sequence's row is written once per 1000 tokens;
    /// after a crash it resumes past the values it had reserved.
    pub(crate) fn create_sequence(table: &str, start: i64) -> String {
        let seq = Self::sequence(table);
        format!(
            "CREATE SEQUENCE IF NOT EXISTS `{seq}` START WITH {start} CACHE 1000 COMMENT 'lockkit: fencing tokens of {table}'"
        )
    }

    /// Creates the bucket table: plain (`usable`) where the buckets are the
    /// source; beside a sequence, with a check no row passes, so that an
    /// older lockkit, which would draw tokens of its own there, fails
    /// instead of handing out tokens below the sequence's.
    pub(crate) fn create_buckets(table: &str, usable: bool) -> String {
        let tokens = Self::buckets(table);
        if usable {
            format!(
                "CREATE TABLE IF NOT EXISTS `{tokens}` (bucket INT NOT NULL PRIMARY KEY, last_token BIGINT NOT NULL) \
                 ENGINE=InnoDB COMMENT='lockkit: fencing token counters, one per bucket of names'"
            )
        } else {
            let seq = Self::sequence(table);
            format!(
                "CREATE TABLE IF NOT EXISTS `{tokens}` (bucket INT NOT NULL PRIMARY KEY, last_token BIGINT NOT NULL, \
                 CONSTRAINT `{tokens}_moved` CHECK (bucket < 0)) ENGINE=InnoDB \
                 COMMENT='lockkit: unused, the tokens come from {seq}; stops an older lockkit drawing its own here'"
            )
        }
    }
}

/// MySQL: a hold's row made free (expired, no owner) for the line.
const MY_FREE: &str = "owner = X'', hold_count = 0, attempts = '', memo = NULL, expires_at = UTC_TIMESTAMP(6)";

/// MySQL's waiter columns `live` and `writer`.
const MY_LIVE_COLUMN: &str = "live BIGINT NULL \
    COMMENT 'the liveness key of the waiting process: GET_LOCK(CONCAT(''lockkit-live-'', live)) while it lives'";
const MY_WRITER_COLUMN: &str =
    "writer TINYINT NOT NULL DEFAULT 0 COMMENT '1: a place of a writer in a read-write lock''s line'";

/// MySQL's `queued` column.
const MY_QUEUED_COLUMN: &str = "queued TINYINT NOT NULL DEFAULT 0 \
    COMMENT '1: a fair waiter joined the line while it was held; a release leaves the row free'";

/// The number of attempt ids in `attempts` (each 16 characters, one space
/// between two): the hold count. MySQL reads the column's new value when
/// an earlier assignment of the same statement changed it.
pub(super) const MY_SHARES: &str = "(LENGTH(attempts) + 1) DIV 17";

/// An expired row. The ON DUPLICATE KEY UPDATE assignments run left to
/// right and later ones see the new values: every test of the old row
/// comes before `owner` and `expires_at` change.
const MY_EXPIRED: &str = "expires_at <= UTC_TIMESTAMP(6)";

/// The hold of the last share: the attempt's, live.
const LAST: &str = " AND attempts = ? AND expires_at > UTC_TIMESTAMP(6)";

/// `(object name)` → `(count)`, as [`Statements::exists`] says.
const EXISTS: &str =
    "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?";

/// `(table)` → its columns, as [`Statements::columns`] says.
const COLUMNS: &str = "SELECT CAST(column_name AS CHAR), CAST(data_type AS CHAR) FROM information_schema.columns \
                    WHERE table_schema = DATABASE() AND table_name = ?";

/// MySQL/MariaDB's statements for the lock table `t`. The fair claim and
/// the join are batches of their own (`mysql_claim_batch_fair`,
/// `mysql_join_batch`): their fields are empty.
pub(super) fn mysql(t: &str) -> Statements {
    let my = My { t };
    Statements {
        create: my.create(),
        exists: s(EXISTS.to_owned()),
        prepare: vec![],
        columns: s(COLUMNS.to_owned()),
        name_types: &["varbinary", "binary"],
        claim: my.claim(),
        claim_shape: ClaimShape::Batch,
        holder: s(format!("SELECT {MY_REMAINING} FROM `{t}` WHERE name = ?")),
        buckets: 64,
        release_last: my.delete(LAST),
        release_last_queued: Some(my.free(LAST)),
        release_one: my.release_one(),
        share: my.share(),
        added_columns: my.added_columns(),
        extend: my.extend(),
        inspect: my.inspect(),
        list: my.list(),
        delete_hold: my.delete(""),
        delete_hold_queued: Some(my.free("")),
        sweep: my.sweep(),
        deletes_return_rows: false,
        updates_return_rows: false,
        wait_join: None,
        wait_leave: None,
        claim_fair: s(String::new()),
        claim_fair_contended: None,
        claim_absent: None,
        holder_fair: s(String::new()),
        join: s(String::new()),
        kind_join: my.kind_join(),
        waiter_columns: my.waiter_columns(),
        live_take: s("SELECT GET_LOCK(CONCAT('lockkit-live-', ?), 0)".to_owned()),
        sweep_live: None,
        leave: s(format!("DELETE FROM `{t}_waiters` WHERE attempt = ?")),
        waiting: my.waiting(),
        sweep_waiters: s(format!(
            "DELETE FROM `{t}_waiters` WHERE expires_at <= UTC_TIMESTAMP(6) LIMIT ?"
        )),
        dialect: Dialect::Mysql,
        table: t.to_owned(),
    }
}

/// The methods that write each of one table's statements.
struct My<'t> {
    /// The lock table.
    t: &'t str,
}

/// The schema: the tables, and the columns an older lockkit's tables lack.
impl My<'_> {
    /// The lock table and the waiter table (the token source's DDL is
    /// [`MysqlTokens`]'s).
    fn create(&self) -> Vec<(String, Arc<str>)> {
        let t = self.t;
        vec![
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
                format!("{t}_waiters"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS `{t}_waiters` (\
                 id BIGINT NOT NULL AUTO_INCREMENT COMMENT 'place in line: lower waits longer', \
                 name VARBINARY(255) NOT NULL, \
                 owner VARBINARY(255) NOT NULL, \
                 attempt VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL, \
                 expires_at DATETIME(6) NOT NULL COMMENT 'UTC, by the database clock; renewed while it waits', \
                 {MY_LIVE_COLUMN}, {MY_WRITER_COLUMN}, \
                 PRIMARY KEY (id), UNIQUE KEY attempt (attempt), KEY name_id (name, id)) ENGINE=InnoDB \
                 COMMENT='lockkit: acquisitions waiting for a name, served oldest first'"
                )),
            ),
        ]
    }

    /// The lock table's `attempts` and `queued`.
    fn added_columns(&self) -> Vec<(&'static str, Arc<str>)> {
        let t = self.t;
        vec![
            (
                "attempts",
                s(format!(
                    "ALTER TABLE `{t}` ADD COLUMN attempts MEDIUMTEXT CHARACTER SET ascii COLLATE ascii_bin \
                     NOT NULL DEFAULT ('') COMMENT 'attempt ids of the shares of the hold, space-separated'"
                )),
            ),
            ("queued", s(format!("ALTER TABLE `{t}` ADD COLUMN {MY_QUEUED_COLUMN}"))),
        ]
    }

    /// The waiter table's `live` and `writer`.
    fn waiter_columns(&self) -> Vec<(&'static str, Arc<str>)> {
        let t = self.t;
        vec![
            (
                "live",
                s(format!("ALTER TABLE `{t}_waiters` ADD COLUMN {MY_LIVE_COLUMN}")),
            ),
            (
                "writer",
                s(format!("ALTER TABLE `{t}_waiters` ADD COLUMN {MY_WRITER_COLUMN}")),
            ),
        ]
    }
}

/// The claim (the template of the claim batch), and the holds: releasing,
/// extending and reading them.
impl My<'_> {
    /// `attempts` first: the count is read off it.
    fn claim(&self) -> Arc<str> {
        let (t, expired) = (self.t, MY_EXPIRED);
        s(format!(
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
        ))
    }

    /// Deletes a hold (`cond`: what else it must match) unless its row is
    /// marked `queued`: [`release_last`](Statements::release_last) and
    /// [`delete_hold`](Statements::delete_hold).
    fn delete(&self, cond: &str) -> Arc<str> {
        let t = self.t;
        s(format!(
            "DELETE FROM `{t}` WHERE name = ? AND owner = ? AND token = ?{cond} AND queued = 0"
        ))
    }

    /// Frees the marked row of a hold that [`delete`](Self::delete) left.
    fn free(&self, cond: &str) -> Arc<str> {
        let t = self.t;
        s(format!(
            "UPDATE `{t}` SET {MY_FREE} WHERE name = ? AND owner = ? AND token = ?{cond}"
        ))
    }

    /// SET runs left to right: the count is read off the new `attempts`.
    fn release_one(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "UPDATE `{t}` SET attempts = TRIM(REPLACE(CONCAT(' ', attempts, ' '), CONCAT(' ', ?, ' '), ' ')), \
             hold_count = LAST_INSERT_ID({MY_SHARES}) \
             WHERE name = ? AND owner = ? AND token = ? AND hold_count > 1 AND expires_at > UTC_TIMESTAMP(6)"
        ))
    }

    /// The hold's count, and whether the attempt's share is in it.
    fn share(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "SELECT hold_count, LOCATE(?, attempts) FROM `{t}` \
             WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
        ))
    }

    /// Moves a live hold's expiry out, never in; the remaining lease goes
    /// back in the OK packet's insert id.
    fn extend(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "UPDATE `{t}` SET expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND), \
             hold_count = hold_count + 0 * LAST_INSERT_ID({MY_REMAINING}) \
             WHERE name = ? AND owner = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)"
        ))
    }

    /// The live hold of a name.
    fn inspect(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "SELECT owner, hold_count, token, {MY_REMAINING} FROM `{t}` \
             WHERE name = ? AND expires_at > UTC_TIMESTAMP(6)"
        ))
    }

    /// The live holds of a range of names, in order.
    fn list(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "SELECT name, owner, hold_count, token, {MY_REMAINING} FROM `{t}` \
             WHERE name >= ? AND name < ? AND expires_at > UTC_TIMESTAMP(6) ORDER BY name LIMIT ?"
        ))
    }
}

/// The line and the sweeper.
impl My<'_> {
    /// Joins a semaphore's or read-write lock's line; the place's id goes
    /// back in the OK packet's insert id.
    fn kind_join(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "INSERT INTO `{t}_waiters` (name, owner, attempt, expires_at, live, writer) \
             VALUES (?, ?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, NULLIF(?, 0), ?) \
             ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), expires_at = VALUES(expires_at), live = VALUES(live)"
        ))
    }

    /// Counts the live waiters of a line.
    fn waiting(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "SELECT COUNT(*) FROM `{t}_waiters` w WHERE name = ? AND expires_at > UTC_TIMESTAMP(6) AND {}",
            alive(Dialect::Mysql, t, "w")
        ))
    }

    /// Expired rows, sparing a marked one while its line has a live waiter.
    fn sweep(&self) -> Arc<str> {
        let (t, expired) = (self.t, MY_EXPIRED);
        s(format!(
            "DELETE FROM `{t}` WHERE {expired} AND (queued = 0 OR NOT EXISTS (SELECT 1 FROM `{t}_waiters` w \
               WHERE w.name = `{t}`.name AND w.expires_at > UTC_TIMESTAMP(6))) LIMIT ?"
        ))
    }
}
