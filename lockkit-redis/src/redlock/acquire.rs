//! One Redlock acquisition attempt: the acquire script on every node with
//! a common token proposal, then keep what a quorum agrees on and undo the
//! rest.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lockkit_core::raw::{AcquireRequest, Hold, LockBackend, detach_acquisition, ttl_millis};
use lockkit_core::{LockError, LockKind};

use crate::error::Fault;
use crate::scripts::{self, AcquireReply, Claim, LineAfter, Publish, Queueing, Slot, UndoThen, millis};
use crate::turn::{Turn, TurnOf};

use super::nodes::{Inner, KIND, RedlockBackend};
use super::quorum::{NodeHold, Outcome, Settled, most_named};

/// How far ahead of this process's clock a token proposal is made: node
/// clocks up to this much ahead still take the proposal.
const PROPOSAL_LEAD: Duration = Duration::from_secs(1);

/// How many rounds one attempt makes while its fresh nodes disagree on the
/// token.
const TOKEN_ROUNDS: u32 = 3;

/// How many rounds one attempt at a permit makes while the nodes say its
/// slot is taken and name a free one.
const SLOT_ROUNDS: u32 = 3;

/// Whose attempt to take back (see [`Inner::spawn_undo`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Undo<'a> {
    pub(super) name: &'a str,
    pub(super) owner: &'a str,
    pub(super) attempt: &'a str,
    pub(super) kind: LockKind,
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
    pub(super) async fn attempt(
        self: &Arc<Self>,
        name: &str,
        owner: &str,
        attempt: &str,
        ttl_ms: u64,
        queueing: &Queueing,
        kind: LockKind,
    ) -> Outcome {
        let mut above: Option<u64> = None;
        let mut round = 1;
        // A permit takes one of the N slots on a quorum (see
        // `scripts::kinds::KINDS_ACQUIRE`): first the one each node assigns
        // (the same where the nodes agree), then, should they differ, the
        // one most of them named.
        let mut slot = match kind {
            LockKind::Permit { .. } => Slot::Assigned,
            _ => Slot::Any,
        };
        let mut slot_round = 1;
        loop {
            // Every node gets the same proposal (this clock + a margin for
            // skew, or above what the nodes issued last round), so that they
            // agree on the token.
            let lead = u64::try_from(PROPOSAL_LEAD.as_micros()).unwrap_or(u64::MAX);
            let proposal = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()
                .and_then(|d| u64::try_from(d.as_micros()).ok())
                .map(|now| now.saturating_add(lead).max(above.map_or(0, |a| a.saturating_add(1))));
            let keys = &self.keys;
            let nonce = scripts::nonce();
            let sent_at = Instant::now();
            let claim = &Claim {
                name,
                owner,
                ttl_ms,
                attempt,
                proposal,
                queueing,
                kind,
                slot,
                nonce: &nonce,
            };
            let replies = self
                .all(|_, mut c| async move { scripts::acquire(&mut c, keys, claim).await })
                .await;
            let mut held = Vec::new();
            let mut busy = Vec::new();
            let mut failed = Vec::new();
            let mut conflicts = Vec::new();
            let mut heads: HashMap<&str, (usize, u32)> = HashMap::new();
            let mut free_slots: HashMap<u32, usize> = HashMap::new();
            // The greatest last write token a refusing node told a reader.
            let mut last_write = 0;
            for (node, r) in replies.iter().enumerate() {
                match r {
                    Ok(AcquireReply::Acquired {
                        token,
                        count,
                        pttl,
                        share,
                        slot: in_slot,
                        ..
                    }) => held.push(NodeHold {
                        node,
                        token: *token,
                        count: *count,
                        pttl: *pttl,
                        share: *share,
                        slot: *in_slot,
                        agreed: false,
                    }),
                    Ok(AcquireReply::Busy {
                        pttl,
                        turn_of,
                        last_write: lw,
                    }) => {
                        busy.push(*pttl);
                        last_write = last_write.max(lw.unwrap_or(0));
                        if let Some(t) = turn_of {
                            let (named, behind) = heads.entry(t.head.as_str()).or_insert((0, t.behind));
                            *named += 1;
                            *behind = (*behind).min(t.behind);
                        }
                    }
                    Ok(AcquireReply::OtherSlot { free }) => {
                        busy.push(-1);
                        *free_slots.entry(*free).or_insert(0) += 1;
                    }
                    Ok(AcquireReply::Conflict { reason }) => {
                        busy.push(-1);
                        conflicts.push(reason);
                    }
                    Err(_) => failed.push(node),
                }
            }
            let settled = if held.len() >= self.quorum {
                self.settle(sent_at, &mut held, kind, last_write)
            } else {
                Settled::NoQuorum
            };
            // Undo wherever this attempt may have counted. A waiting caller
            // goes back to its place in the queues it left by taking a node.
            let targets: Vec<usize> = held.iter().map(|h| h.node).chain(failed.iter().copied()).collect();
            let requeue = match (queueing.join, &queueing.waiter, queueing.place) {
                (true, Some(waiter), Some(place)) => Some((waiter.as_str(), place)),
                _ => None,
            };
            match settled {
                Settled::Acquired(outcome) => {
                    // Shares this attempt may have left on nodes that did not
                    // answer in time, or that did not agree: take them back in
                    // the background. A waiting caller's line entry moves on
                    // every node outside the quorum as the grant moved it on
                    // the quorum, so that the nodes' lines agree on who comes
                    // next.
                    let agreed = |node: usize| held.iter().any(|h| h.node == node && h.agreed);
                    let moved = self.moved(queueing);
                    let stray: Vec<usize> = (0..self.n())
                        .filter(|&node| !agreed(node))
                        .filter(|&node| {
                            moved.is_some() || failed.contains(&node) || held.iter().any(|h| h.node == node)
                        })
                        .collect();
                    if !stray.is_empty() {
                        self.spawn_undo(
                            Undo {
                                name,
                                owner,
                                attempt,
                                kind,
                            },
                            moved,
                            stray,
                        );
                    }
                    return outcome;
                }
                Settled::Disagreed { highest } if round < TOKEN_ROUNDS => {
                    // Tried again at once: nobody need hear of it.
                    let then = UndoThen {
                        requeue,
                        announce: false,
                        nonce: &nonce,
                        moved: None,
                    };
                    self.undo(name, owner, attempt, kind, &targets, then).await;
                    above = Some(above.unwrap_or(0).max(highest));
                    round += 1;
                    continue;
                }
                Settled::Disagreed { .. } | Settled::NoQuorum => {}
            }
            // A quorum had a permit free for the caller, but the nodes
            // assigned different slots, or the slot asked for was taken
            // where it mattered: the slot most of them assigned, or most
            // of those that refused named, is asked for at once, as a
            // token disagreement is.
            let open = held.len() + free_slots.values().sum::<usize>();
            if slot == Slot::Assigned {
                for k in held.iter().filter_map(|h| h.slot) {
                    *free_slots.entry(k).or_insert(0) += 1;
                }
            }
            let other_slot = most_named(&free_slots)
                .filter(|free| Slot::Exact(*free) != slot)
                .filter(|_| open >= self.quorum);
            let decided = conflicts.len() >= self.quorum || failed.len() > self.n() - self.quorum;
            if let Some(free) = other_slot.filter(|_| !decided && slot_round < SLOT_ROUNDS) {
                let then = UndoThen {
                    requeue,
                    announce: false,
                    nonce: &nonce,
                    moved: None,
                };
                self.undo(name, owner, attempt, kind, &targets, then).await;
                slot = Slot::Exact(free);
                slot_round += 1;
                continue;
            }
            // No quorum.
            let then = UndoThen {
                requeue,
                announce: true,
                nonce: &nonce,
                moved: None,
            };
            self.undo(name, owner, attempt, kind, &targets, then).await;
            if conflicts.len() >= self.quorum {
                return Outcome::Conflict(conflicts.swap_remove(0).clone());
            }
            let failures: Vec<&Fault> = replies.iter().filter_map(|r| r.as_ref().err()).collect();
            if failures.len() > self.n() - self.quorum {
                return Outcome::Failed(self.quorum_error(&failures));
            }
            // A quorum frees up when enough of the busy nodes' leases run out.
            busy.sort_unstable();
            let need = self.quorum.saturating_sub(self.n() - busy.len());
            let retry_in = match need {
                0 => None,
                k => busy.get(k - 1).filter(|p| **p >= 0).map(|p| millis(*p)),
            };
            let turn_of = heads
                .into_iter()
                .max_by_key(|(head, (n, _))| (*n, std::cmp::Reverse(*head)))
                .map(|(head, (_, behind))| TurnOf {
                    head: head.to_owned(),
                    behind,
                });
            return Outcome::Busy {
                retry_in,
                split: (!held.is_empty() || need == 0) && turn_of.is_none(),
                turn_of,
            };
        }
    }

    /// Takes `attempt`'s share back on `nodes` (waiting for each up to the
    /// response timeout).
    pub(super) async fn undo(
        &self,
        name: &str,
        owner: &str,
        attempt: &str,
        kind: LockKind,
        nodes: &[usize],
        then: UndoThen<'_>,
    ) {
        if nodes.is_empty() {
            return;
        }
        let keys = &self.keys;
        self.on_nodes(true, |node, mut c| async move {
            if !nodes.contains(&node) {
                Ok(false)
            } else if kind == LockKind::Mutex {
                scripts::undo(&mut c, keys, name, owner, attempt, then).await
            } else {
                scripts::undo_kind(&mut c, keys, (name, owner, attempt, kind), then).await
            }
        })
        .await;
    }

    /// Where a grant by a waiting caller moved its line entry (see
    /// [`UndoThen::moved`]), with the caller's waiter id.
    fn moved(&self, queueing: &Queueing) -> Option<(String, LineAfter)> {
        let waiter = queueing.waiter.as_ref().filter(|_| queueing.join)?;
        let after = match (queueing.in_place, queueing.stay, queueing.back) {
            (true, _, _) => return None,
            (false, true, Some(back)) => LineAfter::Back(back),
            (false, true, None) => return None,
            (false, false, _) => LineAfter::Out,
        };
        Some((waiter.clone(), after))
    }

    /// Takes back the shares an acquisition left on nodes outside its
    /// quorum, in the background, and moves the caller's line entry there
    /// as the grant did (`moved`); silently: the name stays held.
    pub(super) fn spawn_undo(self: &Arc<Self>, undo: Undo<'_>, moved: Option<(String, LineAfter)>, nodes: Vec<usize>) {
        let this = self.clone();
        let (name, owner, attempt, kind) = (
            undo.name.to_owned(),
            undo.owner.to_owned(),
            undo.attempt.to_owned(),
            undo.kind,
        );
        tokio::spawn(async move {
            let then = UndoThen {
                requeue: None,
                announce: false,
                nonce: "",
                moved: moved.as_ref().map(|(w, after)| (w.as_str(), *after)),
            };
            this.undo(&name, &owner, &attempt, kind, &nodes, then).await
        });
    }
}

impl RedlockBackend {
    /// As on a single server (see [`Queueing::new`]); a waiting client
    /// joins every node's queue at the same place, `since` (µs), so that
    /// the nodes' queues agree.
    pub(super) fn queueing(&self, turn: Option<Turn>, fair: bool) -> Queueing {
        Queueing::new(self.inner.waiters.waiter_id(), turn, fair, Publish::Classic, true)
    }

    /// One attempt, detached; a hold whose caller is gone is released.
    pub(super) async fn attempt(&self, req: &AcquireRequest<'_>, queueing: Queueing) -> Result<Outcome, LockError> {
        let ttl_ms = ttl_millis(req.ttl);
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let inner = self.inner.clone();
        let releaser = (self.clone(), attempt.clone());
        let kind = req.kind;
        let work = async move { inner.attempt(&name, &owner, &attempt, ttl_ms, &queueing, kind).await };
        let token_of = |outcome: &Outcome| match outcome {
            Outcome::Acquired(lease) => Some(lease.token),
            _ => None,
        };
        let release = move |hold: Hold| async move {
            let (backend, attempt) = releaser;
            backend.release(&hold, &attempt).await
        };
        detach_acquisition(KIND, req, work, token_of, release).await
    }
}
