//! One round's answers from the nodes, sorted by what they say: the nodes
//! that hold for the attempt, and what the others said instead — from
//! which a round without a quorum tells its caller why, and when to try
//! again.

use std::collections::HashMap;

use crate::error::Fault;
use crate::scripts::{AcquireReply, millis};
use crate::turn::TurnOf;

use super::nodes::Inner;
use super::quorum::{NodeHold, Outcome};

/// The answers of every node to one round of an attempt, by what they say.
pub(super) struct Answers<'r> {
    /// The nodes that hold for this attempt, with their hold.
    pub(super) held: Vec<NodeHold>,
    /// The remaining lease (ms) each refusing node reported (-1: none to
    /// wait for: another slot, a conflict, or unknown).
    pub(super) busy: Vec<i64>,
    /// The nodes that did not answer (failed or timed out).
    pub(super) failed: Vec<usize>,
    /// Their faults, in node order.
    pub(super) faults: Vec<&'r Fault>,
    /// Why the nodes that refused the request whoever holds it did.
    pub(super) conflicts: Vec<&'r String>,
    /// The queue heads named by nodes where the name is free but another
    /// client's turn: how many nodes named each, and the fewest clients
    /// between it and the caller they counted.
    pub(super) heads: HashMap<&'r str, (usize, u32)>,
    /// The free permit slots named by nodes where the slot asked for was
    /// taken: how many nodes named each.
    pub(super) free_slots: HashMap<u32, usize>,
    /// The greatest last write token a refusing node told a reader.
    pub(super) last_write: u64,
}

impl<'r> Answers<'r> {
    /// Sorts the nodes' `replies` (one per node, in node order).
    pub(super) fn sort(replies: &'r [Result<AcquireReply, Fault>]) -> Self {
        let mut answers = Answers {
            held: Vec::new(),
            busy: Vec::new(),
            failed: Vec::new(),
            faults: Vec::new(),
            conflicts: Vec::new(),
            heads: HashMap::new(),
            free_slots: HashMap::new(),
            last_write: 0,
        };
        for (node, r) in replies.iter().enumerate() {
            match r {
                Ok(reply) => answers.add(node, reply),
                Err(f) => {
                    answers.failed.push(node);
                    answers.faults.push(f);
                }
            }
        }
        answers
    }

    /// Adds the answer of `node`.
    fn add(&mut self, node: usize, reply: &'r AcquireReply) {
        match reply {
            AcquireReply::Acquired {
                token,
                count,
                pttl,
                share,
                slot,
                ..
            } => self.held.push(NodeHold {
                node,
                token: *token,
                count: *count,
                pttl: *pttl,
                share: *share,
                slot: *slot,
                agreed: false,
            }),
            AcquireReply::Busy {
                pttl,
                turn_of,
                last_write,
            } => {
                self.busy.push(*pttl);
                self.last_write = self.last_write.max(last_write.unwrap_or(0));
                if let Some(t) = turn_of {
                    let (named, behind) = self.heads.entry(t.head.as_str()).or_insert((0, t.behind));
                    *named += 1;
                    *behind = (*behind).min(t.behind);
                }
            }
            AcquireReply::OtherSlot { free } => {
                self.busy.push(-1);
                *self.free_slots.entry(*free).or_insert(0) += 1;
            }
            AcquireReply::Conflict { reason } => {
                self.busy.push(-1);
                self.conflicts.push(reason);
            }
            // A node quarantined by the restart guard refuses until its
            // quarantine ends (unknown until it is set: see `guard`).
            AcquireReply::Guarded { left_ms } => self
                .busy
                .push(left_ms.map_or(-1, |ms| i64::try_from(ms).unwrap_or(i64::MAX))),
        }
    }

    /// The nodes where this attempt may have counted, so where an undo
    /// goes: those that hold for it, and those whose answer did not come.
    pub(super) fn touched(&self) -> Vec<usize> {
        self.held
            .iter()
            .map(|h| h.node)
            .chain(self.failed.iter().copied())
            .collect()
    }
}

impl Inner {
    /// What a round that got no quorum (and is not tried again) comes to:
    /// refused where a quorum refused whoever holds the name, failed where
    /// too many nodes did not answer, busy otherwise.
    pub(super) fn refused(&self, answers: Answers<'_>) -> Outcome {
        if answers.conflicts.len() >= self.quorum {
            return Outcome::Conflict(answers.conflicts[0].clone());
        }
        if answers.faults.len() > self.n() - self.quorum {
            return Outcome::Failed(self.quorum_error(&answers.faults));
        }
        self.busy(answers)
    }

    /// A busy round: when a quorum may be free (when enough of the busy
    /// nodes' leases have run out), and whose turn it is if the name is
    /// free but queued for. A round where some nodes held for the attempt
    /// (or enough nodes were not busy) and no other client's turn stood in
    /// the way is a split vote.
    fn busy(&self, mut answers: Answers<'_>) -> Outcome {
        answers.busy.sort_unstable();
        let need = self.quorum.saturating_sub(self.n() - answers.busy.len());
        let retry_in = match need {
            0 => None,
            k => answers.busy.get(k - 1).filter(|p| **p >= 0).map(|p| millis(*p)),
        };
        let turn_of = answers
            .heads
            .into_iter()
            .max_by_key(|(head, (n, _))| (*n, std::cmp::Reverse(*head)))
            .map(|(head, (_, behind))| TurnOf {
                head: head.to_owned(),
                behind,
            });
        Outcome::Busy {
            retry_in,
            split: (!answers.held.is_empty() || need == 0) && turn_of.is_none(),
            turn_of,
        }
    }
}
