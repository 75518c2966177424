//! A lock name → the key of its server lock.
//!
//! - MySQL/MariaDB: `GET_LOCK` names are at most 64 characters, so every
//!   name is hashed: `lockkit:` followed by 48 hex digits (the first 192
//!   bits of the name's SHA-256). Exact bytes count: `"A"` and `"a"`, NUL
//!   bytes and emoji are all distinct names.
//! - Postgres: advisory locks take a 64-bit key: the first 8 bytes of the
//!   name's SHA-256, used with the one-`bigint` form of
//!   `pg_advisory_lock` (the table mode's advisory locks use the two-`int4`
//!   form, a separate key space).
//!
//! Two names whose hashes collide share one server lock: the second waits
//! for the first like a contender of the same name. Exclusion never
//! breaks; with 64 bits a collision among a million names has a chance of
//! about 3·10⁻⁸.

use sha2::{Digest, Sha256};

use lockkit_sql::Dialect;

/// The `GET_LOCK` name of a lock name (56 characters).
pub(crate) fn mysql_key(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    format!("lockkit:{}", hex::encode(&digest[..24]))
}

/// The advisory-lock key of a lock name.
pub(crate) fn postgres_key(name: &str) -> i64 {
    let digest = Sha256::digest(name.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(bytes)
}

/// The server lock that the lock name `name` maps to in session mode, for
/// operators and tests: on MySQL/MariaDB the `GET_LOCK` name (look with
/// `SELECT IS_USED_LOCK('…')`, which gives the holding connection's id), on
/// Postgres the advisory-lock key in decimal (`pg_locks` shows it as
/// `classid` = its high 32 bits, `objid` = its low 32 bits, `objsubid` = 1).
pub fn server_key(dialect: Dialect, name: &str) -> String {
    match dialect {
        Dialect::Postgres => postgres_key(name).to_string(),
        _ => mysql_key(name),
    }
}

/// A name's key in either form, as a statement argument takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Key {
    /// A `GET_LOCK` name.
    Text(String),
    /// An advisory-lock key.
    Int(i64),
}

impl Key {
    /// The key of the lock name `name` on `dialect`'s server.
    pub(crate) fn of(dialect: Dialect, name: &str) -> Key {
        match dialect {
            Dialect::Postgres => Key::Int(postgres_key(name)),
            _ => Key::Text(mysql_key(name)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_exact_and_bounded() {
        let long = "x".repeat(255);
        for name in ["a", "A", "a\0b", "🔒", long.as_str()] {
            let k = mysql_key(name);
            assert_eq!(k.chars().count(), 56, "{k}");
            assert!(k.starts_with("lockkit:"));
        }
        assert_ne!(mysql_key("A"), mysql_key("a"));
        assert_ne!(postgres_key("A"), postgres_key("a"));
        assert_eq!(mysql_key("order:42"), mysql_key("order:42"), "stable");
        // Stable across processes and versions: a fixed value (SHA-256 of "").
        assert_eq!(
            mysql_key(""),
            "lockkit:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934c"
        );
        // Stable across processes and versions: a fixed value.
        assert_eq!(
            postgres_key(""),
            i64::from_be_bytes([0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14])
        );
    }
}
