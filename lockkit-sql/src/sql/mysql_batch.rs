//! MySQL/MariaDB's multi-statement batches — the claim, the fair claim,
//! the first try at a fresh name, the join — sent as one round trip over
//! the text protocol, whose values are spliced in as literals
//! ([`MysqlClaim`], [`mysql_inline`]).

use lockkit_core::raw::AcquireRequest;

use super::fragments::{MY_REMAINING, alive};
use super::mysql::{MY_SHARES, MysqlTokens};
use super::statements::Statements;
use crate::config::Dialect;
use crate::value::us;

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
/// text batch of several statements in one round trip. Only this layer's
/// MySQL statements go in, whose only `?` are placeholders (table names are
/// letters, digits and `_`), and the literals cannot change a statement:
/// nothing but `[0-9A-F]`, digits and `-`.
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) fn mysql_inline(statement: &str, args: &[crate::value::Arg<'_>]) -> String {
    use crate::value::Arg;
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

/// One claim's values as MySQL literals, for the claim batches (see
/// [`Statements::mysql_claim_batch`]).
#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
pub(crate) struct MysqlClaim {
    /// The name, owner, attempt id and memo (`NULL` for none).
    n: String,
    o: String,
    a: String,
    memo: String,
    ttl_us: i64,
    /// The name's token counter bucket; `None`: the table's token sequence
    /// (see [`MysqlTokens`]).
    bucket: Option<i64>,
}

#[cfg_attr(not(feature = "mysql"), allow(dead_code))]
impl MysqlClaim {
    /// The values of `req` (its name, owner, ttl and attempt id), with the
    /// backend's `memo` and the token source: the name's counter `bucket`,
    /// or `None` for the table's sequence.
    pub(crate) fn new(req: &AcquireRequest<'_>, memo: Option<&str>, bucket: Option<i64>) -> Self {
        MysqlClaim {
            n: hex(req.name.as_bytes()),
            o: hex(req.owner.as_bytes()),
            a: hex(req.attempt.as_bytes()),
            memo: memo.map_or_else(|| "NULL".to_owned(), |m| hex(m.as_bytes())),
            ttl_us: us(req.ttl),
            bucket,
        }
    }

    /// The `VALUES (…)` of a new hold's row (token 0 until stamped), in
    /// the column order of the claim batches' inserts.
    fn values(&self) -> String {
        let MysqlClaim {
            n, o, a, memo, ttl_us, ..
        } = self;
        format!(
            "VALUES ({n}, {o}, 1, 0, UTC_TIMESTAMP(6) + INTERVAL {ttl_us} MICROSECOND, UTC_TIMESTAMP(6), {memo}, {a})"
        )
    }
}

impl Statements {
    /// MySQL's acquisition as one multi-statement round trip: claim, then —
    /// only if the row is ours and unstamped — draw from the name's counter
    /// bucket and stamp, then read our hold back, in one transaction. The
    /// name's row lock is taken first and held to the commit, so the token is
    /// drawn after every earlier holder's. Values are spliced in as hex and
    /// decimal literals (the text protocol has no bind parameters), which
    /// cannot change the statements: nothing but `[0-9A-F]` and digits.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub fn mysql_claim_batch(&self, c: &MysqlClaim) -> String {
        let t = &self.table;
        let MysqlClaim { n, o, .. } = c;
        let claim = self.claim.replacen(
            "VALUES (?, ?, 1, 0, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, UTC_TIMESTAMP(6), ?, ?)",
            &c.values(),
            1,
        );
        let stamp = self.mysql_stamp(c);
        format!(
            "BEGIN; {claim}; {stamp} \
             SELECT hold_count, token, {MY_REMAINING} FROM `{t}` WHERE name = {n} AND owner = {o}; \
             COMMIT"
        )
    }

    /// MySQL's first try at a name this process sees nobody waiting for:
    /// insert the row if there is none (an existing row of any state is
    /// left as it is), stamp it, commit. The stamp's OK packet carries the
    /// new token as its insert id; none (0) means the name had a row, and
    /// the claim batch decides. Four short statements where the claim
    /// batch has five, one of them a long conditional update that costs the
    /// server more to parse than a fresh insert costs to run.
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub fn mysql_fresh_batch(&self, c: &MysqlClaim) -> String {
        let t = &self.table;
        let (values, stamp) = (c.values(), self.mysql_stamp(c));
        format!(
            "BEGIN; \
             INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) {values} \
             ON DUPLICATE KEY UPDATE name = name; \
             {stamp} \
             COMMIT"
        )
    }

    /// The statements of a claim batch that stamp a new hold (the row is
    /// ours with token 0): draw from the table's sequence, or from the
    /// name's counter bucket and then write the token. The last one puts
    /// the token in its OK packet's insert id (see
    /// [`mysql_fresh_batch`](Self::mysql_fresh_batch)).
    fn mysql_stamp(&self, c: &MysqlClaim) -> String {
        let t = &self.table;
        let MysqlClaim { n, o, bucket, .. } = c;
        let Some(bucket) = bucket else {
            let seq = MysqlTokens::sequence(t);
            return format!(
                "UPDATE `{t}` SET token = LAST_INSERT_ID(NEXTVAL(`{seq}`)) WHERE name = {n} AND owner = {o} AND token = 0;"
            );
        };
        let tokens = MysqlTokens::buckets(t);
        format!(
            "INSERT INTO `{tokens}` (bucket, last_token) \
               SELECT {bucket}, LAST_INSERT_ID(1) FROM `{t}` WHERE name = {n} AND owner = {o} AND token = 0 \
               ON DUPLICATE KEY UPDATE last_token = LAST_INSERT_ID(last_token + 1); \
             UPDATE `{t}` SET token = LAST_INSERT_ID(LAST_INSERT_ID()) WHERE name = {n} AND owner = {o} AND token = 0;"
        )
    }

    /// MySQL's fair acquisition, like [`mysql_claim_batch`](Self::mysql_claim_batch)
    /// with the rules of [`claim_fair`](Self::claim_fair), in two forms.
    ///
    /// Without `line` (an attempt not in line yet: the uncontended case) the
    /// batch names no other table than the unfair one does — a statement
    /// that merely mentions the waiter table costs MariaDB a share of an
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
    pub fn mysql_claim_batch_fair(&self, c: &MysqlClaim, line: bool, queued: bool) -> String {
        let t = &self.table;
        let MysqlClaim { n, o, a, .. } = c;
        let now = "UTC_TIMESTAMP(6)";
        let mine = format!("(owner = VALUES(owner) AND expires_at > {now})");
        // `take`: decided in the first assignment, read by the rest;
        // `busy`: the insert id of a claim that leaves the name to another;
        // `unmark`: the mark a take leaves.
        let (decide, take, busy, unmark) = if line {
            let live = alive(Dialect::Mysql, t, "w");
            let head = format!(
                "(COALESCE((SELECT attempt FROM `{t}_waiters` w WHERE name = {n} AND expires_at > {now} AND {live} \
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
        let (values, stamp) = (c.values(), self.mysql_stamp(c));
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
             INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts) {values} \
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
             {stamp} \
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
    /// in as in [`mysql_claim_batch`](Self::mysql_claim_batch); `live` as
    /// in [`join`](Self::join).
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub fn mysql_join_batch(&self, name: &[u8], owner: &[u8], attempt: &str, lease_us: i64, live: i64) -> String {
        let t = &self.table;
        let (n, o, a) = (hex(name), hex(owner), hex(attempt.as_bytes()));
        let now = "UTC_TIMESTAMP(6)";
        format!(
            "BEGIN; \
             INSERT INTO `{t}_waiters` (name, owner, attempt, expires_at, live) \
               VALUES ({n}, {o}, {a}, {now} + INTERVAL {lease_us} MICROSECOND, NULLIF({live}, 0)) \
             ON DUPLICATE KEY UPDATE id = LAST_INSERT_ID(id), expires_at = VALUES(expires_at), live = VALUES(live); \
             COMMIT; \
             INSERT INTO `{t}` (name, owner, hold_count, token, expires_at, acquired_at, memo, attempts, queued) \
               VALUES ({n}, X'', 0, 0, {now}, {now}, NULL, '', 1) ON DUPLICATE KEY UPDATE queued = 1"
        )
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mysql_inline_fills_each_placeholder_in_order() {
        use crate::value::Arg;
        let sql = mysql_inline(
            "DELETE FROM `t` WHERE name = ? AND token = ? AND attempts = ? AND memo = ?",
            &[Arg::Bytes(b"a'?"), Arg::Int(-7), Arg::Text(Some("0f")), Arg::Text(None)],
        );
        assert_eq!(
            sql,
            "DELETE FROM `t` WHERE name = X'61273F' AND token = -7 AND attempts = X'3066' AND memo = NULL"
        );
    }

    /// A request for `name` by the owner "o", ttl 1500 µs.
    fn req(name: &str) -> AcquireRequest<'_> {
        AcquireRequest {
            name,
            owner: "o",
            ttl: std::time::Duration::from_micros(1500),
            attempt: "0123456789abcdef",
            fair: true,
            kind: lockkit_core::LockKind::Mutex,
        }
    }

    #[test]
    fn mysql_batch_splices_only_literals() {
        let sql = Statements::new(Dialect::Mysql, "locks");
        let claim = MysqlClaim::new(&req("a'; DROP TABLE x; --"), Some("m"), Some(7));
        for batch in [
            sql.mysql_claim_batch(&claim),
            sql.mysql_claim_batch_fair(&claim, false, false),
            sql.mysql_claim_batch_fair(&claim, true, true),
        ] {
            assert!(!batch.contains('?'), "every placeholder is filled: {batch}");
            assert!(!batch.contains("DROP"), "the name is hex: {batch}");
            assert!(batch.contains("X'61273B2044524F50205441424C4520783B202D2D'"));
            assert!(batch.contains("INTERVAL 1500 MICROSECOND") && batch.contains("SELECT 7,"));
        }
        assert_eq!(hex(b""), "X''");
    }

    #[test]
    fn mysql_batch_draws_from_the_source_it_is_given() {
        let sql = Statements::new(Dialect::Mysql, "locks");
        let from = |bucket| MysqlClaim::new(&req("n"), None, bucket);
        for (claim, seq) in [(from(None), true), (from(Some(7)), false)] {
            for batch in [
                sql.mysql_claim_batch(&claim),
                sql.mysql_claim_batch_fair(&claim, false, false),
            ] {
                assert_eq!(batch.contains("NEXTVAL(`locks_token_seq`)"), seq, "{batch}");
                assert_eq!(batch.contains("`locks_tokens`"), !seq, "{batch}");
            }
        }
    }
}
