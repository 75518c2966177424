//! The line of waiters on one name, and which of them a change lets in.
//!
//! Contract point 14 asks that a release wake only the waiters it admits: a
//! backend that keeps a line runs [`admitted`] after every change that may
//! let waiters in (a hold that goes, a grant, a waiter that leaves the
//! line) and wakes the waiters at the front of the line it names — and only
//! those it has not woken yet. Every other waiter sleeps on: a crowd of
//! hundreds costs each hand-off the same few wake-ups as a crowd of two.
//!
//! The rule, for a line in the order its waiters came:
//!
//! - **mutex**: the first waiter, once nobody holds the name;
//! - **semaphore** of N: the first N − (permits held) waiters — so N
//!   waiters come in together, and a waiter need not be first in line to
//!   take a permit that is free for it;
//! - **read-write lock**: nobody while a writer holds it; a writer first in
//!   line once nobody holds it; otherwise every reader before the first
//!   waiting writer (readers come in together, and none passes a writer
//!   that waits: no writer starves).
//!
//! One name is one lock whatever the kind
//! ([the contract](crate::contract#one-name-one-lock)), so one line holds
//! waiters of every kind, in the order they came. The rule above applies to
//! the waiters at the front that ask for the same lock as the first one
//! ([`LockKind::same_lock`]); the first waiter of another kind stops it.
//! Nobody is admitted while the name is held as another kind than the
//! first waiter's: a change that lets in a waiter of another kind is the
//! last hold of the kind before it going.
//!
//! A request that is not in line (a `try_lock`, or an unfair waiter) takes
//! what is free beyond what the line is admitted to: see [`admits_newcomer`].
//! The memory backend uses these functions as they are; the Redis scripts
//! (`lockkit-redis`, `lua/holds.lua`) carry the same rule in Lua, next to
//! the data it reads.

use crate::backend::LockKind;

/// The holds of a name now, as far as admission goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// How many holds stand: a mutex's holder, a semaphore's permits, a
    /// read-write lock's readers or its writer.
    pub holds: usize,
    /// One of them is a read-write lock's write hold.
    pub writer: bool,
    /// The kind of one of them (`None` while nobody holds the name): they
    /// are all of one lock ([`LockKind::same_lock`]).
    pub kind: Option<LockKind>,
}

impl Held {
    /// Whether a request of `kind` finds the name held as another lock
    /// (a mutex, a semaphore or a read-write lock: see
    /// [`LockKind::same_lock`]), and so waits until those holds are gone.
    pub fn as_other(&self, kind: LockKind) -> bool {
        self.holds > 0 && self.kind.is_some_and(|k| !k.same_lock(kind))
    }
}

/// How many waiters at the front of `line` (the kinds they ask for, first
/// in line first) may be granted now, given `held`: the waiters a change
/// admits (see the module docs for the rule). The line may mix kinds: only
/// the waiters before the first one of another lock than the first
/// waiter's are considered, and none while the name is held as another
/// lock.
pub fn admitted(line: impl IntoIterator<Item = LockKind>, held: Held) -> usize {
    let mut line = line.into_iter().peekable();
    let Some(first) = line.peek().copied() else {
        return 0;
    };
    if held.as_other(first) {
        return 0;
    }
    let mut line = line.take_while(|k| k.same_lock(first)).peekable();
    match line.peek().copied() {
        None => 0,
        Some(LockKind::Mutex) => usize::from(held.holds == 0),
        Some(LockKind::Permit { permits }) => {
            let free = usize::try_from(permits)
                .unwrap_or(usize::MAX)
                .saturating_sub(held.holds);
            line.take(free).count()
        }
        Some(LockKind::Write) if held.writer => 0,
        Some(LockKind::Write) => usize::from(held.holds == 0),
        Some(LockKind::Read) if held.writer => 0,
        Some(LockKind::Read) => line.take_while(|k| *k != LockKind::Write).count(),
    }
}

