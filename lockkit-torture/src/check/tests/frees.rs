//! Rule 3: a killed holder's name comes free in time, or is excused.

use super::*;

#[test]
fn late_free_after_a_kill_is_a_violation() {
    // a holds, is killed at 2 s; bound 2 s + slack 1 s; b waits from 1.5 s but
    // is granted only at 8 s.
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S))]);
    let b = proc(
        1,
        vec![
            want(S + S / 2, "n", "b"),
            grant(8 * S, "n", "b", 2, Some(10 * S)),
            release(9 * S, "n", "b", 2),
        ],
    );
    let events = [run(2 * S, None), kill(2 * S, 0), exit(9 * S, 1)];
    let r = check(&[a, b], &events);
    assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
    assert!(r.violations[0].starts_with("late free of n"), "{}", r.violations[0]);
    assert_eq!(r.kills, 1);
}

#[test]
fn free_within_the_bound_after_a_kill_is_fine() {
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S))]);
    let b = proc(
        1,
        vec![
            want(S + S / 2, "n", "b"),
            grant(4 * S, "n", "b", 2, Some(6 * S)),
            release(5 * S, "n", "b", 2),
        ],
    );
    let r = check(&[a, b], &[run(2 * S, None), kill(2 * S, 0), exit(9 * S, 1)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.frees_in_time, 1);
}

#[test]
fn late_free_without_a_waiter_or_during_a_restart_is_not_judged() {
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S))]);
    let b = proc(1, vec![want(7 * S, "n", "b"), grant(8 * S, "n", "b", 2, Some(10 * S))]);
    let r = check(&[a.clone(), b], &[run(2 * S, None), kill(2 * S, 0), exit(9 * S, 1)]);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.frees_unchecked, 1);

    let b = proc(1, vec![want(S, "n", "b"), grant(8 * S, "n", "b", 2, Some(10 * S))]);
    let events = [
        run(2 * S, None),
        kill(2 * S, 0),
        Event::RestartBegin { t: 3 * S },
        Event::RestartEnd { t: 6 * S, ok: true },
        exit(9 * S, 1),
    ];
    let r = check(&[a, b], &events);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!((r.frees_excused, r.server_restarts), (1, 1));
}
#[test]
fn faults_count_when_they_could_be_done_and_excuse_a_late_free() {
    let fault = |t, kind: &str| Event::Fault {
        t,
        kind: kind.into(),
        node: 0,
        detail: String::new(),
    };
    // a killed at 2 s; b waits but is granted at 8 s: a latency fault
    // from 3 s to 6 s excuses it.
    let a = proc(0, vec![grant(S, "n", "a", 1, Some(3 * S))]);
    let b = proc(1, vec![want(S, "n", "b"), grant(8 * S, "n", "b", 2, Some(10 * S))]);
    let events = [
        run(2 * S, None),
        kill(2 * S, 0),
        fault(3 * S, "latency"),
        Event::FaultEnd { t: 6 * S, ok: true },
        fault(7 * S, "wipe"),
        Event::FaultEnd { t: 7 * S, ok: false },
        exit(9 * S, 1),
    ];
    let r = check(&[a, b], &events);
    assert!(r.violations.is_empty(), "{:?}", r.violations);
    assert_eq!(r.frees_excused, 1);
    assert_eq!(r.faults.get("latency"), Some(&1));
    assert_eq!(r.faults.get("wipe"), None);
    assert!(r.summary().contains("latency=1 lose_replies=0"), "{}", r.summary());
}
