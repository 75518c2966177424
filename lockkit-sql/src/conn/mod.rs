//! Connections: the pools a backend runs its statements on (`db.rs`), and
//! when a statement got its connection (`sent.rs`).

mod db;
pub(crate) mod sent;

pub(crate) use db::{Arg, Col, Db, Val};
