//! The rules of semaphores and read-write locks.

use super::*;

/// One hold of `kind` by `owner` on `name`: wanted at `want`, granted at
/// `t`, valid and released at `until`, unlocked with nothing left.
fn held(kind: HoldKind, want: u64, t: u64, until: u64, name: &str, owner: &str, token: u64) -> Vec<Record> {
    vec![
        Record::Want {
            t: want,
            name: name.into(),
            owner: owner.into(),
            kind,
        },
        Record::Grant {
            t,
            name: name.into(),
            owner: owner.into(),
            token,
            valid: Some(until + S),
            count: Some(1),
            kind,
        },
        release(until, name, owner, token),
        unlocked(until + 1000, name, owner, token, 0),
    ]
}

#[test]
fn permits_up_to_n_at_once_pass_and_one_more_is_a_violation() {
    let p = HoldKind::Permit(2);
    let two = [
        proc(0, held(p, S, S, 3 * S, "s", "a", 1)),
        proc(1, held(p, S, S + 10, 3 * S, "s", "b", 2)),
        proc(2, held(p, S, 3 * S + 10, 4 * S, "s", "c", 3)),
    ];
    let r = check(&two, &[run(2 * S, None)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    let three = [
        proc(0, held(p, S, S, 3 * S, "s", "a", 1)),
        proc(1, held(p, S, S + 10, 3 * S, "s", "b", 2)),
        proc(2, held(p, S, 2 * S, 4 * S, "s", "c", 3)),
    ];
    let r = check(&three, &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(r.violations[0].contains("3 permits of 2"), "{:?}", r.violations);
}

#[test]
fn permit_tokens_are_unique_and_grow_with_causality() {
    let p = HoldKind::Permit(3);
    // Concurrent grants may log out of token order: fine.
    let fine = [
        proc(0, held(p, S, S + 20, 2 * S, "s", "a", 2)),
        proc(1, held(p, S, S + 10, 2 * S, "s", "b", 1)),
    ];
    assert!(check(&fine, &[run(2 * S, None)]).violations.is_empty());
    // b began waiting after a's grant but got a lower token.
    let late = [
        proc(0, held(p, S, S, 2 * S, "s", "a", 5)),
        proc(1, held(p, 2 * S, 2 * S + 10, 3 * S, "s", "b", 4)),
    ];
    let r = check(&late, &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    let twice = [
        proc(0, held(p, S, S, 2 * S, "s", "a", 5)),
        proc(1, held(p, S, S + 10, 2 * S, "s", "b", 5)),
    ];
    let r = check(&twice, &[run(2 * S, None)]);
    assert!(
        r.violations.iter().any(|v| v.contains("one token")),
        "{:?}",
        r.violations
    );
}

#[test]
fn readers_share_and_a_writer_is_alone() {
    let (r, w) = (HoldKind::Read, HoldKind::Write);
    let fine = [
        proc(0, held(w, S, S, 2 * S, "x", "w", 7)),
        proc(1, held(r, S, 2 * S + 10, 4 * S, "x", "a", 7)),
        proc(2, held(r, S, 2 * S + 20, 4 * S, "x", "b", 7)),
    ];
    let rep = check(&fine, &[run(2 * S, None)]);
    assert!(rep.violations.is_empty(), "{:?}", rep.violations);
    let beside = [
        proc(0, held(r, S, S, 3 * S, "x", "a", 0)),
        proc(1, held(w, S, 2 * S, 4 * S, "x", "w", 8)),
    ];
    let rep = check(&beside, &[run(2 * S, None)]);
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(rep.violations[0].contains("overlap"), "{:?}", rep.violations);
}

#[test]
fn a_reader_carries_at_least_the_last_writers_token() {
    let (r, w) = (HoldKind::Read, HoldKind::Write);
    let stale = [
        proc(0, held(w, S, S, 2 * S, "x", "w", 9)),
        proc(1, held(r, 3 * S, 3 * S, 4 * S, "x", "a", 4)),
    ];
    let rep = check(&stale, &[run(2 * S, None)]);
    assert_eq!(rep.violations.len(), 1, "{:?}", rep.violations);
    assert!(
        rep.violations[0].contains("below the last writer"),
        "{:?}",
        rep.violations
    );
}
