//! Extending leases: one hold, or many in chunks of one statement each
//! (the watchdog's `extend_many`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::raw::{ExtendOutcome, Hold, ttl_millis, valid_until};
use lockkit_core::{LockError, LockKind};

#[cfg(feature = "postgres")]
use crate::config::Dialect;
use crate::conn::sent;
use crate::handle::{Inner, SqlBackend};
use crate::value::{Arg, Col, Val, from_us, us};

/// Holds per `extend_many` statement.
pub(crate) const EXTEND_CHUNK: usize = 256;

impl Inner {
    pub(crate) async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let ttl = Duration::from_millis(ttl_millis(ttl));
        if hold.kind != LockKind::Mutex {
            return self.kind_extend(hold, ttl).await;
        }
        let [a, b, c] = Self::hold_args(hold);
        let args = [Arg::Int(us(ttl)), a, b, c];
        let n = Some(hold.name.as_str());
        let called = Instant::now();
        let (remaining, sent) = sent::timed(async {
            Ok::<_, LockError>(if self.sql.updates_return_rows {
                self.retry("extend", n, || {
                    self.renew_db.fetch_one(&self.sql.extend, &args, &[Col::Int])
                })
                .await?
                .map(|r| from_us(r[0].int()))
            } else {
                let done = self
                    .retry("extend", n, || self.renew_db.exec(&self.sql.extend, &args))
                    .await?;
                (done.rows == 1).then(|| Duration::from_micros(done.last_id))
            })
        })
        .await;
        let (remaining, sent_at) = (remaining?, sent.unwrap_or(called));
        Ok(match remaining {
            Some(r) => ExtendOutcome::Extended {
                valid_until: Some(valid_until(sent_at, r)),
            },
            None => ExtendOutcome::NotHeld,
        })
    }

    /// Extends `holds` (one ttl) in one statement (MySQL: an update and a
    /// read-back); the remaining lease of each hold that is still ours.
    pub(crate) async fn extend_chunk(
        &self,
        ttl: Duration,
        holds: &[&Hold],
    ) -> Result<Vec<Option<Duration>>, LockError> {
        let (update, select) = self.sql.extend_many(holds.len());
        let (update, select): (Arc<str>, Option<Arc<str>>) = (update.into(), select.map(Into::into));
        let mut triples = Vec::with_capacity(holds.len() * 3);
        for h in holds {
            triples.extend(Self::hold_args(h));
        }
        let mut args = vec![Arg::Int(us(ttl))];
        args.extend(triples.iter().copied());
        let cols = [Col::Bytes, Col::Bytes, Col::Int, Col::Int];
        let rows = match &select {
            #[cfg(feature = "postgres")]
            None if self.config.dialect == Dialect::Postgres => {
                let mut rows = Vec::new();
                for part in names_once(holds) {
                    let lists = || {
                        (
                            part.iter().map(|h| h.name.as_bytes()).collect(),
                            part.iter().map(|h| h.owner.as_bytes()).collect(),
                            part.iter().map(|h| h.token as i64).collect(),
                        )
                    };
                    let part_rows = self
                        .retry("extend", None, || {
                            self.renew_db.pg_fetch_lists(&update, us(ttl), lists(), &cols)
                        })
                        .await?;
                    rows.extend(part_rows);
                }
                rows
            }
            None => {
                self.retry("extend", None, || self.renew_db.fetch(&update, &args, &cols))
                    .await?
            }
            Some(select) => {
                self.retry("extend", None, || self.renew_db.exec(&update, &args))
                    .await?;
                self.retry("extend", None, || self.renew_db.fetch(select, &triples, &cols))
                    .await?
            }
        };
        let found: Vec<(Vec<u8>, Vec<u8>, u64, Duration)> = rows
            .into_iter()
            .map(|r| {
                let mut r = r.into_iter();
                let name = r.next().map(Val::into_bytes).unwrap_or_default();
                let owner = r.next().map(Val::into_bytes).unwrap_or_default();
                let token = r.next().map_or(0, |v| v.int() as u64);
                let remaining = from_us(r.next().map_or(0, |v| v.int()));
                (name, owner, token, remaining)
            })
            .collect();
        Ok(holds
            .iter()
            .map(|h| {
                found
                    .iter()
                    .find(|(n, o, t, _)| n == h.name.as_bytes() && o == h.owner.as_bytes() && *t == h.token)
                    .map(|f| f.3)
            })
            .collect())
    }
}

