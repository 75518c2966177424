//! PostgreSQL's statements: [`postgres`] fills in the [`Statements`] from
//! the methods of [`Pg`], one group per concern — the schema, the claims,
//! the holds, the line and the sweeper.

use std::sync::Arc;

use super::fragments::{PG_NO_FLUSH, alive, pg_us, s, shares};
use super::statements::{ClaimShape, Statements};
use crate::config::Dialect;

/// `(object name)` → `(count)`, as [`Statements::exists`] says.
const EXISTS: &str = "SELECT COUNT(*)::int8 FROM pg_catalog.pg_class c \
                   JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
                   WHERE n.nspname = current_schema() AND c.relname = $1";

/// `(table)` → its columns, as [`Statements::columns`] says.
const COLUMNS: &str = "SELECT column_name::text, data_type::text FROM information_schema.columns \
                    WHERE table_schema = current_schema() AND table_name = $1";

/// PostgreSQL's statements for the lock table `t`.
pub(super) fn postgres(t: &str) -> Statements {
    let pg = Pg::new(t);
    Statements {
        create: pg.create(),
        exists: s(EXISTS.to_owned()),
        prepare: vec![],
        columns: s(COLUMNS.to_owned()),
        name_types: &["bytea"],
        claim: pg.claim(),
        claim_shape: ClaimShape::Rows,
        holder: pg.holder(),
        buckets: 1,
        release_last: pg.notify(" AND attempts = $4 AND expires_at > now()"),
        release_last_queued: None,
        release_one: pg.release_one(),
        share: pg.share(),
        added_columns: pg.added_columns(),
        extend: pg.extend(),
        inspect: pg.inspect(),
        list: pg.list(),
        delete_hold: pg.notify(""),
        delete_hold_queued: None,
        sweep: pg.sweep(),
        deletes_return_rows: true,
        updates_return_rows: true,
        wait_join: Some(pg.wait_list("pg_advisory_lock_shared")),
        wait_leave: Some(pg.wait_list("pg_advisory_unlock_shared")),
        claim_fair: pg.claim_fair(""),
        claim_fair_contended: Some(pg.claim_fair_contended()),
        claim_absent: Some(pg.claim_absent()),
        holder_fair: s(String::new()),
        join: pg.join(),
        kind_join: pg.kind_join(),
        waiter_columns: pg.waiter_columns(),
        live_take: s("SELECT pg_try_advisory_lock($1)".to_owned()),
        sweep_live: None,
        leave: pg.leave(),
        waiting: pg.waiting(),
        sweep_waiters: pg.sweep_waiters(),
        dialect: Dialect::Postgres,
        table: t.to_owned(),
    }
}

/// The pieces of text that several of one table's statements share, and
/// the methods that write each statement.
struct Pg<'t> {
    /// The lock table.
    t: &'t str,
    /// Microseconds from now to `expires_at`.
    remaining: String,
    /// The channel releases are announced on.
    chan: String,
    /// Whether the waiter row `w` belongs to a live process (see [`alive`]).
    live: String,
    /// Whether the attempt `$5` may take a free name: it is the oldest live
    /// waiter for `$1`, or nobody waits.
    head: String,
    /// The transaction advisory lock on the name `$1`, held to the commit,
    /// under which a claim draws its token.
    guard: String,
    /// The conflict update of a claim: take over an expired row, re-enter
    /// one's own (a repeated attempt changes nothing but the lease).
    claim_set: String,
}

