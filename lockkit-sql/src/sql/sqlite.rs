//! SQLite's statements: [`sqlite`] fills in the [`Statements`] from the
//! methods of [`Lite`], one group per concern — the schema and its
//! triggers, the claims, the holds, the line and the sweeper.

use std::sync::Arc;

use super::fragments::{SQLITE_NOW, alive, s, shares};
use super::statements::{ClaimShape, Statements};
use crate::config::Dialect;

/// SQLite's statements for the lock table `t`.
pub(super) fn sqlite(t: &str) -> Statements {
    let lite = Lite::new(t);
    // The hold of the last share: the attempt's, live.
    let last = format!(" AND attempts = ?4 AND expires_at > {SQLITE_NOW}");
    Statements {
        create: lite.create(),
        exists: s("SELECT COUNT(*) FROM sqlite_master WHERE name = ?1".to_owned()),
        prepare: lite.prepare(),
        columns: s("SELECT name, lower(type) FROM pragma_table_info(?1)".to_owned()),
        name_types: &[],
        claim: lite.claim(),
        claim_shape: ClaimShape::RowsOrHolder,
        holder: lite.holder(),
        buckets: 1,
        release_last: lite.delete(&last),
        release_last_queued: Some(lite.free(&last)),
        release_one: lite.release_one(),
        share: lite.share(),
        added_columns: lite.added_columns(),
        extend: lite.extend(),
        inspect: lite.inspect(),
        list: lite.list(),
        delete_hold: lite.delete(""),
        delete_hold_queued: Some(lite.free("")),
        sweep: lite.sweep(),
        deletes_return_rows: false,
        updates_return_rows: true,
        wait_join: None,
        wait_leave: None,
        claim_fair: lite.claim_fair(),
        claim_fair_contended: None,
        claim_absent: None,
        holder_fair: lite.holder_fair(),
        join: lite.join(),
        kind_join: lite.kind_join(),
        waiter_columns: lite.waiter_columns(),
        live_take: lite.live_take(),
        sweep_live: Some(lite.sweep_live()),
        leave: s(format!("DELETE FROM \"{t}_waiters\" WHERE attempt = ?1")),
        waiting: lite.waiting(),
        sweep_waiters: lite.sweep_waiters(),
        dialect: Dialect::Sqlite,
        table: t.to_owned(),
    }
}

/// The pieces of text that several of one table's statements share, and
/// the methods that write each statement.
struct Lite<'t> {
    /// The lock table.
    t: &'t str,
    /// Whether the waiter row `w` belongs to a live process (see [`alive`]).
    live: String,
    /// Whether the attempt `?5` (a claim's) may take the free name `?1`: it
    /// is the oldest live waiter for it, or nobody waits.
    head5: String,
    /// As `head5`, for the attempt `?2` of `holder_fair`.
    head2: String,
    /// A hold's row made free (expired, no owner) for the line.
    free: String,
    /// A claim's start: inserts the row, or takes over an expired one or
    /// re-enters one's own (the `WHERE` that follows says which may).
    claim_insert: String,
    /// The assignments of a claim's conflict update.
    claim_sets: String,
}

impl<'t> Lite<'t> {
    /// The shared pieces for the table `t`.
    fn new(t: &'t str) -> Self {
        let now = SQLITE_NOW;
        let t_shares = shares(&format!("\"{t}\".attempts"));
        // The whole statement holds SQLite's write lock, so a token read
        // from the counter here cannot be overtaken by another acquire +
        // release.
        let next = format!("(SELECT last_token + 1 FROM \"{t}_tokens\" WHERE bucket = 0)");
        let live = alive(Dialect::Sqlite, t, "w");
        let head = |a: &str| {
            format!(
                "(COALESCE((SELECT attempt FROM \"{t}_waiters\" w WHERE name = ?1 AND expires_at > {now} AND {live} \
               ORDER BY id LIMIT 1), {a}) = {a})"
            )
        };
        let (head5, head2) = (head("?5"), head("?2"));
        let claim_insert = format!(
            "INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
         VALUES (?1, ?2, 1, {next}, {now} + ?3, {now}, ?4, ?5) \
         ON CONFLICT (name) DO UPDATE SET"
        );
        let claim_sets = format!(
            "owner = excluded.owner, \
         attempts = CASE WHEN \"{t}\".expires_at <= {now} THEN ?5 \
           WHEN instr(\"{t}\".attempts, ?5) > 0 THEN \"{t}\".attempts \
           ELSE \"{t}\".attempts || ' ' || ?5 END, \
         hold_count = CASE WHEN \"{t}\".expires_at <= {now} THEN 1 \
           WHEN instr(\"{t}\".attempts, ?5) > 0 THEN {t_shares} ELSE {t_shares} + 1 END, \
         token = CASE WHEN \"{t}\".expires_at <= {now} THEN {next} ELSE \"{t}\".token END, \
         acquired_at = CASE WHEN \"{t}\".expires_at <= {now} THEN {now} ELSE \"{t}\".acquired_at END, \
         memo = CASE WHEN \"{t}\".expires_at <= {now} THEN excluded.memo ELSE \"{t}\".memo END, \
         expires_at = MAX(\"{t}\".expires_at, excluded.expires_at)"
        );
        Lite {
            t,
            live,
            head5,
            head2,
            free: format!("owner = x'', hold_count = 0, attempts = '', memo = NULL, expires_at = {now}"),
            claim_insert,
            claim_sets,
        }
    }
}