/// `holds` in parts that name each lock once: the Postgres statement finds
/// a name's owner and token by its first place in the arrays. A name comes
/// twice only when a hold lost meanwhile is renewed beside the one that
/// followed it, so nearly always there is one part.
#[cfg(feature = "postgres")]
fn names_once<'a>(holds: &[&'a Hold]) -> Vec<Vec<&'a Hold>> {
    let mut parts: Vec<(std::collections::HashSet<&str>, Vec<&Hold>)> = Vec::new();
    for &hold in holds {
        match parts.iter_mut().find(|(names, _)| !names.contains(hold.name.as_str())) {
            Some((names, part)) => {
                names.insert(&hold.name);
                part.push(hold);
            }
            None => parts.push(([hold.name.as_str()].into(), vec![hold])),
        }
    }
    parts.into_iter().map(|(_, part)| part).collect()
}

impl Inner {
    /// Extends `holds` of any kind (one ttl): the mutexes' in one
    /// statement, semaphores' and read-write locks' (their own table) in
    /// one more. The new deadline of each hold still ours, each counted
    /// from when its own part's statement went out: a part that waited
    /// (for a connection, a row lock) moves only its own deadlines.
    async fn extend_chunk_deadlines(&self, ttl: Duration, holds: &[&Hold]) -> Result<Vec<Option<Instant>>, LockError> {
        type Part<'a> = Vec<(usize, &'a Hold)>;
        let (kinds, mutexes): (Part<'_>, Part<'_>) = holds
            .iter()
            .copied()
            .enumerate()
            .partition(|(_, h)| h.kind != LockKind::Mutex);
        let mut out = vec![None; holds.len()];
        for (part, kinds) in [(mutexes, false), (kinds, true)] {
            if part.is_empty() {
                continue;
            }
            let some: Vec<&Hold> = part.iter().map(|(_, h)| *h).collect();
            let called = Instant::now();
            let (remaining, sent) = sent::timed(async {
                if kinds {
                    self.kind_extend_chunk(ttl, &some).await
                } else {
                    self.extend_chunk(ttl, &some).await
                }
            })
            .await;
            let sent_at = sent.unwrap_or(called);
            for ((i, _), r) in part.iter().zip(remaining?) {
                out[*i] = r.map(|r| valid_until(sent_at, r));
            }
        }
        Ok(out)
    }
}

impl SqlBackend {
    /// `extend_many`: the holds grouped by ttl, each group extended in
    /// chunks of [`EXTEND_CHUNK`], one statement each.
    pub(crate) async fn extend_batches(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let inner = &self.inner;
        let mut out: Vec<Option<Result<ExtendOutcome, LockError>>> = holds.iter().map(|_| None).collect();
        // Group by ttl (a client's holds usually share one), then chunk.
        let mut ttls: Vec<Duration> = holds
            .iter()
            .map(|(_, ttl)| Duration::from_millis(ttl_millis(*ttl)))
            .collect();
        ttls.sort();
        ttls.dedup();
        for ttl in ttls {
            let group: Vec<usize> = (0..holds.len())
                .filter(|&i| Duration::from_millis(ttl_millis(holds[i].1)) == ttl)
                .collect();
            for chunk in group.chunks(EXTEND_CHUNK) {
                let chunk_holds: Vec<&Hold> = chunk.iter().map(|&i| &holds[i].0).collect();
                match inner.extend_chunk_deadlines(ttl, &chunk_holds).await {
                    Ok(deadlines) => {
                        for (&i, deadline) in chunk.iter().zip(deadlines) {
                            out[i] = Some(Ok(match deadline {
                                Some(d) => ExtendOutcome::Extended { valid_until: Some(d) },
                                None => ExtendOutcome::NotHeld,
                            }));
                        }
                    }
                    Err(e) => {
                        let retryable = e.is_retryable();
                        let message = e.to_string();
                        for &i in chunk {
                            let name = Some(holds[i].0.name.as_str());
                            out[i] = Some(Err(LockError::backend(
                                inner.kind,
                                "extend",
                                name,
                                retryable,
                                message.clone(),
                            )));
                        }
                    }
                }
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or(Ok(ExtendOutcome::NotHeld)))
            .collect()
    }
}

#[cfg(all(test, feature = "postgres"))]
mod tests {
    use std::sync::Arc;

