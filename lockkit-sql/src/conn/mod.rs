//! Connections: the pools a backend's statements run on (`db.rs`, opened
//! in `open.rs`; `kept.rs`, and the lanes that keep connections for lease
//! renewals, `lane.rs`), transactions (`tx.rs`), the arguments and rows of
//! every driver (`rows.rs`), and when a statement got its connection
//! (`sent.rs`).

pub(crate) mod db;
mod kept;
mod lane;
mod open;
mod rows;
pub(crate) mod sent;
mod tx;

pub(crate) use db::Db;
pub(crate) use tx::Tx;
