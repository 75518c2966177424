//! The rounds of one Redlock acquisition attempt: the acquire script on
//! every node with a common token proposal, then keep what a quorum agrees
//! on and undo the rest — or undo all and make the next round at once,
//! when the nodes only disagreed on the token or the permit slot.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::LockKind;

use crate::error::Fault;
use crate::scripts::{self, AcquireReply, Claim, Queueing, Slot, UndoOf, UndoThen};

use super::answers::Answers;
use super::guard;
use super::nodes::Inner;
use super::quorum::{Outcome, Settled, most_named};

/// How far ahead of this process's clock a token proposal is made: node
/// clocks up to this much ahead still take the proposal.
const PROPOSAL_LEAD: Duration = Duration::from_secs(1);

/// How many rounds one attempt makes while its fresh nodes disagree on the
/// token.
const TOKEN_ROUNDS: u32 = 3;

/// How many rounds one attempt at a permit makes while the nodes say its
/// slot is taken and name a free one.
const SLOT_ROUNDS: u32 = 3;

/// One attempt as its caller asked for it: `owner`'s attempt `attempt`
/// at a hold of `kind` on `name` for `ttl_ms`, queueing as `queueing`
/// says — what every round sends unchanged.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttemptOf<'a> {
    pub(super) name: &'a str,
    pub(super) owner: &'a str,
    pub(super) attempt: &'a str,
    pub(super) ttl_ms: u64,
    pub(super) queueing: &'a Queueing,
    pub(super) kind: LockKind,
}

impl<'a> AttemptOf<'a> {
    /// What an undo of this attempt takes back.
    fn undo_of(&self) -> UndoOf<'a> {
        UndoOf {
            name: self.name,
            kind: self.kind,
            owner: self.owner,
            attempt: self.attempt,
        }
    }

    /// The waiting caller's id and place, to put it back in the queues it
    /// left by taking a node (`None`: not waiting).
    fn requeue(&self) -> Option<(&'a str, u64)> {
        match (self.queueing.join, &self.queueing.waiter, self.queueing.place) {
            (true, Some(waiter), Some(place)) => Some((waiter.as_str(), place)),
            _ => None,
        }
    }
}

/// Where an attempt stands between its rounds: what the next round
/// proposes and asks for, and how many rounds of each sort it made.
struct Rounds {
    /// The highest token fresh nodes issued in the rounds that disagreed
    /// on it (`None`: none did yet); the next proposal goes above it.
    above: Option<u64>,
    /// 1, plus the rounds a token disagreement sent again.
    token_round: u32,
    /// The permit slot asked for.
    slot: Slot,
    /// 1, plus the rounds a taken slot sent again.
    slot_round: u32,
    /// A round went again once nodes without a marker got theirs.
    guarded: bool,
}

impl Rounds {
    /// The first round of an attempt at a hold of `kind`. A permit takes
    /// one of the N slots on a quorum (see
    /// `scripts::kinds::KINDS_ACQUIRE`): first the one each node assigns
    /// (the same where the nodes agree), then, should they differ, the
    /// one most of them named.
    fn new(kind: LockKind) -> Self {
        let slot = match kind {
            LockKind::Permit { .. } => Slot::Assigned,
            _ => Slot::Any,
        };
        Rounds {
            above: None,
            token_round: 1,
            slot,
            slot_round: 1,
            guarded: false,
        }
    }

    /// The token every node is proposed, the same for all so that they
    /// agree on the token: this clock plus a margin for skew, or above
    /// what the nodes issued last round.
    fn proposal(&self) -> Option<u64> {
        let lead = u64::try_from(PROPOSAL_LEAD.as_micros()).unwrap_or(u64::MAX);
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .ok()
            .and_then(|d| u64::try_from(d.as_micros()).ok())
            .map(|now| {
                now.saturating_add(lead)
                    .max(self.above.map_or(0, |a| a.saturating_add(1)))
            })
    }
}

/// What one round came to.
enum Round {
    /// The attempt's outcome.
    Done(Outcome),
    /// Undone; the next round goes at once.
    Again,
}

impl Inner {
    /// One attempt: acquire on every node; keep the shares of the nodes
    /// that agree, undo the rest. Every try of one `lock` call carries the
    /// same `attempt` id, so a node that still has an earlier try's share
    /// (its undo did not arrive) counts it once.
    ///
    /// When enough nodes made this attempt's hold but issued different
    /// tokens (a node's clock or counter ahead of the proposal), the attempt
    /// is undone and made again at once, proposing above the highest token
    /// they issued (up to [`TOKEN_ROUNDS`] rounds; then it reads as a split
    /// vote).
    pub(super) async fn attempt(self: &Arc<Self>, of: &AttemptOf<'_>) -> Outcome {
        let mut rounds = Rounds::new(of.kind);
        loop {
            if let Round::Done(outcome) = self.round(of, &mut rounds).await {
                return outcome;
            }
        }
    }