/// The schema: the tables, the counter row and triggers, and the columns
/// an older lockkit's tables lack.
impl Lite<'_> {
    /// The lock table, the token counter, the waiter table and the
    /// liveness rows.
    fn create(&self) -> Vec<(String, Arc<str>)> {
        let t = self.t;
        vec![
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
                 live INTEGER, \
                 writer INTEGER NOT NULL DEFAULT 0, \
                 UNIQUE (name, id))"
                )),
            ),
            (
                format!("{t}_live"),
                s(format!(
                    "CREATE TABLE IF NOT EXISTS \"{t}_live\" (id INTEGER PRIMARY KEY, expires_at INTEGER NOT NULL)"
                )),
            ),
        ]
    }

    /// The token counter's row and the triggers that keep the counter and
    /// the line in step with the lock table.
    fn prepare(&self) -> Vec<Arc<str>> {
        let (t, now) = (self.t, SQLITE_NOW);
        vec![
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
            // A waiter joining a mutex's line marks the name's row `queued`
            // (a free one if there is none), in the same statement; not a
            // place in a semaphore's or read-write lock's line, whose key
            // starts with 0xFF (an older lockkit's trigger marked every
            // line's: it goes).
            s(format!("DROP TRIGGER IF EXISTS \"{t}_waiter_joined\"")),
            s(format!(
                "CREATE TRIGGER IF NOT EXISTS \"{t}_waiter_marks\" AFTER INSERT ON \"{t}_waiters\" \
                 WHEN substr(NEW.name, 1, 1) <> x'FF' BEGIN \
                 INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts, queued) \
                 VALUES (NEW.name, x'', 0, 0, {now}, {now}, NULL, '', 1) \
                 ON CONFLICT (name) DO UPDATE SET queued = 1; END"
            )),
        ]
    }

    /// The lock table's `attempts` and `queued`.
    fn added_columns(&self) -> Vec<(&'static str, Arc<str>)> {
        let t = self.t;
        vec![
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
        ]
    }

    /// The waiter table's `live` and `writer`.
    fn waiter_columns(&self) -> Vec<(&'static str, Arc<str>)> {
        let t = self.t;
        vec![
            (
                "live",
                s(format!("ALTER TABLE \"{t}_waiters\" ADD COLUMN live INTEGER")),
            ),
            (
                "writer",
                s(format!(
                    "ALTER TABLE \"{t}_waiters\" ADD COLUMN writer INTEGER NOT NULL DEFAULT 0"
                )),
            ),
        ]
    }
}

/// The claims, and what a busy claim asks after.
impl Lite<'_> {
    /// Takes a free or expired name, or re-enters one's own hold.
    fn claim(&self) -> Arc<str> {
        let (t, claim_insert, claim_sets) = (self.t, &self.claim_insert, &self.claim_sets);
        let now = SQLITE_NOW;
        let claim = format!("{claim_insert} {claim_sets}");
        s(format!(
            "{claim} \
             WHERE \"{t}\".expires_at <= {now} OR \"{t}\".owner = excluded.owner \
             RETURNING hold_count, token, expires_at - {now}"
        ))
    }

    /// SQLite runs one writer at a time: a mark is never lost to a
    /// concurrent statement, so a claim that finds the name held need not
    /// mark it (the join did).
    fn claim_fair(&self) -> Arc<str> {
        let (t, head5) = (self.t, &self.head5);
        let (claim_insert, claim_sets) = (&self.claim_insert, &self.claim_sets);
        let now = SQLITE_NOW;
        s(format!(
            "{claim_insert} \
               queued = CASE WHEN \"{t}\".expires_at <= {now} THEN \"{t}\".queued AND EXISTS \
                 (SELECT 1 FROM \"{t}_waiters\" WHERE name = ?1 AND attempt <> ?5 AND expires_at > {now}) \
                 ELSE \"{t}\".queued END, \
               {claim_sets} \
             WHERE (\"{t}\".expires_at <= {now} AND (\"{t}\".queued = 0 OR {head5})) \
               OR (\"{t}\".owner = excluded.owner AND \"{t}\".expires_at > {now}) \
             RETURNING hold_count, token, expires_at - {now}"
        ))
    }

    /// The holder's remaining lease, after a claim found the name busy.
    fn holder(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!("SELECT expires_at - {now} FROM \"{t}\" WHERE name = ?1"))
    }

    /// The holder's remaining lease and whether the attempt heads the line,
    /// after a fair claim found the name busy.
    fn holder_fair(&self) -> Arc<str> {
        let Lite { t, head2, .. } = self;
        let now = SQLITE_NOW;
        s(format!(
            "SELECT COALESCE((SELECT expires_at - {now} FROM \"{t}\" WHERE name = ?1), -1), {head2}"
        ))
    }
}

