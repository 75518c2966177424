//! The dialect layer: each database's SQL text, and nothing else.
//!
//! Every statement takes the same arguments in the same order on every
//! database (listed on each field), so the logic (`acquire.rs`,
//! `release.rs`, …) is written once. MySQL's `?` placeholders bind by
//! position, so its texts use each argument exactly once, in order;
//! Postgres (`$n`) and SQLite (`?n`) may repeat them.
//!
//! Times are always the database's clock: MySQL `UTC_TIMESTAMP(6)`,
//! Postgres `now()`, SQLite `julianday('now')` (microseconds since the epoch
//! in an integer column). Each is constant within one statement.
//!
//! Each dialect's statements are built in its own file (`mysql.rs`,
//! `postgres.rs`, `sqlite.rs`; MySQL's multi-statement batches in
//! `mysql_batch.rs`) into the [`Statements`] of `statements.rs`,
//! which also holds the [`ClaimShape`] and the builders that differ by a
//! line per dialect; `fragments.rs` holds the pieces of SQL text they
//! share, and `kinds.rs` the statements of semaphores and read-write
//! locks (their text written in `kinds_text.rs`; their guard rows in the
//! lock table, `guard.rs`). This file picks a
//! database's builder ([`Statements::new`]).

mod fragments;
mod guard;
mod kinds;
mod kinds_text;
mod mysql;
mod mysql_batch;
mod postgres;
mod sqlite;
mod statements;

use crate::config::Dialect;
pub(crate) use guard::{guard_owner, is_guard_owner};
pub(crate) use kinds::{KindStatements, family};
#[cfg(feature = "mysql")]
pub(crate) use mysql::MysqlTokens;
#[cfg(feature = "mysql")]
pub(crate) use mysql_batch::{MysqlClaim, mysql_inline};
pub(crate) use statements::{ClaimShape, Statements};

impl Statements {
    pub fn new(dialect: Dialect, table: &str) -> Self {
        let mut statements = match dialect {
            Dialect::Mysql => mysql::mysql(table),
            Dialect::Postgres => postgres::postgres(table),
            Dialect::Sqlite => sqlite::sqlite(table),
        };
        // Semaphores' and read-write locks' tables (see `kinds.rs`).
        statements.create.extend(kinds::create(dialect, table));
        statements
    }
}
