//! Connections: the command connection of each mode ([`Conn`]), the client
//! of one node (with TLS, in `tls`), the reconnect settings every connection
//! manager shares, and opening a mode's connections (`cluster`, `sentinel`;
//! one server here). Redlock opens one client per node through
//! [`open_client`].

mod client;
mod cluster;
mod command;
mod open;
mod sentinel;
mod tls;

pub(crate) use client::{manager_config, open_client, pubsub_config};
pub(crate) use cluster::cluster_primaries;
pub(crate) use command::Conn;
pub(crate) use open::{append_only, open};
