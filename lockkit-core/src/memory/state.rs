//! The memory store's state: the holds of every name of every kind, the
//! waiters' lines, and the rules that grant a request.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::LockError;
use crate::admission::{self, Held};
use crate::backend::{AcquireRequest, Hold, LockInfo, LockKind};

/// A name: one lock whatever the kind (see
/// [the contract](crate::contract#one-name-one-lock)), with one line.
pub(super) type Key = String;

pub(super) fn key(name: &str) -> Key {
    name.to_owned()
}

#[derive(Debug, Default)]
pub(super) struct State {
    /// The live holds of each name, in the order they were granted: all of
    /// one lock ([`LockKind::same_lock`]).
    pub(super) names: HashMap<Key, Vec<Entry>>,
    /// A semaphore's permit count, while it has holds or waiters.
    permits: HashMap<String, u32>,
    /// A read-write lock's last write token (readers carry it); kept for
    /// the life of the store, as a server keeps a name's token counter.
    last_write: HashMap<String, u64>,
    /// One line per name somebody is waiting for, of every kind.
    pub(super) waiters: HashMap<Key, WaitSlot>,
    last_token: u64,
    last_ticket: u64,
    /// Attempts made (the tests count the wake-ups they cost).
    #[cfg(test)]
    pub(super) attempts: u64,
}

/// One hold: a mutex's, a semaphore's permit, a reader's or the writer's.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) owner: String,
    /// One attempt id per share of the hold: the hold count is their number.
    pub(super) attempts: Vec<String>,
    pub(super) token: u64,
    pub(super) expires_at: Instant,
    /// What kind of hold it is.
    pub(super) kind: LockKind,
}

impl Entry {
    pub(super) fn count(&self) -> u32 {
        u32::try_from(self.attempts.len()).unwrap_or(u32::MAX)
    }

    pub(super) fn info(&self, name: &str, now: Instant) -> LockInfo {
        LockInfo {
            name: name.to_owned(),
            owner: self.owner.clone(),
            hold_count: self.count(),
            token: self.token,
            remaining: Some(self.expires_at - now),
            kind: self.kind,
        }
    }

    /// Whether this is a hold of `kind` (a permit of any count).
    fn is(&self, kind: LockKind) -> bool {
        match kind {
            LockKind::Permit { .. } => matches!(self.kind, LockKind::Permit { .. }),
            _ => self.kind == kind,
        }
    }

    fn write(&self) -> bool {
        self.kind == LockKind::Write
    }
}

/// The waiters of one name, first come first served.
#[derive(Debug, Default)]
pub(super) struct WaitSlot {
    pub(super) queue: VecDeque<Waiter>,
}

/// One waiter in line: its ticket, what it asks for, and its own wake-up
/// (a change wakes only the waiters it admits: see [`crate::admission`]).
#[derive(Debug)]
pub(super) struct Waiter {
    ticket: u64,
    pub(super) kind: LockKind,
    notify: Arc<Notify>,
    /// Woken since its last attempt: not woken again until it tries.
    told: bool,
}

/// What one attempt found.
pub(super) enum Granted {
    /// The hold, as it is now (new, re-entered or repeated).
    Held {
        token: u64,
        count: u32,
        expires_at: Instant,
    },
    /// Not now; the earliest a hold in the way ends, if one is.
    Busy(Option<Instant>),
}

impl State {
    /// The live holds of `key`; expired ones are dropped on the way.
    pub(super) fn live(&mut self, key: &Key, now: Instant) -> &mut Vec<Entry> {
        let holds = self.names.entry(key.clone()).or_default();
        holds.retain(|e| e.expires_at > now);
        holds
    }

    /// Drops the name's entry once it has no holds, and a semaphore's count
    /// once it has no permits held and none waited for.
    pub(super) fn tidy(&mut self, key: &Key) {
        let permit = LockKind::Permit { permits: 1 };
        if self.names.get(key).is_some_and(Vec::is_empty) {
            self.names.remove(key);
        }
        let held = self.names.get(key).is_some_and(|h| h.iter().any(|e| e.is(permit)));
        let waited = self
            .waiters
            .get(key)
            .is_some_and(|slot| slot.queue.iter().any(|w| w.kind.same_lock(permit)));
        if !held && !waited {
            self.permits.remove(key);
        }
    }

    /// The hold `hold` names, if it stands (the caller tidies the name).
    pub(super) fn held_by(&mut self, hold: &Hold, now: Instant) -> Option<&mut Entry> {
        let key = key(&hold.name);
        self.live(&key, now)
            .iter_mut()
            .find(|e| e.owner == hold.owner && e.token == hold.token && e.is(hold.kind))
    }

    /// The holds of `key` as admission sees them (live holds only: the
    /// caller dropped expired ones).
    fn held(&self, key: &Key) -> Held {
        let holds = self.names.get(key).map_or(&[][..], Vec::as_slice);
        Held {
            holds: holds.len(),
            writer: holds.iter().any(Entry::write),
            kind: holds.first().map(|e| e.kind),
        }
    }

