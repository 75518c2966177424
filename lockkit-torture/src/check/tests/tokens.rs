//! Rule 2: token order and re-entry.

use super::*;

#[test]
fn re_entry_after_a_failed_unlock_keeps_its_token() {
    // The unlock of the first hold failed: the server kept it, so the
    // owner's next two grants are re-entries with the same token.
    let a = proc(
        0,
        vec![
            grant(S, "n", "a", 7, Some(3 * S)),
            release(S + 100, "n", "a", 7),
            unlock_failed(S + 200, "n", "a", 7),
            grant(2 * S, "n", "a", 7, Some(3 * S)),
            release(2 * S + 100, "n", "a", 7),
            grant(2 * S + 200, "n", "a", 7, Some(4 * S)),
            release(2 * S + 300, "n", "a", 7),
        ],
    );
    let r = check(&[a], &[run(2 * S, None)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.holds, 3);
}

#[test]
fn a_repeated_token_without_a_failed_unlock_is_a_violation() {
    let a = proc(
        0,
        vec![
            grant(S, "n", "a", 7, Some(3 * S)),
            release(S + 100, "n", "a", 7),
            grant(2 * S, "n", "a", 7, Some(3 * S)),
            release(2 * S + 100, "n", "a", 7),
        ],
    );
    let r = check(&[a], &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    // Another owner between the failed unlock and the re-grant ends the excuse.
    let a = proc(
        0,
        vec![
            grant(S, "n", "a", 7, Some(S + 200)),
            release(S + 100, "n", "a", 7),
            unlock_failed(S + 150, "n", "a", 7),
            grant(3 * S, "n", "a", 7, Some(4 * S)),
            release(3 * S + 100, "n", "a", 7),
        ],
    );
    let b = proc(
        1,
        vec![
            grant(2 * S, "n", "b", 8, Some(3 * S)),
            release(2 * S + 100, "n", "b", 8),
        ],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
}

#[test]
fn decreasing_token_is_a_violation() {
    let a = proc(0, vec![grant(S, "n", "a", 5, Some(3 * S)), release(2 * S, "n", "a", 5)]);
    let b = proc(
        1,
        vec![
            grant(2 * S + S / 2, "n", "b", 4, Some(5 * S)),
            release(4 * S, "n", "b", 4),
        ],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(r.violations[0].starts_with("token order on n"), "{}", r.violations[0]);
}
