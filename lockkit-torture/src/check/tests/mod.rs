//! The checker's unit tests on hand-written histories; the helpers that
//! write them.

mod frees;
mod kinds;
mod shares;
mod tokens;
mod validity;

use super::*;
use crate::log::Record;

const S: u64 = 1_000_000_000;

fn run(bound: u64, session: Option<u64>) -> Event {
    Event::Run {
        t: 0,
        seed: 1,
        backend: "test://".into(),
        bound_ns: bound,
        slack_ns: S,
        session_ns: session,
        shared_owners: false,
    }
}

fn want(t: u64, name: &str, owner: &str) -> Record {
    Record::Want {
        t,
        name: name.into(),
        owner: owner.into(),
        kind: HoldKind::Mutex,
    }
}

fn grant(t: u64, name: &str, owner: &str, token: u64, valid: Option<u64>) -> Record {
    Record::Grant {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        valid,
        count: None,
        kind: HoldKind::Mutex,
    }
}

fn renew(t: u64, name: &str, owner: &str, token: u64, valid: u64) -> Record {
    Record::Valid {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        valid: Some(valid),
    }
}

fn release(t: u64, name: &str, owner: &str, token: u64) -> Record {
    Record::Release {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        lost: false,
    }
}

fn proc(worker: usize, records: Vec<Record>) -> ProcLog {
    ProcLog {
        worker,
        incarnation: 0,
        records,
    }
}

fn unlock_failed(t: u64, name: &str, owner: &str, token: u64) -> Record {
    Record::UnlockFailed {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        error: "server restarting".into(),
    }
}

fn kill(t: u64, worker: usize) -> Event {
    Event::Kill {
        t,
        worker,
        incarnation: 0,
        pid: 100 + worker as u32,
    }
}

fn exit(t: u64, worker: usize) -> Event {
    Event::Exit {
        t,
        worker,
        incarnation: 0,
        pid: 100 + worker as u32,
        forced: false,
    }
}

fn grant_n(t: u64, name: &str, owner: &str, token: u64, valid: u64, count: u32) -> Record {
    Record::Grant {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        valid: Some(valid),
        count: Some(count),
        kind: HoldKind::Mutex,
    }
}

fn unlocked(t: u64, name: &str, owner: &str, token: u64, remaining: u32) -> Record {
    Record::Unlocked {
        t,
        name: name.into(),
        owner: owner.into(),
        token,
        remaining,
    }
}

/// One clean hold: grant, release, unlock returned `remaining`.
fn clean(t: u64, until: u64, name: &str, owner: &str, token: u64, count: u32, remaining: u32) -> Vec<Record> {
    vec![
        want(t, name, owner),
        grant_n(t, name, owner, token, t + 2 * S, count),
        release(until, name, owner, token),
        unlocked(until + 1000, name, owner, token, remaining),
    ]
}

fn inspect(t: u64, round: u32, name: &str, holder: Option<(&str, u32, u64)>) -> Event {
    Event::Inspect {
        t,
        round,
        name: name.into(),
        holder: holder.map(|(owner, count, token)| crate::log::Holder {
            owner: owner.into(),
            count,
            token,
        }),
        error: None,
    }
}
