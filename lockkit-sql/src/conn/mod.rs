//! Connections: the pools a backend's statements run on (`db.rs`,
//! `kept.rs`, and the lanes that keep connections for lease renewals,
//! `lane.rs`), transactions (`tx.rs`), and when a statement got its
//! connection (`sent.rs`).

#[macro_use]
mod db;
mod kept;
mod lane;
pub(crate) mod sent;
mod tx;

pub(crate) use db::{Db, Pool};
pub(crate) use tx::Tx;