impl<'t> Pg<'t> {
    /// The shared pieces for the table `t`.
    fn new(t: &'t str) -> Self {
        let l_shares = shares("l.attempts");
        let live = alive(Dialect::Postgres, t, "w");
        let head = format!(
            "(COALESCE((SELECT attempt FROM \"{t}_waiters\" w WHERE name = $1 AND expires_at > now() AND {live} \
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
        Pg {
            t,
            remaining: pg_us("expires_at - now()"),
            chan: format!("lockkit_{t}"),
            live,
            head,
            guard: format!(
                "guard AS (SELECT pg_advisory_xact_lock(hashtext('lockkit:{t}'), hashtext(encode($1, 'hex'))))"
            ),
            claim_set,
        }
    }

    /// The wait-list key of the name in `x`: waiters hold it shared.
    fn wait_key(&self, x: &str) -> String {
        let t = self.t;
        format!("hashtext('lockkit-wait:{t}'), hashtext(encode({x}, 'hex'))")
    }
}

/// The schema: the tables and the sequence, and the columns an older
/// lockkit's tables lack.
impl Pg<'_> {
    /// The lock table, the token sequence and the waiter table.
    fn create(&self) -> Vec<(String, Arc<str>)> {
        let t = self.t;
        vec![
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
                 live BIGINT, \
                 writer INT NOT NULL DEFAULT 0, \
                 UNIQUE (name, id))"
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
                    "ALTER TABLE \"{t}\" ADD COLUMN IF NOT EXISTS attempts TEXT NOT NULL DEFAULT ''"
                )),
            ),
            (
                "queued",
                s(format!(
                    "ALTER TABLE \"{t}\" ADD COLUMN IF NOT EXISTS queued BOOLEAN NOT NULL DEFAULT false"
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
                s(format!(
                    "ALTER TABLE \"{t}_waiters\" ADD COLUMN IF NOT EXISTS live BIGINT"
                )),
            ),
            (
                "writer",
                s(format!(
                    "ALTER TABLE \"{t}_waiters\" ADD COLUMN IF NOT EXISTS writer INT NOT NULL DEFAULT 0"
                )),
            ),
        ]
    }
}

/// The claims: unfair, fair, and the plain insert of a name without a row.
impl Pg<'_> {
    /// The token is drawn in the claim itself, after taking a transaction
    /// advisory lock on the name (held to the commit): any earlier holder
    /// drew its token under the same lock, so before ours.
    fn claim(&self) -> Arc<str> {
        let (t, remaining) = (self.t, &self.remaining);
        let (guard, claim_set) = (&self.guard, &self.claim_set);
        s(format!(
            "WITH {guard}, \
             claim AS (\
               INSERT INTO \"{t}\" AS l (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
               VALUES ($1, $2, 1, (SELECT nextval('\"{t}_token_seq\"') FROM guard), \
                 now() + $3::int8 * interval '1 microsecond', now(), $4::text, $5::text) \
               ON CONFLICT (name) DO UPDATE SET {claim_set} \
               WHERE l.expires_at <= now() OR l.owner = EXCLUDED.owner \
               RETURNING hold_count, token, expires_at) \
             SELECT 1::int8, hold_count, token, {remaining} FROM claim \
             UNION ALL \
             SELECT 0::int8, hold_count, token, {remaining} FROM \"{t}\" \
               WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM claim)"
        ))
    }

    /// As [`claim`](Self::claim); the conflict update takes over an expired
    /// row marked `queued` only for the head of the line, and a row found
    /// held is marked (`mark`). `only` may keep it from inserting at all.
    fn claim_fair(&self, only: &str) -> Arc<str> {
        let Pg { t, remaining, head, .. } = self;
        let (guard, claim_set) = (&self.guard, &self.claim_set);
        // Whether waiters other than the attempt `$5` are in `$1`'s line.
        let others =
            format!("EXISTS (SELECT 1 FROM \"{t}_waiters\" WHERE name = $1 AND attempt <> $5 AND expires_at > now())");
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
    }

    /// A claim that cannot win (the name held by another, or free for a
    /// waiter ahead) inserts nothing: its conflict would take the name's
    /// advisory lock and row lock, which the next waiter's take then waits
    /// for. The look costs an uncontended claim a probe of the name's
    /// index entries, so it is used only where waiters are seen.
    fn claim_fair_contended(&self) -> Arc<str> {
        let Pg { t, head, .. } = self;
        self.claim_fair(&format!(
            "WHERE NOT EXISTS (SELECT 1 FROM \"{t}\" WHERE name = $1 AND CASE WHEN expires_at > now() \
               THEN owner <> $2 ELSE queued AND NOT {head} END)"
        ))
    }

    /// The token is drawn under the name's advisory lock, as in
    /// [`claim`](Self::claim).
    fn claim_absent(&self) -> Arc<str> {
        let (t, remaining, guard) = (self.t, &self.remaining, &self.guard);
        s(format!(
            "WITH {guard} \
             INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
             VALUES ($1, $2, 1, (SELECT nextval('\"{t}_token_seq\"') FROM guard), \
               now() + $3::int8 * interval '1 microsecond', now(), $4::text, $5::text) \
             ON CONFLICT (name) DO NOTHING \
             RETURNING 1::int8, hold_count, token, {remaining}"
        ))
    }

    /// The holder's remaining lease, after a claim found the name busy.
    fn holder(&self) -> Arc<str> {
        let Pg { t, remaining, .. } = self;
        s(format!("SELECT {remaining} FROM \"{t}\" WHERE name = $1"))
    }
}

