//! Guessing the sequence number of a contender's create, so that the read
//! of the node's stat can go out with the create instead of after it.
//!
//! ZooKeeper before 3.8.1 / 3.9 (ZOOKEEPER-4026) answers a create inside a
//! `multi` without the node's stat, and the stat carries the fencing token
//! (the creation zxid). A node's name is only known from the create's
//! answer, so its stat is read after it: one more round trip on every
//! acquisition. A parent's next sequence number is most often the one
//! after this session's last create there (a name locked again and again
//! by one client), so the read of that name is sent right behind the
//! create and the listing; the name carries the attempt id, so a read that
//! finds it found this create's node. A wrong guess costs a read the
//! server answers with "no node".

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// The most parents whose next sequence number is remembered; past it the
/// guesses start over (names that are ever new guess nothing anyway).
const REMEMBERED: usize = 4096;

/// One session's guesses (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct SeqGuess {
    next: Mutex<HashMap<String, i64>>,
    /// The server answered a create in a multi with its stat: no guess needed.
    stats_answered: AtomicBool,
}

impl SeqGuess {
    /// The sequence number the next create under `parent` likely gets, if
    /// the server needs a read for the stat and there is a guess.
    pub fn guess(&self, parent: &str) -> Option<i64> {
        if self.stats_answered.load(Ordering::Relaxed) {
            return None;
        }
        self.next.lock().unwrap_or_else(|e| e.into_inner()).get(parent).copied()
    }

    /// A create under `parent` got sequence number `seq`; `stat_answered`:
    /// its answer carried the stat.
    pub fn created(&self, parent: &str, seq: i64, stat_answered: bool) {
        if stat_answered {
            self.stats_answered.store(true, Ordering::Relaxed);
            return;
        }
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        if next.len() >= REMEMBERED && !next.contains_key(parent) {
            next.clear();
        }
        next.insert(parent.to_owned(), seq.wrapping_add(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guesses_the_next_number_until_stats_come() {
        let g = SeqGuess::default();
        assert_eq!(g.guess("/lock-a"), None);
        g.created("/lock-a", 7, false);
        assert_eq!(g.guess("/lock-a"), Some(8));
        assert_eq!(g.guess("/lock-b"), None);
        g.created("/lock-b", 1, true);
        assert_eq!(g.guess("/lock-a"), None, "a server that answers stats needs no guess");
    }

    #[test]
    fn remembers_a_bounded_number_of_parents() {
        let g = SeqGuess::default();
        for i in 0..REMEMBERED as i64 + 10 {
            g.created(&format!("/lock-{i}"), i, false);
        }
        assert!(g.next.lock().unwrap().len() <= REMEMBERED);
    }
}
