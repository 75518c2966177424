//! Where a MySQL/MariaDB lock table's fencing tokens come from, picked at
//! connect ([`MysqlTokens`]).
//!
//! - A table that has `<table>_token_seq` draws from it: MariaDB 10.3 and
//!   later, for every table created since this source was added. A claim's
//!   stamp is one `UPDATE … SET token = NEXTVAL(seq)` after the claim took
//!   the name's row, which writes nothing but the hold (the sequence's own
//!   row once per 1000 tokens).
//! - A table that has only `<table>_tokens` keeps its 64 counter rows: MySQL
//!   (no sequences), and tables an older lockkit made — switching those to
//!   a sequence while an older client still draws from the rows would hand
//!   out tokens in two orders.
//! - A new table on MariaDB gets the sequence first, then a `<table>_tokens`
//!   that no row can enter (a check), so an older lockkit pointed at it
//!   fails to stamp instead of drawing low tokens of its own.
//!
//! Concurrent connects agree: the sequence is created before the bucket
//! table, so whoever sees the bucket table without a sequence sees a table
//! of the old kind.

use std::sync::Arc;

use lockkit_core::LockError;

use crate::error::schema_error;
use crate::handle::SqlBackend;
use crate::layout::create_failed;
use crate::sql::MysqlTokens;
use crate::value::{Col, text};

impl SqlBackend {
    /// Finds (and, unless `create_table=false`, creates) the table's token
    /// source; the claims use it from then on.
    pub(crate) async fn pick_token_source(&self) -> Result<MysqlTokens, LockError> {
        let inner = &self.inner;
        let table = &inner.config.table;
        let (seq, buckets) = (MysqlTokens::sequence(table), MysqlTokens::buckets(table));
        if self.object_exists(&seq).await? {
            return Ok(MysqlTokens::Sequence);
        }
        if self.object_exists(&buckets).await? {
            return Ok(MysqlTokens::Buckets);
        }
        let sequences = self.has_sequences().await?;
        if !inner.config.create_table {
            let (missing, create) = match sequences {
                true => (seq, MysqlTokens::create_sequence(table, 1)),
                false => (buckets, MysqlTokens::create_buckets(table, true)),
            };
            return Err(schema_error(
                table,
                format!("has no token source {missing:?} (and create_table=false); create it with: {create}"),
            ));
        }
        if sequences {
            // Above every token the lock table has (none when it is new).
            let max: Arc<str> = Arc::from(format!("SELECT COALESCE(MAX(token), 0) FROM `{table}`"));
            let rows = inner
                .retry("connect", None, || inner.db.fetch(&max, &[], &[Col::Int]))
                .await?;
            let start = rows.first().and_then(|r| r.first()).map_or(0, |v| v.int()) + 1;
            self.create_object(&seq, &MysqlTokens::create_sequence(table, start))
                .await?;
        }
        self.create_object(&buckets, &MysqlTokens::create_buckets(table, !sequences))
            .await?;
        Ok(if sequences {
            MysqlTokens::Sequence
        } else {
            MysqlTokens::Buckets
        })
    }

    /// Whether this server has sequences (MariaDB 10.3 and later).
    async fn has_sequences(&self) -> Result<bool, LockError> {
        let inner = &self.inner;
        let version: Arc<str> = Arc::from("SELECT CAST(VERSION() AS CHAR)");
        let rows = inner
            .retry("connect", None, || inner.db.fetch(&version, &[], &[Col::Text]))
            .await?;
        let version = rows
            .into_iter()
            .next()
            .and_then(|mut r| r.pop())
            .map(text)
            .unwrap_or_default();
        Ok(sequences_in(&version))
    }

    async fn create_object(&self, object: &str, ddl: &str) -> Result<(), LockError> {
        let inner = &self.inner;
        let ddl: Arc<str> = Arc::from(ddl);
        match inner.db.exec(&ddl, &[]).await {
            Ok(_) => Ok(()),
            // Made meanwhile by another client: content.
            Err(_) if self.object_exists(object).await? => Ok(()),
            Err(e) => Err(create_failed(inner.kind, object, e)),
        }
    }
}

/// Whether the server `VERSION()` names has sequences: MariaDB from 10.3.
fn sequences_in(version: &str) -> bool {
    if !version.to_ascii_lowercase().contains("mariadb") {
        return false;
    }
    // Some servers and proxies put MySQL 5.5's version in front.
    let version = version.strip_prefix("5.5.5-").unwrap_or(version);
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty());
    let (major, minor) = (parts.next(), parts.next());
    let num = |p: Option<&str>| p.and_then(|p| p.parse::<u32>().ok()).unwrap_or(0);
    (num(major), num(minor)) >= (10, 3)
}

#[cfg(test)]
mod tests {
    use super::sequences_in;

    #[test]
    fn sequences_come_with_mariadb_10_3() {
        assert!(sequences_in("10.11.19-MariaDB"));
        assert!(sequences_in("10.3.39-MariaDB-0+deb10u1"));
        assert!(sequences_in("11.4.2-MariaDB-log"));
        assert!(sequences_in("5.5.5-10.6.18-MariaDB"));
        assert!(!sequences_in("10.2.44-MariaDB"));
        assert!(!sequences_in("8.0.36"));
        assert!(!sequences_in("8.4.0-commercial"));
        assert!(!sequences_in(""));
    }
}
