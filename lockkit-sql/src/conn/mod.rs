//! Connections: the pools a backend's statements run on (`db.rs`, opened
//! in `open.rs`; `kept.rs`, and the lanes that keep connections for lease
//! renewals, `lane.rs`), transactions (`tx.rs`), the arguments and rows of
//! every driver (`rows.rs`), and when a statement got its connection
//! (`sent.rs`); behind a Postgres connection pooler, finding it
//! (`pooler.rs`) and the statements with inlined arguments (`inline.rs`).

pub(crate) mod db;
#[cfg(feature = "postgres")]
mod inline;
mod kept;
mod lane;
mod open;
pub(crate) mod pooler;
mod rows;
pub(crate) mod sent;
mod tx;

pub(crate) use db::Db;
pub(crate) use tx::Tx;
