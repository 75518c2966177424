//! Lock name and owner id validation ([the contract](crate::contract#names)), in one place.

use crate::LockError;

/// The longest valid lock name, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 255;

/// The longest valid owner id, in bytes of UTF-8.
pub const MAX_OWNER_BYTES: usize = 255;

/// Checks a lock name: 1 to [`MAX_NAME_BYTES`] bytes of UTF-8, any characters.
///
/// Backends encode whatever their store cannot hold as-is; they never refuse a
/// name that passes this check.
pub fn validate_name(name: &str) -> Result<(), LockError> {
    let reason = if name.is_empty() {
        "a lock name must not be empty".to_owned()
    } else if name.len() > MAX_NAME_BYTES {
        format!(
            "a lock name is at most {MAX_NAME_BYTES} bytes of UTF-8, this one has {}",
            name.len()
        )
    } else {
        return Ok(());
    };
    Err(LockError::InvalidName {
        name: name.chars().take(64).collect(),
        reason,
    })
}

/// Checks an owner id: 1 to [`MAX_OWNER_BYTES`] bytes, no control characters.
pub fn validate_owner(owner: &str) -> Result<(), LockError> {
    if owner.is_empty() || owner.len() > MAX_OWNER_BYTES {
        return Err(LockError::config(
            "owner",
            format!("an owner id is 1 to {MAX_OWNER_BYTES} bytes, got {}", owner.len()),
        ));
    }
    if owner.chars().any(char::is_control) {
        return Err(LockError::config(
            "owner",
            "an owner id must not contain control characters",
        ));
    }
    Ok(())
}

/// A new random owner id: 128 bits, as 32 lowercase hex digits.
pub fn random_owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The length of an attempt id ([`new_attempt_id`]).
pub const ATTEMPT_ID_LEN: usize = 16;

/// A new random attempt id: 64 bits as 16 lowercase hex digits. Backends
/// store it beside a hold (a set of them, one per share of the hold count);
/// its fixed length and alphabet let them be kept in a plain string and
/// found by substring without false matches.
pub fn new_attempt_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// Checks an attempt id made by [`new_attempt_id`]: backends that store
/// ids in a string rely on its shape.
pub fn is_attempt_id(id: &str) -> bool {
    id.len() == ATTEMPT_ID_LEN && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// [`is_attempt_id`] as a typed error: backends that store ids in a
/// string (and find them by substring) refuse anything else before it
/// reaches the server.
pub fn check_attempt_id(id: &str) -> Result<(), LockError> {
    if is_attempt_id(id) {
        Ok(())
    } else {
        Err(LockError::config(
            "attempt id",
            format!("{id:?} is not an attempt id (16 lowercase hex digits, as new_attempt_id makes)"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(validate_name("a").is_ok());
        assert!(validate_name(&"x".repeat(255)).is_ok());
        assert!(validate_name(&"锁".repeat(85)).is_ok()); // 255 bytes
        assert!(validate_name("nul\0 / {tag} 'quote'").is_ok());
        assert!(matches!(validate_name(""), Err(LockError::InvalidName { .. })));
        assert!(matches!(
            validate_name(&"x".repeat(256)),
            Err(LockError::InvalidName { .. })
        ));
        assert!(matches!(
            validate_name(&"锁".repeat(86)),
            Err(LockError::InvalidName { .. })
        ));
    }

    #[test]
    fn attempt_ids() {
        let a = new_attempt_id();
        assert!(is_attempt_id(&a), "{a}");
        assert_ne!(a, new_attempt_id());
        assert!(!is_attempt_id("0123456789abcdeF"));
        assert!(check_attempt_id(&a).is_ok());
        assert!(matches!(
            check_attempt_id("x' OR 1=1"),
            Err(LockError::InvalidConfig { .. })
        ));
        assert!(!is_attempt_id("0123456789abcde"));
        assert!(!is_attempt_id("0123456789abcde "));
    }

    #[test]
    fn owners() {
        assert_eq!(random_owner().len(), 32);
        assert_ne!(random_owner(), random_owner());
        assert!(validate_owner("trade-center-1").is_ok());
        assert!(validate_owner("").is_err());
        assert!(validate_owner("a\nb").is_err());
    }
}