    /// Whether the waiter `ticket` (`None`: a try, not in line) may be
    /// granted now, as far as the line goes: it is among the waiters the
    /// line admits (see [`crate::admission`]), or, a try, it takes nothing they
    /// are admitted to.
    fn my_turn(&self, key: &Key, ticket: Option<u64>, kind: LockKind) -> bool {
        let Some(slot) = self.waiters.get(key) else {
            return true;
        };
        let held = self.held(key);
        let line = slot.queue.iter().map(|w| w.kind);
        match ticket.and_then(|t| slot.queue.iter().position(|w| w.ticket == t)) {
            Some(at) => at < admission::admitted(line, held),
            None => admission::admits_newcomer(line, kind, held),
        }
    }

    /// Wakes the waiters of `key` that the line admits now and that were
    /// not woken since their last attempt: a change wakes only those it
    /// lets in, never the whole line.
    pub(super) fn admit(&mut self, key: &Key) {
        let held = self.held(key);
        let Some(slot) = self.waiters.get_mut(key) else {
            return;
        };
        let n = admission::admitted(slot.queue.iter().map(|w| w.kind), held);
        for w in slot.queue.iter_mut().take(n).filter(|w| !w.told) {
            w.told = true;
            w.notify.notify_one();
        }
    }

    /// Checks (and records) a semaphore's permit count.
    fn check_permits(&mut self, req: &AcquireRequest<'_>, backend: &'static str) -> Result<(), LockError> {
        let LockKind::Permit { permits } = req.kind else {
            return Ok(());
        };
        match self.permits.get(req.name) {
            Some(&n) if n != permits => Err(LockError::Conflict {
                backend,
                name: req.name.to_owned(),
                reason: format!("the semaphore has {n} permits, the request says {permits}"),
            }),
            Some(_) => Ok(()),
            None => {
                self.permits.insert(req.name.to_owned(), permits);
                Ok(())
            }
        }
    }

    /// Joins the line of `req`'s name; returns the ticket and the
    /// waiter's own wake-up.
    pub(super) fn enqueue(
        &mut self,
        req: &AcquireRequest<'_>,
        backend: &'static str,
    ) -> Result<(u64, Arc<Notify>), LockError> {
        self.check_permits(req, backend)?;
        self.last_ticket += 1;
        let ticket = self.last_ticket;
        let notify = Arc::new(Notify::new());
        let slot = self.waiters.entry(key(req.name)).or_default();
        slot.queue.push_back(Waiter {
            ticket,
            kind: req.kind,
            notify: notify.clone(),
            told: false,
        });
        Ok((ticket, notify))
    }

    /// Leaves the line; the waiters it was in the way of (if any) are
    /// woken.
    pub(super) fn leave(&mut self, key: &Key, ticket: u64) {
        let Some(slot) = self.waiters.get_mut(key) else {
            return;
        };
        slot.queue.retain(|w| w.ticket != ticket);
        if slot.queue.is_empty() {
            self.waiters.remove(key);
            self.tidy(key);
        } else {
            self.admit(key);
        }
    }

    /// The waiter `ticket` tried and must wait on: it may be woken again.
    fn untold(&mut self, key: &Key, ticket: u64) {
        if let Some(w) = self
            .waiters
            .get_mut(key)
            .and_then(|slot| slot.queue.iter_mut().find(|w| w.ticket == ticket))
        {
            w.told = false;
        }
    }

    /// One attempt of `req` (waiter `ticket`, or a try).
    pub(super) fn attempt(
        &mut self,
        req: &AcquireRequest<'_>,
        ticket: Option<u64>,
        ttl: Duration,
        backend: &'static str,
    ) -> Result<Granted, LockError> {
        let now = Instant::now();
        #[cfg(test)]
        {
            self.attempts += 1;
        }
        self.check_permits(req, backend)?;
        let key = key(req.name);
        self.live(&key, now);
        let turn = (!req.fair && req.kind != LockKind::Read) || self.my_turn(&key, ticket, req.kind);
        let holds = self.live(&key, now);
        let grant = decide(holds, req, turn, backend)?;
        let granted = match grant {
            Grant::Busy(until) => {
                if let Some(ticket) = ticket {
                    self.untold(&key, ticket);
                }
                self.tidy(&key);
                return Ok(Granted::Busy(until));
            }
            Grant::Join(i) => join(&mut holds[i], req.attempt, now + ttl),
            Grant::New => self.add_hold(req, &key, now + ttl),
        };
        match ticket {
            // Out of line; another permit or reader may go too.
            Some(ticket) => self.leave(&key, ticket),
            None => self.admit(&key),
        }
        Ok(granted)
    }

