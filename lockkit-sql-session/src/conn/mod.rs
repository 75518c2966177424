//! The connections of the session mode: one server connection and the
//! statements run on it ([`driver`]), and the connections as the backend
//! keeps them, carrying holds or spare ([`sessions`]).

pub(crate) mod driver;
pub(crate) mod sessions;