    use lockkit_core::testkit::server_url;

    use crate::SqlBackend;
    use crate::config::{Dialect, SqlConfig};
    use crate::value::{Col, text};

    /// A name renewed twice in one batch (a lost hold beside the one that
    /// followed it) goes to a second statement.
    #[test]
    fn each_part_names_a_lock_once() {
        use lockkit_core::LockKind;
        use lockkit_core::raw::Hold;
        let hold = |name: &str, token| Hold {
            name: name.to_owned(),
            owner: "o".to_owned(),
            token,
            kind: LockKind::Mutex,
        };
        let (a, b, a2) = (hold("a", 1), hold("b", 2), hold("a", 3));
        let parts = super::names_once(&[&a, &b, &a2]);
        let tokens: Vec<Vec<u64>> = parts.iter().map(|p| p.iter().map(|h| h.token).collect()).collect();
        assert_eq!(tokens, [vec![1, 2], vec![3]]);
    }

    /// Extending 256 holds reads those 256 rows and no others, even when
    /// the planner believes the table empty (it was analyzed with no
    /// holds, as a lock table often is). The join with the arrays then
    /// ran with the table outside: a starved server spent 0.8-1.5 s on
    /// each 256-hold renewal comparing 575,232-1,538,560 pairs, and the
    /// bench's w4 lost nearly all its 10,000 holds in every second run.
    #[tokio::test]
    async fn a_renewal_reads_only_its_holds_when_the_table_looks_empty() {
        let Some(url) = server_url("LOCKKIT_POSTGRES_URL") else {
            return;
        };
        let mut config = SqlConfig::new(Dialect::Postgres, url);
        config.table = format!("lockkit_test_stale_stats_{}", std::process::id());
        let t = config.table.clone();
        let backend = SqlBackend::connect(config).await.unwrap();
        let inner = &backend.inner;
        let run = |sql: String| {
            let sql: Arc<str> = sql.into();
            async move { inner.db.exec(&sql, &[]).await.unwrap() }
        };
        run(format!("DELETE FROM \"{t}\"")).await;
        run(format!("ANALYZE \"{t}\"")).await;
        run(format!(
            "INSERT INTO \"{t}\" (name, owner, hold_count, token, expires_at, acquired_at) \
             SELECT convert_to('n' || i, 'UTF8'), 'o', 1, i, now() + interval '1 hour', now() \
             FROM generate_series(1, 5000) AS i"
        ))
        .await;
        let (update, _) = inner.sql.extend_many(256);
        let explain: Arc<str> = format!("EXPLAIN (ANALYZE, COSTS OFF) {update}").into();
        let names: Vec<Vec<u8>> = (1..=256).map(|i| format!("n{}", i * 7).into_bytes()).collect();
        let lists = (
            names.iter().map(Vec::as_slice).collect(),
            names.iter().map(|_| b"o".as_slice()).collect(),
            (1..=256).map(|i| i * 7).collect(),
        );
        let plan = inner
            .db
            .pg_fetch_lists(&explain, 1_000_000, lists, &[Col::Text])
            .await
            .unwrap();
        run(format!(
            "DROP TABLE IF EXISTS \"{t}\", \"{t}_waiters\", \"{t}_kinds\", \"{t}_holds\""
        ))
        .await;
        run(format!("DROP SEQUENCE IF EXISTS \"{t}_token_seq\"")).await;
        let plan: Vec<String> = plan
            .into_iter()
            .filter_map(|r| r.into_iter().next())
            .map(text)
            .collect();
        let text = plan.join("\n");
        // "… Scan … on <table> l (actual time=… rows=R loops=L)": R × L
        // rows read.
        let read: u64 = plan
            .iter()
            .filter(|l| l.contains("Scan") && l.contains(&format!("on {t} l ")))
            .filter_map(|l| {
                let tail = l.rsplit_once("rows=")?.1;
                let (rows, loops) = tail.split_once(" loops=")?;
                Some(rows.parse::<u64>().ok()? * loops.trim_end_matches(')').parse::<u64>().ok()?)
            })
            .sum();
        assert!(read > 0 && read <= 256, "{read} rows read\n{text}");
        assert!(!text.contains("Join Filter"), "pairs compared\n{text}");
    }
}