    /// A new hold of `req` on `key`, until `expires_at`, with its token:
    /// the next of the name's (a reader carries the last write's).
    fn add_hold(&mut self, req: &AcquireRequest<'_>, key: &Key, expires_at: Instant) -> Granted {
        let token = match req.kind {
            LockKind::Read => self.last_write.get(req.name).copied().unwrap_or(0),
            _ => {
                self.last_token += 1;
                self.last_token
            }
        };
        if req.kind == LockKind::Write {
            self.last_write.insert(req.name.to_owned(), token);
        }
        let entry = Entry {
            owner: req.owner.to_owned(),
            attempts: vec![req.attempt.to_owned()],
            token,
            expires_at,
            kind: req.kind,
        };
        self.names.entry(key.clone()).or_default().push(entry);
        Granted::Held {
            token,
            count: 1,
            expires_at,
        }
    }

    /// Takes `attempt`'s share out of `hold`: `None` if the hold does not
    /// stand, else the holds left of it.
    pub(super) fn release(&mut self, hold: &Hold, attempt: &str, now: Instant) -> Option<u32> {
        let key = key(&hold.name);
        let Some(entry) = self.held_by(hold, now) else {
            self.tidy(&key);
            return None;
        };
        // A share already taken back (a repeated release) changes nothing.
        entry.attempts.retain(|a| a != attempt);
        let remaining = entry.count();
        if remaining == 0 {
            self.live(&key, now).retain(|e| !e.attempts.is_empty());
            self.admit(&key);
            self.tidy(&key);
        }
        Some(remaining)
    }

    /// Every hold of `kind` on `name`, in the order granted.
    pub(super) fn holders(&mut self, name: &str, kind: LockKind, now: Instant) -> Vec<LockInfo> {
        let key = key(name);
        let infos = self
            .live(&key, now)
            .iter()
            .filter(|e| e.is(kind))
            .map(|e| e.info(name, now))
            .collect();
        self.tidy(&key);
        infos
    }
}

/// What `req` gets against the live `holds` of its name (`turn`: whether
/// the line lets it go now): busy while they are of another lock, else the
/// rules of its kind.
fn decide(holds: &[Entry], req: &AcquireRequest<'_>, turn: bool, backend: &'static str) -> Result<Grant, LockError> {
    if holds.first().is_some_and(|e| !e.kind.same_lock(req.kind)) {
        return Ok(Grant::Busy(holds.iter().map(|e| e.expires_at).min()));
    }
    Ok(match req.kind {
        LockKind::Mutex => match holds.first() {
            Some(e) if e.owner == req.owner => Grant::Join(0),
            Some(e) => Grant::Busy(Some(e.expires_at)),
            None if turn => Grant::New,
            None => Grant::Busy(None),
        },
        LockKind::Permit { permits } => {
            let repeated = holds.iter().position(|e| e.attempts.iter().any(|a| a == req.attempt));
            match repeated {
                Some(i) => Grant::Join(i),
                None if turn && holds.len() < permits as usize => Grant::New,
                None => Grant::Busy(holds.iter().map(|e| e.expires_at).min()),
            }
        }
        LockKind::Read => {
            let mine = holds.iter().position(|e| e.owner == req.owner && !e.write());
            let writer = holds.iter().find(|e| e.write());
            match (mine, writer) {
                (Some(i), _) => Grant::Join(i),
                (None, Some(w)) if w.owner == req.owner => Grant::New,
                (None, Some(w)) => Grant::Busy(Some(w.expires_at)),
                (None, None) if turn => Grant::New,
                (None, None) => Grant::Busy(None),
            }
        }
        LockKind::Write => {
            let mine = holds.iter().position(|e| e.owner == req.owner && e.write());
            let reading = holds.iter().any(|e| e.owner == req.owner && !e.write());
            match mine {
                Some(i) => Grant::Join(i),
                None if reading => {
                    return Err(LockError::Conflict {
                        backend,
                        name: req.name.to_owned(),
                        reason: "the owner holds it for reading: a read hold cannot be upgraded; release it first"
                            .to_owned(),
                    });
                }
                None if holds.is_empty() && turn => Grant::New,
                None => Grant::Busy(holds.iter().map(|e| e.expires_at).min()),
            }
        }
    })
}

/// `attempt` joins the hold `e` (a re-entry, or a repeat of an attempt
/// already in it, counted once), which then lasts at least until
/// `expires_at`.
fn join(e: &mut Entry, attempt: &str, expires_at: Instant) -> Granted {
    if !e.attempts.iter().any(|a| a == attempt) {
        e.attempts.push(attempt.to_owned());
    }
    e.expires_at = e.expires_at.max(expires_at);
    Granted::Held {
        token: e.token,
        count: e.count(),
        expires_at: e.expires_at,
    }
}

/// How an attempt is granted, decided before anything changes.
enum Grant {
    /// Not now (the earliest a hold in the way ends).
    Busy(Option<Instant>),
    /// Joins (re-enters or repeats) the hold at this index.
    Join(usize),
    /// A new hold of the request's kind.
    New,
}