    /// One round: the claim on every node, then the grant, the next round,
    /// or the reason there is none.
    async fn round(self: &Arc<Self>, of: &AttemptOf<'_>, rounds: &mut Rounds) -> Round {
        let nonce = scripts::nonce();
        let sent_at = Instant::now();
        let replies = self.claim_on_nodes(of, rounds, &nonce).await;
        // Nodes that lost their data get their quarantine first; when they
        // may grant at once (nothing to wait for), the round goes again.
        let requarantined = guard::emptied(&replies) && self.quarantine(of.ttl_ms).await && !rounds.guarded;
        let mut answers = Answers::sort(&replies);
        let settled = if answers.held.len() >= self.quorum {
            self.settle(sent_at, &mut answers.held, of.kind, answers.last_write)
        } else {
            Settled::NoQuorum
        };
        // Undo wherever this attempt may have counted. A waiting caller
        // goes back to its place in the queues it left by taking a node.
        let targets = answers.touched();
        let undo_then = |announce| UndoThen {
            requeue: of.requeue(),
            announce,
            nonce: &nonce,
            moved: None,
        };
        match settled {
            Settled::Acquired(outcome) => {
                self.undo_strays(of, &answers);
                return Round::Done(outcome);
            }
            Settled::Disagreed { highest } if rounds.token_round < TOKEN_ROUNDS => {
                // Tried again at once: nobody need hear of it.
                self.undo(&of.undo_of(), &targets, undo_then(false)).await;
                rounds.above = Some(rounds.above.unwrap_or(0).max(highest));
                rounds.token_round += 1;
                return Round::Again;
            }
            Settled::Disagreed { .. } | Settled::NoQuorum => {}
        }
        if requarantined {
            self.undo(&of.undo_of(), &targets, undo_then(false)).await;
            rounds.guarded = true;
            return Round::Again;
        }
        if let Some(free) = self.other_slot(&answers, rounds) {
            self.undo(&of.undo_of(), &targets, undo_then(false)).await;
            rounds.slot = Slot::Exact(free);
            rounds.slot_round += 1;
            return Round::Again;
        }
        // No quorum.
        self.undo(&of.undo_of(), &targets, undo_then(true)).await;
        Round::Done(self.refused(answers))
    }

    /// Sends this round's claim to every node: the attempt with this
    /// round's token proposal and permit slot, and the turn messages'
    /// `nonce`.
    async fn claim_on_nodes(
        &self,
        of: &AttemptOf<'_>,
        rounds: &Rounds,
        nonce: &str,
    ) -> Vec<Result<AcquireReply, Fault>> {
        let keys = &self.keys;
        let claim = &Claim {
            name: of.name,
            owner: of.owner,
            ttl_ms: of.ttl_ms,
            attempt: of.attempt,
            proposal: rounds.proposal(),
            queueing: of.queueing,
            kind: of.kind,
            slot: rounds.slot,
            nonce,
            guarded: self.config.guard_floor().is_some(),
        };
        self.all(|i, mut c| async move {
            let answer = scripts::acquire(&mut c, keys, claim, None).await?;
            match self.node_clock_stepped(i, c, answer.clock, claim.ttl_ms).await {
                Some(stepped) => Err(stepped),
                None => Ok(answer.reply),
            }
        })
        .await
    }

    /// After a grant: shares this attempt may have left on nodes that did
    /// not answer in time, or that did not agree, are taken back in the
    /// background. A waiting caller's line entry moves on every node
    /// outside the quorum as the grant moved it on the quorum, so that the
    /// nodes' lines agree on who comes next.
    fn undo_strays(self: &Arc<Self>, of: &AttemptOf<'_>, answers: &Answers<'_>) {
        let held = &answers.held;
        let agreed = |node: usize| held.iter().any(|h| h.node == node && h.agreed);
        let moved = self.moved(of.queueing);
        let stray: Vec<usize> = (0..self.n())
            .filter(|&node| !agreed(node))
            .filter(|&node| moved.is_some() || answers.failed.contains(&node) || held.iter().any(|h| h.node == node))
            .collect();
        if !stray.is_empty() {
            self.spawn_undo(of.undo_of(), moved, stray);
        }
    }

    /// The permit slot to ask for at once, if any: a quorum had a permit
    /// free for the caller, but the nodes assigned different slots, or the
    /// slot asked for was taken where it mattered — then the slot most of
    /// them assigned, or most of those that refused named, is asked for,
    /// as a token disagreement is tried again. Not when a quorum refused
    /// or failed (that is decided), nor past [`SLOT_ROUNDS`].
    fn other_slot(&self, answers: &Answers<'_>, rounds: &Rounds) -> Option<u32> {
        let open = answers.held.len() + answers.free_slots.values().sum::<usize>();
        let mut named = answers.free_slots.clone();
        if rounds.slot == Slot::Assigned {
            for k in answers.held.iter().filter_map(|h| h.slot) {
                *named.entry(k).or_insert(0) += 1;
            }
        }
        let decided = answers.conflicts.len() >= self.quorum || answers.failed.len() > self.n() - self.quorum;
        most_named(&named)
            .filter(|free| Slot::Exact(*free) != rounds.slot)
            .filter(|_| open >= self.quorum)
            .filter(|_| !decided && rounds.slot_round < SLOT_ROUNDS)
    }
}