/// The holds: releasing, extending and reading them.
impl Pg<'_> {
    /// Deletes announce the freed name (hex) and the hold's token to
    /// waiters, delivered at commit — only when somebody holds its
    /// wait-list key (a NOTIFY serializes commits). The releasing process
    /// has woken its own waiters already: by the token it knows the
    /// notification for its own. One statement: the row goes unless marked
    /// `queued`, else it is left free for the line. (A join that marks the
    /// row between this statement's snapshot and its row lock makes both
    /// miss it: the release then finds its hold still there and runs
    /// again.) `cond`: what else the hold must match.
    fn notify(&self, cond: &str) -> Arc<str> {
        let Pg { t, chan, .. } = self;
        s(format!(
            "WITH gone AS (DELETE FROM \"{t}\" WHERE name = $1 AND owner = $2 AND token = $3{cond} AND NOT queued \
               RETURNING name), \
             freed AS (UPDATE \"{t}\" SET owner = ''::bytea, hold_count = 0, attempts = '', memo = NULL, \
               expires_at = now() WHERE name = $1 AND owner = $2 AND token = $3{cond} AND queued RETURNING name), \
             d AS (SELECT name FROM gone UNION ALL SELECT name FROM freed) \
             SELECT CASE WHEN pg_try_advisory_xact_lock({}) THEN 1::int8 \
               ELSE (SELECT 1::int8 FROM pg_notify('{chan}', encode(d.name, 'hex') || ' ' || $3::text)) END FROM d",
            self.wait_key("d.name")
        ))
    }

    /// Takes `$1`'s share out of a hold of more than one.
    fn release_one(&self) -> Arc<str> {
        let t = self.t;
        // `attempts` without the share `$1`.
        let left = "btrim(replace(' ' || attempts || ' ', ' ' || $1 || ' ', ' '))".to_owned();
        s(format!(
            "UPDATE \"{t}\" SET attempts = {left}, hold_count = {} \
             WHERE name = $2 AND owner = $3 AND token = $4 AND hold_count > 1 AND expires_at > now() \
             RETURNING hold_count",
            shares(&left)
        ))
    }

    /// The hold's count, and whether `$1`'s share is in it.
    fn share(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "SELECT hold_count, strpos(attempts, $1)::int8 FROM \"{t}\" \
             WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > now()"
        ))
    }

    /// Moves a live hold's expiry out, never in.
    fn extend(&self) -> Arc<str> {
        let Pg { t, remaining, .. } = self;
        s(format!(
            "UPDATE \"{t}\" SET expires_at = GREATEST(expires_at, now() + $1::int8 * interval '1 microsecond') \
             WHERE name = $2 AND owner = $3 AND token = $4 AND expires_at > now() RETURNING {remaining}"
        ))
    }

    /// The live hold of a name.
    fn inspect(&self) -> Arc<str> {
        let Pg { t, remaining, .. } = self;
        s(format!(
            "SELECT owner, hold_count, token, {remaining} FROM \"{t}\" WHERE name = $1 AND expires_at > now()"
        ))
    }

    /// The live holds of a range of names, in order.
    fn list(&self) -> Arc<str> {
        let Pg { t, remaining, .. } = self;
        s(format!(
            "SELECT name, owner, hold_count, token, {remaining} FROM \"{t}\" \
             WHERE name >= $1 AND name < $2 AND expires_at > now() ORDER BY name LIMIT $3"
        ))
    }
}

