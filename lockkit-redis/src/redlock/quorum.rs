//! The quorum arithmetic: which token a quorum agrees on, how long a lease
//! a quorum guarantees after clock drift, the holder a quorum reports, and
//! the random delay after a split vote.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use lockkit_core::raw::{Lease, valid_until};
use lockkit_core::{LockError, LockInfo, LockKind};

use crate::error::{Fault, QuorumError};
use crate::scripts::{Share, Stored, millis};

use super::nodes::{Inner, RedlockBackend};
use crate::turn::TurnOf;

/// One node's answer to an acquisition that holds there.
#[derive(Debug, Clone, Copy)]
pub(super) struct NodeHold {
    pub(super) node: usize,
    pub(super) token: u64,
    pub(super) count: u32,
    pub(super) pttl: i64,
    pub(super) share: Share,
    /// A permit's slot on the node.
    pub(super) slot: Option<u32>,
    /// Counts towards the quorum's decision (set by [`Inner::settle`]).
    pub(super) agreed: bool,
}

impl NodeHold {
    /// The node's hold is this attempt's alone: new, or a repeat of it that
    /// is the hold's only share.
    fn fresh(&self) -> bool {
        matches!(self.share, Share::New) || (self.share == Share::Repeated && self.count == 1)
    }
}

/// What [`Inner::settle`] made of one round's answers.
pub(super) enum Settled {
    Acquired(Outcome),
    /// Enough nodes made this attempt's hold afresh, but on different
    /// tokens; `highest` is the greatest of them.
    Disagreed {
        highest: u64,
    },
    /// Neither a re-entry nor a first acquisition has a quorum, or the
    /// validity is already gone.
    NoQuorum,
}

/// What one Redlock attempt came to.
pub(super) enum Outcome {
    Acquired(Lease),
    /// Not acquired: held elsewhere (`retry_in` until a quorum may be free)
    /// or a split vote (`split`: retry after a random delay).
    Busy {
        retry_in: Option<Duration>,
        split: bool,
        /// Free (on the nodes that said so), but another waiting client's
        /// turn: the most named queue head (and the fewest clients between
        /// it and the caller any of those nodes counted).
        turn_of: Option<TurnOf>,
    },
    /// Too many nodes failed to answer.
    Failed(QuorumError),
    /// A quorum refused the request whoever holds it (a read-write lock's
    /// reader asking to write): why.
    Conflict(String),
}

impl Inner {
    /// The deadline a quorum of these remaining leases (ms) guarantees,
    /// counted from `sent_at`.
    pub(super) fn validity(&self, sent_at: Instant, mut pttls: Vec<i64>) -> Option<Instant> {
        pttls.sort_unstable_by(|a, b| b.cmp(a));
        let rem = *pttls.get(self.quorum - 1)?;
        if rem < 0 {
            return None;
        }
        let until = valid_until(sent_at, millis(rem)).checked_sub(self.config.drift)?;
        (until > Instant::now()).then_some(until)
    }

    pub(super) fn quorum_error(&self, failures: &[&Fault]) -> QuorumError {
        QuorumError {
            succeeded: self.n() - failures.len(),
            quorum: self.quorum,
            nodes: self.n(),
            first: failures.first().map(|f| f.to_string()).unwrap_or_default(),
            retryable: failures.iter().all(|f| f.retryable()),
        }
    }

    /// With a quorum of nodes holding for this owner: decides whether this
    /// is a re-entry or a first acquisition, its token and validity, and
    /// marks the nodes that agree. Nothing is written: the nodes that do not
    /// agree only lose this attempt's share (the caller undoes it), and no
    /// other share is ever touched — a share of the same owner may be a
    /// co-owner's (another process configured with the same owner id,
    /// acquiring at the same moment), not a stale one.
    ///
    /// * **Re-entry** only where a quorum of nodes already had this owner's
    ///   hold under one token `T` (or had this attempt's share under it: a
    ///   repeat): the lease keeps `T`. It rests on this attempt's own shares
    ///   on that quorum.
    /// * **First acquisition** only where a quorum of nodes made a *fresh*
    ///   hold (this attempt's share alone) under one token `T`, and `T` is
    ///   the lease's. Each of them issued `T` above its counter, and every
    ///   earlier hold was on a quorum that meets this one in such a node, so
    ///   `T` is above every earlier token; nodes that re-entered a hold of
    ///   the owner (a co-owner's, or a stale one a node kept) do not count
    ///   and do not raise it. Two co-owners cannot both make a first
    ///   acquisition: their quorums meet in a node where only one of them
    ///   was first.
    /// * Fresh nodes enough for a quorum, but on different tokens (a node's
    ///   clock or counter ahead of the proposal): [`Settled::Disagreed`],
    ///   to be undone and proposed again above the highest.
    /// * Otherwise (say the owner holds `T` on a quorum, one of whose nodes
    ///   is slow now, or two co-owners split the nodes) neither can be told
    ///   apart from the other, and the attempt is undone and tried again.
    ///
    /// A permit counts only on the nodes that gave it the slot most of
    /// them gave it (the others' shares are undone like a disagreeing
    /// node's): at most one permit stands in a slot.
    ///
    /// A reader's token is each node's last write token, which a write
    /// attempt that failed on some nodes may have left raised there: a read
    /// hold stands on any quorum of nodes that hold it, with the greatest
    /// of their tokens and of `last_write`, the greatest the nodes that
    /// refused it told (every granted writer's quorum meets the holding
    /// nodes, so it is at least the last granted writer's — unless a node
    /// of that meeting lost its keys since; the refusing nodes' word then
    /// often still has it).
    pub(super) fn settle(&self, sent_at: Instant, held: &mut [NodeHold], kind: LockKind, last_write: u64) -> Settled {
        if kind == LockKind::Read {
            let token = held.iter().map(|h| h.token).max().unwrap_or(0).max(last_write);
            held.iter_mut().for_each(|h| h.agreed = true);
            return self.settled(sent_at, held, token);
        }
        // A permit stands in one slot: the one most of these nodes gave it.
        let slot = main_slot(held);
        let reentered = |h: &NodeHold| h.share != Share::New && h.slot == slot;
        let fresh = |h: &NodeHold| h.fresh() && h.slot == slot;
        let (token, first) = match self.agreeing(held.iter().filter(|h| reentered(h))) {
            Some(t) => (t, false),
            None => match self.agreeing(held.iter().filter(|h| fresh(h))) {
                Some(t) => (t, true),
                None => {
                    let fresh: Vec<u64> = held.iter().filter(|h| fresh(h)).map(|h| h.token).collect();
                    return match fresh.iter().max() {
                        Some(&highest) if fresh.len() >= self.quorum => Settled::Disagreed { highest },
                        _ => Settled::NoQuorum,
                    };
                }
            },
        };
        for h in held.iter_mut() {
            h.agreed = h.token == token && if first { fresh(h) } else { reentered(h) };
        }
        self.settled(sent_at, held, token)
    }

