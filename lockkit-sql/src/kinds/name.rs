//! What a kind's claim reads of a name, in its transaction: the name's row
//! in `<table>_kinds` (locked, made if missing), its live holds in
//! `<table>_holds` and its line in `<table>_waiters`.

use lockkit_core::raw::AcquireRequest;

use super::hold::name_args;
use super::rules::{Line, Row};
use crate::conn::Tx;
use crate::handle::Inner;
use crate::sql::KindStatements;
use crate::value::{Arg, Col, Val};

/// What the transaction found of the name: its row in `<table>_kinds`
/// (locked), its live holds in `<table>_holds` and its line.
pub(super) struct NameState {
    /// The name's recorded permit count (0: none), its last token and its
    /// last write token.
    pub permits: i64,
    pub last_token: i64,
    pub last_write: i64,
    /// The live holds, in `seq` order.
    pub holds: Vec<Row>,
    pub line: Line,
}

/// Locks the name's row in `<table>_kinds` to the end of the transaction
/// (`(family, name)`); its `(permits, last_token, last_write)`, or `None`
/// when the name has no row. Claims and releases of a name take it first,
/// so they change the name's holds one at a time.
pub(super) async fn lock_name(
    tx: &mut Tx,
    k: &KindStatements,
    args: &[Arg<'_>],
) -> Result<Option<Vec<Val>>, sqlx::Error> {
    Ok(tx.fetch(&k.lock_name, args, &[Col::Int; 3]).await?.pop())
}

impl NameState {
    /// The state from the name's row `(permits, last_token, last_write)`
    /// and the `rows` statement's rows, sorted (see [`KindStatements::rows`]).
    fn of(found: &[Val], rows: Vec<Vec<Val>>) -> Self {
        let mut rows = rows.into_iter();
        let line = rows.next().map(Line::from_vals).unwrap_or_default();
        NameState {
            permits: found[0].int(),
            last_token: found[1].int(),
            last_write: found[2].int(),
            holds: rows.map(Row::from_vals).collect(),
            line,
        }
    }
}

/// The arguments of the `rows` statement for `req` in line `key`, and its
/// columns.
fn rows_args<'a>(req: &AcquireRequest<'a>, key: &'a [u8]) -> ([Arg<'a>; 7], [Col; 6]) {
    let (key, attempt) = (Arg::Bytes(key), Arg::Text(Some(req.attempt)));
    let [fam, name] = name_args(req);
    let cols = [Col::Int, Col::Bytes, Col::Int, Col::Int, Col::Text, Col::Int];
    ([key, attempt, key, attempt, key, fam, name], cols)
}

/// Sorted here: a sorted UNION makes MariaDB write a temporary table per
/// read (on disk, for the TEXT column).
fn sorted(mut rows: Vec<Vec<Val>>) -> Vec<Vec<Val>> {
    rows.sort_by_key(|r| r.first().map_or(0, Val::int));
    rows
}

impl Inner {
    /// Opens the transaction and reads the name (making its row if it is
    /// missing) and its line (`key`).
    pub(super) async fn read_name(&self, req: &AcquireRequest<'_>, key: &[u8]) -> Result<(Tx, NameState), sqlx::Error> {
        let k = &self.ksql;
        let args = name_args(req);
        let mut tx = self.db.begin().await?;
        let mut found = None;
        for _ in 0..2 {
            found = lock_name(&mut tx, k, &args).await?;
            if found.is_some() {
                break;
            }
            tx.exec(&k.ensure_name, &args).await?;
        }
        let found = found.ok_or(sqlx::Error::RowNotFound)?;
        let (args, cols) = rows_args(req, key);
        let rows = sorted(tx.fetch(&k.rows, &args, &cols).await?);
        Ok((tx, NameState::of(&found, rows)))
    }

    /// The same reads without a transaction or a lock (`None`: the name
    /// has no row yet): what a waiter's look finds, possibly a moment
    /// old. A look that finds the name busy ends there, so that waiters
    /// that only look do not queue on the name's row, which its releases
    /// and its head's claims take.
    pub(super) async fn peek_name(
        &self,
        req: &AcquireRequest<'_>,
        key: &[u8],
    ) -> Result<Option<NameState>, sqlx::Error> {
        let k = &self.ksql;
        let Some(found) = self.db.fetch_one(&k.peek_name, &name_args(req), &[Col::Int; 3]).await? else {
            return Ok(None);
        };
        let (args, cols) = rows_args(req, key);
        let rows = sorted(self.db.fetch(&k.rows, &args, &cols).await?);
        Ok(Some(NameState::of(&found, rows)))
    }
}

#[cfg(all(test, feature = "mysql"))]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use lockkit_core::LockKind;
    use lockkit_core::raw::{AcquireRequest, LockBackend};
    use lockkit_core::testkit::server_url;

    use crate::SqlBackend;
    use crate::config::{Dialect, SqlConfig};
    use crate::conn::Tx;
    use crate::value::{Col, text};
    use crate::wait::line_key;

    async fn temporary_tables(tx: &mut Tx) -> i64 {
        let status: Arc<str> = "SHOW SESSION STATUS LIKE 'Created_tmp_tables'".into();
        let mut rows = tx.fetch(&status, &[], &[Col::Text, Col::Text]).await.unwrap();
        text(rows.remove(0).remove(1)).parse().unwrap()
    }

    /// Reading a name's state makes no temporary table on MariaDB. A
    /// sorted UNION makes one per read, on disk (Aria: the row carries a
    /// TEXT column), which a crowd turns into a stream of table creations
    /// and drops that the server must survive.
    #[tokio::test]
    async fn reading_a_name_makes_no_temporary_table() {
        let Some(url) = server_url("LOCKKIT_MYSQL_URL") else {
            return;
        };
        let backend = SqlBackend::connect(SqlConfig::new(Dialect::Mysql, url)).await.unwrap();
        let name = format!("tmp-tables-{}-{:?}", std::process::id(), std::time::SystemTime::now());
        let kind = LockKind::Permit { permits: 2 };
        let req = AcquireRequest {
            name: &name,
            owner: "a",
            ttl: Duration::from_secs(30),
            attempt: "00000000000000a1",
            fair: true,
            kind,
        };
        assert!(backend.try_acquire(&req).await.unwrap().token().is_some());
        let inner = &backend.inner;
        let key = line_key(&name, kind);
        let (mut tx, state) = inner.read_name(&req, &key).await.unwrap();
        assert_eq!(state.holds.len(), 1, "the permit taken is read back");
        let before = temporary_tables(&mut tx).await;
        let (args, cols) = super::rows_args(&req, &key);
        let rows = tx.fetch(&inner.ksql.rows, &args, &cols).await.unwrap();
        assert_eq!(rows.len(), 2, "the line's row and the hold");
        assert_eq!(temporary_tables(&mut tx).await, before, "no temporary table per read");
        tx.rollback().await.unwrap();
        let peeked = inner.peek_name(&req, &key).await.unwrap().expect("the name's row");
        assert_eq!(peeked.holds.len(), 1, "a look without a lock reads the same");
        assert_eq!(peeked.holds[0].token, state.holds[0].token);
    }
}