/// The line: the wait lists, joining, leaving and counting.
impl Pg<'_> {
    /// Takes or drops (`function`) a shared place on the name's wait list.
    fn wait_list(&self, function: &str) -> Arc<str> {
        s(format!("SELECT {function}({})", self.wait_key("$1")))
    }

    /// Joins a mutex's line, marking the name's row `queued` (a free one
    /// if there is none) in the same statement.
    fn join(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "WITH free AS (INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, \
                 attempts, queued) VALUES ($1, ''::bytea, 0, 0, now(), now(), NULL, '', true) \
               ON CONFLICT (name) DO NOTHING), \
             mark AS (UPDATE \"{t}\" SET queued = true WHERE name = $1 AND NOT queued) \
             INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live) \
             SELECT $1, $2, $3::text, now() + $4::int8 * interval '1 microsecond', NULLIF($5::int8, 0) \
               FROM ({PG_NO_FLUSH}) AS cfg \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = EXCLUDED.expires_at, live = EXCLUDED.live RETURNING id"
        ))
    }

    /// Joins a semaphore's or read-write lock's line (no mark).
    fn kind_join(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live, writer) \
             SELECT $1, $2, $3::text, now() + $4::int8 * interval '1 microsecond', NULLIF($5::int8, 0), $6::int \
               FROM ({PG_NO_FLUSH}) AS cfg \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = EXCLUDED.expires_at, live = EXCLUDED.live RETURNING id"
        ))
    }

    /// A head that leaves tells the next in line (the name may be free).
    fn leave(&self) -> Arc<str> {
        let Pg { t, chan, live, .. } = self;
        s(format!(
            "WITH d AS (DELETE FROM \"{t}_waiters\" WHERE attempt = $1::text RETURNING name, id) \
             SELECT pg_notify('{chan}', encode(d.name, 'hex')) FROM d, ({PG_NO_FLUSH}) AS cfg WHERE NOT EXISTS \
               (SELECT 1 FROM \"{t}_waiters\" w WHERE w.name = d.name AND w.id < d.id AND w.expires_at > now() \
                 AND {live})"
        ))
    }

    /// Counts the live waiters of a line.
    fn waiting(&self) -> Arc<str> {
        let Pg { t, live, .. } = self;
        s(format!(
            "SELECT COUNT(*)::int8 FROM \"{t}_waiters\" w WHERE name = $1 AND expires_at > now() AND {live}"
        ))
    }
}

/// The sweeper's deletes. SKIP LOCKED: concurrent sweepers split the work
/// instead of queueing.
impl Pg<'_> {
    /// Expired rows, sparing a marked one while its line has a live waiter.
    fn sweep(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "DELETE FROM \"{t}\" WHERE name IN (SELECT name FROM \"{t}\" x WHERE expires_at <= now() \
               AND (NOT queued OR NOT EXISTS (SELECT 1 FROM \"{t}_waiters\" w \
                 WHERE w.name = x.name AND w.expires_at > now())) \
             LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()"
        ))
    }

    /// Expired places in line.
    fn sweep_waiters(&self) -> Arc<str> {
        let t = self.t;
        s(format!(
            "DELETE FROM \"{t}_waiters\" WHERE id IN (SELECT id FROM \"{t}_waiters\" WHERE expires_at <= now() \
             LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()"
        ))
    }
}
