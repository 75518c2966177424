//! PostgreSQL's statements.

use super::fragments::{PG_NO_FLUSH, alive, pg_us, s, shares};
use super::statements::{ClaimShape, Statements};
use crate::config::Dialect;

pub(super) fn postgres(t: &str) -> Statements {
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
                 live BIGINT, \
                 writer INT NOT NULL DEFAULT 0, \
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
        // The token is drawn under the name's advisory lock, as in `claim`.
        claim_absent: Some(s(format!(
            "WITH {guard} \
             INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) \
             VALUES ($1, $2, 1, (SELECT nextval('\"{t}_token_seq\"') FROM guard), \
               now() + $3::int8 * interval '1 microsecond', now(), $4::text, $5::text) \
             ON CONFLICT (name) DO NOTHING \
             RETURNING 1::int8, hold_count, token, {remaining}"
        ))),
        holder_fair: s(String::new()),
        join: s(format!(
            "WITH free AS (INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at, memo, \
                 attempts, queued) VALUES ($1, ''::bytea, 0, 0, now(), now(), NULL, '', true) \
               ON CONFLICT (name) DO NOTHING), \
             mark AS (UPDATE \"{t}\" SET queued = true WHERE name = $1 AND NOT queued) \
             INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live) \
             SELECT $1, $2, $3::text, now() + $4::int8 * interval '1 microsecond', NULLIF($5::int8, 0) \
               FROM ({PG_NO_FLUSH}) AS cfg \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = EXCLUDED.expires_at, live = EXCLUDED.live RETURNING id"
        )),
        kind_join: s(format!(
            "INSERT INTO \"{t}_waiters\" (name, owner, attempt, expires_at, live, writer) \
             SELECT $1, $2, $3::text, now() + $4::int8 * interval '1 microsecond', NULLIF($5::int8, 0), $6::int \
               FROM ({PG_NO_FLUSH}) AS cfg \
             ON CONFLICT (attempt) DO UPDATE SET expires_at = EXCLUDED.expires_at, live = EXCLUDED.live RETURNING id"
        )),
        waiter_columns: vec![
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
        ],
        live_take: s("SELECT pg_try_advisory_lock($1)".to_owned()),
        sweep_live: None,
        // A head that leaves tells the next in line (the name may be free).
        leave: s(format!(
            "WITH d AS (DELETE FROM \"{t}_waiters\" WHERE attempt = $1::text RETURNING name, id) \
             SELECT pg_notify('{chan}', encode(d.name, 'hex')) FROM d, ({PG_NO_FLUSH}) AS cfg WHERE NOT EXISTS \
               (SELECT 1 FROM \"{t}_waiters\" w WHERE w.name = d.name AND w.id < d.id AND w.expires_at > now() \
                 AND {live})"
        )),
        waiting: s(format!(
            "SELECT COUNT(*)::int8 FROM \"{t}_waiters\" w WHERE name = $1 AND expires_at > now() AND {live}"
        )),
        sweep_waiters: s(format!(
            "DELETE FROM \"{t}_waiters\" WHERE id IN (SELECT id FROM \"{t}_waiters\" WHERE expires_at <= now() \
             LIMIT $1 FOR UPDATE SKIP LOCKED) AND expires_at <= now()"
        )),
        dialect: Dialect::Postgres,
        table: t.to_owned(),
    }
}
