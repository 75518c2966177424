//! The SQL lock table on MySQL/MariaDB, Postgres and SQLite: the conformance
//! kit on each, and the table's own concerns (extension, the fair waiting
//! line, semaphores and read-write locks, least privilege, several processes,
//! races, server restarts, the schema and its migration, waiting). Each
//! module is compiled with the features it needs.

#[path = "../common/mod.rs"]
mod common;

mod clock_step;
mod crowd;
mod dead_waiter;
mod extend;
mod fair;
mod kept;
mod kinds;
mod mysql_kit;
mod mysql_session_kit;
mod pgbouncer;
mod pgbouncer_kit;
mod postgres_kit;
mod postgres_session_kit;
mod private_server;
mod privileges;
mod processes;
mod race;
mod renewals;
mod restart;
mod schema;
mod session;
mod sqlite_kit;
mod tokens;
mod waiting;