/// The holds: releasing, extending and reading them.
impl Lite<'_> {
    /// Deletes a hold (`cond`: what else it must match) unless its row is
    /// marked `queued`: [`release_last`](Statements::release_last) and
    /// [`delete_hold`](Statements::delete_hold).
    fn delete(&self, cond: &str) -> Arc<str> {
        let t = self.t;
        s(format!(
            "DELETE FROM \"{t}\" WHERE name = ?1 AND owner = ?2 AND token = ?3{cond} AND queued = 0"
        ))
    }

    /// Frees the marked row of a hold that [`delete`](Self::delete) left.
    fn free(&self, cond: &str) -> Arc<str> {
        let Lite { t, free, .. } = self;
        s(format!(
            "UPDATE \"{t}\" SET {free} WHERE name = ?1 AND owner = ?2 AND token = ?3{cond}"
        ))
    }

    /// Takes `?1`'s share out of a hold of more than one.
    fn release_one(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        // `attempts` without the share `?1`.
        let left = "trim(replace(' ' || attempts || ' ', ' ' || ?1 || ' ', ' '))".to_owned();
        s(format!(
            "UPDATE \"{t}\" SET attempts = {left}, hold_count = {} \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND hold_count > 1 AND expires_at > {now} \
             RETURNING hold_count",
            shares(&left)
        ))
    }

    /// The hold's count, and whether `?1`'s share is in it.
    fn share(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "SELECT hold_count, instr(attempts, ?1) FROM \"{t}\" \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND expires_at > {now}"
        ))
    }

    /// Moves a live hold's expiry out, never in.
    fn extend(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "UPDATE \"{t}\" SET expires_at = MAX(expires_at, {now} + ?1) \
             WHERE name = ?2 AND owner = ?3 AND token = ?4 AND expires_at > {now} RETURNING expires_at - {now}"
        ))
    }

    /// The live hold of a name.
    fn inspect(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "SELECT owner, hold_count, token, expires_at - {now} FROM \"{t}\" WHERE name = ?1 AND expires_at > {now}"
        ))
    }

    /// The live holds of a range of names, in order.
    fn list(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "SELECT name, owner, hold_count, token, expires_at - {now} FROM \"{t}\" \
             WHERE name >= ?1 AND name < ?2 AND expires_at > {now} ORDER BY name LIMIT ?3"
        ))
    }
}

/// The line: joining, counting, and the liveness rows.
impl Lite<'_> {
    /// Joins a mutex's line (the trigger `<table>_waiter_marks` marks the
    /// name's row).
    fn join(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live) \
             VALUES (?1, ?2, ?3, {now} + ?4, NULLIF(?5, 0)) \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = excluded.expires_at, live = excluded.live RETURNING id"
        ))
    }

    /// Joins a semaphore's or read-write lock's line.
    fn kind_join(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live, writer) \
             VALUES (?1, ?2, ?3, {now} + ?4, NULLIF(?5, 0), ?6) \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = excluded.expires_at, live = excluded.live RETURNING id"
        ))
    }

    /// Counts the live waiters of a line.
    fn waiting(&self) -> Arc<str> {
        let Lite { t, live, .. } = self;
        let now = SQLITE_NOW;
        s(format!(
            "SELECT COUNT(*) FROM \"{t}_waiters\" w WHERE name = ?1 AND expires_at > {now} AND {live}"
        ))
    }

    /// Takes or renews this process's liveness row.
    fn live_take(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "INSERT INTO \"{t}_live\" (id, expires_at) VALUES (?1, {now} + ?2) \
             ON CONFLICT (id) DO UPDATE SET expires_at = excluded.expires_at"
        ))
    }
}

/// The sweeper's deletes.
impl Lite<'_> {
    /// Expired rows, sparing a marked one while its line has a live waiter.
    fn sweep(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "DELETE FROM \"{t}\" WHERE name IN (SELECT name FROM \"{t}\" x WHERE expires_at <= {now} \
               AND (queued = 0 OR NOT EXISTS (SELECT 1 FROM \"{t}_waiters\" w \
                 WHERE w.name = x.name AND w.expires_at > {now})) LIMIT ?1) \
             AND expires_at <= {now}"
        ))
    }

    /// Expired places in line.
    fn sweep_waiters(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "DELETE FROM \"{t}_waiters\" WHERE id IN \
             (SELECT id FROM \"{t}_waiters\" WHERE expires_at <= {now} LIMIT ?1) AND expires_at <= {now}"
        ))
    }

    /// Expired liveness rows.
    fn sweep_live(&self) -> Arc<str> {
        let (t, now) = (self.t, SQLITE_NOW);
        s(format!(
            "DELETE FROM \"{t}_live\" WHERE id IN (SELECT id FROM \"{t}_live\" WHERE expires_at <= {now} LIMIT ?1) \
             AND expires_at <= {now}"
        ))
    }
}