    /// The lease the agreed nodes of `held` give, under `token`.
    fn settled(&self, sent_at: Instant, held: &[NodeHold], token: u64) -> Settled {
        let good: Vec<&NodeHold> = held.iter().filter(|h| h.agreed).collect();
        let Some(valid_until) = self.validity(sent_at, good.iter().map(|h| h.pttl).collect()) else {
            return Settled::NoQuorum;
        };
        Settled::Acquired(Outcome::Acquired(Lease {
            token,
            hold_count: good.iter().map(|h| h.count).max().unwrap_or(1),
            valid_until: Some(valid_until),
            lost: None,
            session_deadline: None,
        }))
    }

    /// The greatest token a quorum of `nodes` has, if any.
    pub(super) fn agreeing<'a>(&self, nodes: impl Iterator<Item = &'a NodeHold>) -> Option<u64> {
        let mut votes: HashMap<u64, usize> = HashMap::new();
        for h in nodes {
            *votes.entry(h.token).or_default() += 1;
        }
        votes
            .into_iter()
            .filter(|(_, v)| *v >= self.quorum)
            .map(|(t, _)| t)
            .max()
    }
}

/// The slot most of `held` stand in (`None` for holds without slots).
fn main_slot(held: &[NodeHold]) -> Option<u32> {
    let mut votes: HashMap<u32, usize> = HashMap::new();
    for k in held.iter().filter_map(|h| h.slot) {
        *votes.entry(k).or_default() += 1;
    }
    most_named(&votes)
}

/// The slot most nodes named (`votes`: slot -> nodes; the lowest of
/// equals).
pub(super) fn most_named(votes: &HashMap<u32, usize>) -> Option<u32> {
    votes
        .iter()
        .max_by_key(|(slot, n)| (**n, std::cmp::Reverse(**slot)))
        .map(|(slot, _)| *slot)
}

/// How a per-node result counts towards a quorum decision.
pub(super) fn tally<T>(results: &[Result<Option<T>, Fault>]) -> (usize, usize, Vec<&Fault>) {
    let yes = results.iter().filter(|r| matches!(r, Ok(Some(_)))).count();
    let no = results.iter().filter(|r| matches!(r, Ok(None))).count();
    let failures = results.iter().filter_map(|r| r.as_ref().err()).collect();
    (yes, no, failures)
}

impl RedlockBackend {
    /// The holder a quorum of nodes agrees on. With `quorum_only` false
    /// (what a forced release removed) the hold most nodes had counts too.
    pub(super) fn holder(
        &self,
        operation: &'static str,
        name: &str,
        results: &[Result<Option<Stored>, Fault>],
        quorum_only: bool,
    ) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let mut groups: HashMap<(&str, u64), Vec<&Stored>> = HashMap::new();
        let mut failures = Vec::new();
        for r in results {
            match r {
                Ok(Some(s)) => groups.entry((s.owner.as_str(), s.token)).or_default().push(s),
                Ok(None) => {}
                Err(f) => failures.push(f),
            }
        }
        let best = groups
            .into_iter()
            .max_by_key(|((_, token), nodes)| (nodes.len(), *token))
            .filter(|(_, nodes)| !quorum_only || nodes.len() >= inner.quorum);
        if let Some(((owner, token), nodes)) = best {
            let mut pttls: Vec<i64> = nodes.iter().map(|s| s.pttl).collect();
            pttls.sort_unstable_by(|a, b| b.cmp(a));
            let rem = pttls[inner.quorum.min(pttls.len()) - 1];
            return Ok(Some(LockInfo {
                name: name.to_owned(),
                owner: owner.to_owned(),
                hold_count: nodes.iter().map(|s| s.count).max().unwrap_or(1),
                token,
                remaining: (rem >= 0).then(|| millis(rem)),
                kind: lockkit_core::LockKind::Mutex,
            }));
        }
        if failures.len() > inner.n() - inner.quorum {
            return Err(self.failed(operation, name, inner.quorum_error(&failures)));
        }
        Ok(None)
    }

    /// The random retry delay after the `splits`-th split vote in a row:
    /// uniform up to 1 ms × 2^splits, at most `retry_delay` — short while
    /// contenders are few and the network fast, longer when they keep
    /// colliding.
    pub(super) fn backoff(&self, splits: u32) -> Duration {
        let cap = u64::try_from(self.inner.config.retry_delay.as_micros()).unwrap_or(u64::MAX);
        let max = (1000u64 << splits.min(20)).min(cap).max(2);
        Duration::from_micros(rand::random_range(0..=max))
    }
}
