//! Rule 1: validity intervals and overlaps.

use super::*;

#[test]
fn sequential_holds_are_fine() {
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S)), release(2 * S, "n", "a", 1)]);
    let b = proc(
        1,
        vec![
            grant(2 * S + 1000, "n", "b", 2, Some(5 * S)),
            release(4 * S, "n", "b", 2),
        ],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.grants, r.holds), (2, 2));
}

#[test]
fn overlapping_valid_holds_are_a_violation() {
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S)), release(2 * S, "n", "a", 1)]);
    let b = proc(
        1,
        vec![grant(S + S / 2, "n", "b", 2, Some(5 * S)), release(4 * S, "n", "b", 2)],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(r.violations[0].starts_with("overlap on n"), "{}", r.violations[0]);
}

#[test]
fn overlap_after_the_first_deadline_is_fine() {
    // a's lease ran out at 2 s (it was paused); it logs its release at 5 s.
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(2 * S)), release(5 * S, "n", "a", 1)]);
    let b = proc(
        1,
        vec![grant(3 * S, "n", "b", 2, Some(6 * S)), release(4 * S, "n", "b", 2)],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
}

#[test]
fn renewals_extend_validity() {
    // a renewed at 1.5 s to 3.5 s: b's grant at 3 s overlaps.
    let a = proc(
        0,
        vec![
            grant(S, "n", "a", 1, Some(2 * S)),
            renew(S + S / 2, "n", "a", 1, 3 * S + S / 2),
            release(5 * S, "n", "a", 1),
        ],
    );
    let b = proc(
        1,
        vec![grant(3 * S, "n", "b", 2, Some(6 * S)), release(4 * S, "n", "b", 2)],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
}

#[test]
fn a_grant_after_its_own_deadline_was_never_held() {
    let a = proc(
        0,
        vec![grant(3 * S, "n", "a", 1, Some(2 * S)), release(5 * S, "n", "a", 1)],
    );
    let b = proc(
        1,
        vec![
            grant(2 * S + S / 2, "n", "b", 2, Some(6 * S)),
            release(4 * S, "n", "b", 2),
        ],
    );
    let r = check(&[a, b], &[run(2 * S, None)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.never_held, 1);
}
#[test]
fn a_paused_session_holder_is_certain_only_until_half_a_session_past_the_pause() {
    let pause = |t| Event::Pause {
        t,
        worker: 0,
        incarnation: 0,
        pid: 100,
    };
    let resume = |t| Event::Resume {
        t,
        worker: 0,
        incarnation: 0,
        pid: 100,
    };
    // Session 4 s; a paused at 2 s, resumed at 9 s, sees the loss at 9.1 s.
    let a = proc(
        0,
        vec![
            want(S, "n", "a"),
            grant(S, "n", "a", 1, None),
            Record::Release {
                t: 9 * S + S / 10,
                name: "n".into(),
                owner: "a".into(),
                token: 1,
                lost: true,
            },
        ],
    );
    let b_late = proc(1, vec![grant(7 * S, "n", "b", 2, None), release(8 * S, "n", "b", 2)]);
    let events = [run(6 * S, Some(4 * S)), pause(2 * S), resume(9 * S)];
    let r = check(&[a.clone(), b_late], &events);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.pauses, r.lost), (1, 1));

    // b granted 1 s into the pause: the session cannot have expired yet.
    let b_early = proc(1, vec![grant(3 * S, "n", "b", 2, None), release(8 * S, "n", "b", 2)]);
    let r = check(&[a, b_early], &events);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
}