/// Whether a request of `kind` that is not in line may take the name now
/// without taking what `line` is admitted to: it counts as standing at the
/// back of the line. Fair `try_lock`s (and first attempts, before a waiter
/// joins the line) ask this.
pub fn admits_newcomer(line: impl IntoIterator<Item = LockKind>, kind: LockKind, held: Held) -> bool {
    let mut len = 0;
    let all = line.into_iter().inspect(|_| len += 1).chain(std::iter::once(kind));
    let admitted = admitted(all, held);
    admitted > len
}

#[cfg(test)]
mod tests {
    use super::*;

    const P3: LockKind = LockKind::Permit { permits: 3 };
    const R: LockKind = LockKind::Read;
    const W: LockKind = LockKind::Write;
    const M: LockKind = LockKind::Mutex;

    fn held(holds: usize, writer: bool) -> Held {
        Held {
            holds,
            writer,
            kind: None,
        }
    }

    fn held_as(holds: usize, kind: LockKind) -> Held {
        Held {
            holds,
            writer: kind == W,
            kind: Some(kind),
        }
    }

    #[test]
    fn kinds_of_one_name_take_turns() {
        assert_eq!(admitted([P3, P3, M, P3], held(0, false)), 2, "permits up to the mutex");
        assert_eq!(admitted([M, P3], held_as(1, P3)), 0, "a mutex waits for the permits");
        assert_eq!(admitted([R, R, P3], held_as(1, R)), 2, "readers join readers");
        assert_eq!(admitted([P3, R], held_as(1, W)), 0, "permits wait for the writer");
        assert_eq!(admitted([W, M], held_as(1, M)), 0);
        assert_eq!(admitted([M, W], held(0, false)), 1, "the mutex, then the writer");
        assert!(!admits_newcomer([], M, held_as(2, R)), "no mutex beside readers");
        assert!(
            !admits_newcomer([M], R, held(0, false)),
            "a try does not pass a waiter of another kind"
        );
        assert!(admits_newcomer([], P3, held_as(1, P3)));
        assert!(held_as(1, R).as_other(M) && !held_as(1, R).as_other(W) && !held(0, false).as_other(M));
    }

    #[test]
    fn a_mutex_admits_the_first_once_free() {
        assert_eq!(admitted([M, M, M], held(1, false)), 0);
        assert_eq!(admitted([M, M, M], held(0, false)), 1);
        assert_eq!(admitted([], held(0, false)), 0);
        assert!(!admits_newcomer([M], M, held(0, false)), "a try does not pass a waiter");
        assert!(admits_newcomer([], M, held(0, false)));
    }

    #[test]
    fn a_semaphore_admits_as_many_as_are_free() {
        assert_eq!(admitted([P3; 5], held(0, false)), 3);
        assert_eq!(admitted([P3; 5], held(1, false)), 2);
        assert_eq!(admitted([P3; 5], held(3, false)), 0);
        assert_eq!(admitted([P3; 2], held(0, false)), 2);
        assert!(admits_newcomer([P3; 2], P3, held(0, false)), "a third permit is free");
        assert!(!admits_newcomer([P3; 2], P3, held(1, false)));
    }

    #[test]
    fn a_rw_lock_admits_readers_before_the_first_writer() {
        assert_eq!(admitted([R, R, W, R], held(0, false)), 2);
        assert_eq!(admitted([R, R, W, R], held(2, false)), 2, "readers join readers");
        assert_eq!(admitted([R, R, W, R], held(1, true)), 0, "nobody beside a writer");
        assert_eq!(admitted([W, R, R], held(0, false)), 1, "a writer alone");
        assert_eq!(admitted([W, R, R], held(1, false)), 0, "a writer waits for the readers");
        assert!(admits_newcomer([R], R, held(1, false)));
        assert!(
            !admits_newcomer([W], R, held(1, false)),
            "no reader passes a waiting writer"
        );
        assert!(!admits_newcomer([R], W, held(0, false)));
    }
}
