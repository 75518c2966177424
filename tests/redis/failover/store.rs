//! The fenced store the holders write to, and the check of its log.
//!
//! The store keeps, per name, the highest token a write carried, and
//! refuses a write whose token is lower (a holder writes several times
//! under one token, so an equal token is accepted). Every attempt goes to
//! one log in the store's own order; [`check`] then judges the log without
//! asking the store: it recomputes which attempts were stale, so a store
//! that let one through would be caught, not trusted.

use std::sync::Mutex;

/// One write attempt, in the order the store saw it.
#[derive(Debug, Clone, Copy)]
pub struct Write {
    pub name: usize,
    /// The owner that wrote (one per load task).
    pub owner: usize,
    pub token: u64,
    pub accepted: bool,
}

/// What the log shows.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Fencing {
    pub writes: u64,
    /// Attempts with a token below one an earlier attempt on the name
    /// carried: a holder that was overtaken writing after its successor.
    pub stale: u64,
    /// Stale attempts the store refused (must be all of them).
    pub stale_stopped: u64,
    /// Attempts refused that were not stale (must be none: the newest
    /// holder's writes always land).
    pub fresh_refused: u64,
    /// Accepted writes below the last accepted token of the name, or at
    /// that token from another owner (must be none; one owner keeps its
    /// token when it re-enters a hold).
    pub out_of_order: u64,
}

#[derive(Default)]
pub struct FencedStore {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    highest: Vec<u64>,
    log: Vec<Write>,
}

impl FencedStore {
    /// Writes under `token`; whether the store accepted it.
    pub fn write(&self, name: usize, owner: usize, token: u64) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if st.highest.len() <= name {
            st.highest.resize(name + 1, 0);
        }
        let accepted = token >= st.highest[name];
        if accepted {
            st.highest[name] = token;
        }
        st.log.push(Write {
            name,
            owner,
            token,
            accepted,
        });
        accepted
    }

    /// The log so far.
    pub fn log(&self) -> Vec<Write> {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).log.clone()
    }
}

/// The stale attempts of a log, with the highest token tried before each.
pub fn stale_writes(log: &[Write]) -> Vec<(Write, u64)> {
    let mut highest_tried = std::collections::HashMap::new();
    let mut stale = Vec::new();
    for w in log {
        let highest = highest_tried.entry(w.name).or_insert(0u64);
        if w.token < *highest {
            stale.push((*w, *highest));
        }
        *highest = (*highest).max(w.token);
    }
    stale
}

/// Judges a log (or a part of one that starts with a fresh store).
pub fn check(log: &[Write]) -> Fencing {
    let names = log.iter().map(|w| w.name + 1).max().unwrap_or(0);
    let mut highest_tried = vec![0u64; names];
    let mut last_accepted: Vec<Option<(u64, usize)>> = vec![None; names];
    let mut f = Fencing::default();
    for w in log {
        f.writes += 1;
        let stale = w.token < highest_tried[w.name];
        highest_tried[w.name] = highest_tried[w.name].max(w.token);
        match (stale, w.accepted) {
            (true, false) => (f.stale, f.stale_stopped) = (f.stale + 1, f.stale_stopped + 1),
            (true, true) => f.stale += 1,
            (false, false) => f.fresh_refused += 1,
            (false, true) => {}
        }
        if w.accepted {
            if let Some((token, owner)) = last_accepted[w.name]
                && (w.token < token || (w.token == token && w.owner != owner))
            {
                f.out_of_order += 1;
            }
            last_accepted[w.name] = Some((w.token, w.owner));
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(name: usize, owner: usize, token: u64, accepted: bool) -> Write {
        Write {
            name,
            owner,
            token,
            accepted,
        }
    }

    #[test]
    fn the_store_refuses_lower_tokens_and_the_check_agrees() {
        let store = FencedStore::default();
        assert!(store.write(0, 1, 10));
        assert!(store.write(0, 1, 10), "the same owner writes again");
        assert!(store.write(0, 2, 12));
        assert!(!store.write(0, 1, 10), "the overtaken owner is refused");
        assert!(store.write(1, 3, 5), "names are apart");
        let f = check(&store.log());
        assert_eq!(
            f,
            Fencing {
                writes: 5,
                stale: 1,
                stale_stopped: 1,
                fresh_refused: 0,
                out_of_order: 0
            }
        );
    }

    #[test]
    fn the_check_does_not_trust_the_store() {
        // A store that let a stale write through, refused a fresh one, and
        // accepted two owners under one token.
        let log = [
            w(0, 1, 10, true),
            w(0, 2, 12, true),
            w(0, 1, 10, true),
            w(0, 3, 13, false),
            w(0, 4, 13, true),
            w(0, 5, 13, true),
        ];
        let f = check(&log);
        assert_eq!((f.stale, f.stale_stopped), (1, 0));
        assert_eq!(f.fresh_refused, 1);
        assert_eq!(
            f.out_of_order, 2,
            "the accepted 10 after 12, and owner 5 at owner 4's token"
        );
    }
}
