//! Connections: the pools a backend's statements run on (`db.rs`,
//! `kept.rs`, and the lanes that keep connections for lease renewals,
//! `lane.rs`), transactions (`tx.rs`), and when a statement got its
//! connection (`sent.rs`).

#[macro_use]
pub(crate) mod db;
mod kept;
mod lane;
pub(crate) mod sent;
mod tx;

pub(crate) use db::Db;
pub(crate) use tx::Tx;
