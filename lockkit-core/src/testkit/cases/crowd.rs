//! Contract point 14, crowds: hundreds of waiters on one name — spread over
//! several clients (each its own connections) and many owners per client —
//! are all served, and every kind keeps its bound while they are: a mutex
//! one holder, a semaphore of N at most N and N at once when holds overlap,
//! a read-write lock readers together and a writer alone.
//!
//! Every waiter of a crowd takes its hold once and gives it back; the crowd
//! is waiting for the name before the first of them is let in (a holder
//! keeps it until every waiter has started its `lock`), so what is measured
//! is the hand-off through a full line, not a race of arrivals. A waiter
//! that runs out of time fails the case: with hundreds waiting, a backend
//! that wakes every waiter per release, polls, or runs out of connections
//! shows here as waiters that are never served.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;
use tokio::time::timeout;

use super::steps::must_unlock;
use super::{rwlock, semaphore};
use crate::backend::LockKind;
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// The permits of the crowd's semaphore.
const PERMITS: usize = 3;

/// One waiter in every `WRITER_EVERY` of the read-write crowd writes.
const WRITER_EVERY: usize = 10;

/// The longest a holder keeps its hold waiting for others to join it (a
/// semaphore's N permits, a second reader) until some holders were seen
/// together: an event, not a tuned sleep — a backend that admits them
/// together ends the wait at once.
const JOIN_WAIT: Duration = Duration::from_millis(250);

/// What one waiter asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Lock,
    Permit,
    Read,
    Write,
}

/// Who is inside now, and the most seen at once.
#[derive(Default)]
struct Inside {
    state: Mutex<InsideState>,
    /// Rung whenever somebody comes in.
    entered: Notify,
}

#[derive(Default)]
struct InsideState {
    holders: usize,
    readers: usize,
    writers: usize,
    most_holders: usize,
    most_readers: usize,
    /// The token of every exclusive grant (mutex, write), in grant order.
    exclusive_tokens: Vec<u64>,
    /// Readers' tokens that differed from the last writer's.
    stale_reads: Vec<(u64, u64)>,
    /// Violations seen at entry.
    violations: Vec<String>,
}

impl Inside {
    fn state(&self) -> std::sync::MutexGuard<'_, InsideState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Comes in with `guard`, checking the kind's bound.
    fn enter(&self, want: Want, guard: &LockGuard) {
        let mut st = self.state();
        st.holders += 1;
        st.most_holders = st.most_holders.max(st.holders);
        let token = guard.fencing_token();
        match want {
            Want::Lock | Want::Write => {
                if st.holders > 1 {
                    let n = st.holders;
                    st.violations
                        .push(format!("{want:?} granted (token {token}) with {} others inside", n - 1));
                }
                if want == Want::Write {
                    st.writers += 1;
                }
                st.exclusive_tokens.push(token);
            }
            Want::Permit => {
                if st.holders > PERMITS {
                    let n = st.holders;
                    st.violations.push(format!("{n} permits held at once, of {PERMITS}"));
                }
            }
            Want::Read => {
                st.readers += 1;
                st.most_readers = st.most_readers.max(st.readers);
                if st.writers > 0 {
                    st.violations
                        .push(format!("a read granted (token {token}) beside a writer"));
                }
                if let Some(&last) = st.exclusive_tokens.last()
                    && token != last
                {
                    st.stale_reads.push((token, last));
                }
            }
        }
        drop(st);
        self.entered.notify_waiters();
    }

    fn leave(&self, want: Want) {
        let mut st = self.state();
        st.holders -= 1;
        match want {
            Want::Read => st.readers -= 1,
            Want::Write => st.writers -= 1,
            _ => {}
        }
    }

    /// Keeps the hold until `enough` says the others it should share with
    /// are in, or [`JOIN_WAIT`] passes.
    async fn wait_for_company(&self, enough: impl Fn(&InsideState) -> bool) {
        let until = tokio::time::Instant::now() + JOIN_WAIT;
        loop {
            let entered = self.entered.notified();
            tokio::pin!(entered);
            entered.as_mut().enable();
            if enough(&self.state()) {
                return;
            }
            if tokio::time::timeout_at(until, entered).await.is_err() {
                return;
            }
        }
    }
}

/// The crowd: `kit.crowd_clients` clients, `kit.crowd_per_client` owners on
/// each, one waiter per owner; waiter `i` asks for `want(i)`.
async fn run_crowd(kit: &Kit, case: &str, gate: Want, want: impl Fn(usize) -> Want) -> Arc<Inside> {
    let clients: Vec<LockClient> = join_all((0..kit.crowd_clients).map(|_| kit.client())).await;
    let name = kit.name(case);
    let waiters = kit.crowd_clients * kit.crowd_per_client;
    // The gate keeps the name (every permit of a semaphore) until every
    // waiter has asked.
    let gate_client = &clients[0];
    let gate_holds = if gate == Want::Permit { PERMITS } else { 1 };
    let mut gate_guards = Vec::with_capacity(gate_holds);
    for _ in 0..gate_holds {
        gate_guards.push(take(gate_client, &name, gate, &kit.long(gate_client)).await);
    }
    let inside = Arc::new(Inside::default());
    if matches!(gate, Want::Lock | Want::Write) {
        inside.state().exclusive_tokens.push(gate_guards[0].fencing_token());
    }
    let started = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::with_capacity(waiters);
    for i in 0..waiters {
        let client = clients[i % clients.len()].with_new_owner();
        let opts = client.options().ttl(Duration::from_secs(60)).wait(kit.crowd_wait);
        let (name, inside, started, want) = (name.clone(), inside.clone(), started.clone(), want(i));
        tasks.push(tokio::spawn(async move {
            started.fetch_add(1, Ordering::AcqRel);
            let asked = Instant::now();
            let guard = match request(&client, &name, want, &opts).await {
                Ok(g) => g,
                Err(e) => {
                    return Err(format!(
                        "waiter {i} ({want:?}) after {:?}: {}",
                        asked.elapsed(),
                        error_chain(&e)
                    ));
                }
            };
            inside.enter(want, &guard);
            // Until the crowd has shown that holders can be in together,
            // a holder waits for company; after that, sections are short.
            match want {
                Want::Permit => inside.wait_for_company(|st| st.most_holders >= PERMITS).await,
                Want::Read => inside.wait_for_company(|st| st.most_readers >= 2).await,
                _ => tokio::task::yield_now().await,
            }
            inside.leave(want);
            guard
                .unlock()
                .await
                .map(|_| ())
                .map_err(|e| format!("waiter {i} ({want:?}) unlock: {}", error_chain(&e)))
        }));
    }
    // Every waiter has begun its `lock` (and, where the backend counts
    // them, stands in line) before the gate opens.
    let deadline = tokio::time::Instant::now() + kit.bound;
    while started.load(Ordering::Acquire) < waiters && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    settle_in_line(kit, gate_client, &name, gate, waiters).await;
    let opened = Instant::now();
    join_all(gate_guards.into_iter().map(must_unlock)).await;
    let results = timeout(kit.crowd_wait + kit.bound, join_all(tasks))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: {case}: the crowd did not finish within {:?}",
                kit.label(),
                kit.crowd_wait + kit.bound
            )
        });
    let took = opened.elapsed();
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|r| r.expect("waiter task panicked").err())
        .collect();
    assert!(
        failed.is_empty(),
        "{}: {case}: {} of {waiters} waiters not served, e.g. {:?}",
        kit.label(),
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    let st = inside.state();
    assert!(
        st.violations.is_empty(),
        "{}: {case}: {:?}",
        kit.label(),
        &st.violations[..st.violations.len().min(3)]
    );
    eprintln!(
        "{}: {case}: {waiters} waiters served in {took:?} ({:.0}/s), at most {} holders at once",
        kit.label(),
        waiters as f64 / took.as_secs_f64(),
        st.most_holders
    );
    drop(st);
    inside
}

/// Waits until the backend counts the crowd in line — or, where it
/// counts fewer (a backend that queues a client's waiters in-process behind
/// one server-side wait) or none, until the count has stopped moving for a
/// second — within the kit's bound.
async fn settle_in_line(kit: &Kit, client: &LockClient, name: &str, gate: Want, waiters: usize) {
    let kind = kind_of(gate);
    let deadline = tokio::time::Instant::now() + kit.bound;
    let (mut last, mut since) = (usize::MAX, tokio::time::Instant::now());
    while tokio::time::Instant::now() < deadline {
        let n = match client.backend().waiting_for(name, kind).await {
            Ok(n) => n,
            Err(LockError::Unsupported { .. }) => 0,
            Err(e) => panic!("waiting({name:?}): {}", error_chain(&e)),
        };
        if n >= waiters {
            return;
        }
        if n != last {
            (last, since) = (n, tokio::time::Instant::now());
        } else if since.elapsed() >= Duration::from_secs(1) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn kind_of(want: Want) -> LockKind {
    match want {
        Want::Lock => LockKind::Mutex,
        Want::Permit => LockKind::Permit {
            permits: PERMITS as u32,
        },
        Want::Read => LockKind::Read,
        Want::Write => LockKind::Write,
    }
}

async fn request(client: &LockClient, name: &str, want: Want, opts: &LockOptions) -> Result<LockGuard, LockError> {
    match want {
        Want::Lock => client.lock_with(name, opts).await,
        Want::Permit => client.semaphore(name, PERMITS as u32)?.acquire_with(opts).await,
        Want::Read => client.rw_lock(name)?.read_with(opts).await,
        Want::Write => client.rw_lock(name)?.write_with(opts).await,
    }
}

async fn take(client: &LockClient, name: &str, want: Want, opts: &LockOptions) -> LockGuard {
    request(client, name, want, opts)
        .await
        .unwrap_or_else(|e| panic!("{want:?} {name:?} should succeed: {}", error_chain(&e)))
}

/// A crowd on one mutex: every waiter served, one holder at a time, tokens
/// growing in grant order.
pub async fn crowd_mutex(kit: &Kit) {
    let inside = run_crowd(kit, "crowd_mutex", Want::Lock, |_| Want::Lock).await;
    let st = inside.state();
    assert_eq!(st.most_holders, 1, "one holder at a time");
    assert!(
        st.exclusive_tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens grow in grant order"
    );
}

/// A crowd on a semaphore of 3: every waiter served, never more than 3
/// permits out, and 3 out at once while holders wait for company (a
/// backend that lets one in at a time never gets there).
pub async fn crowd_semaphore(kit: &Kit) {
    let probe = kit.client().await;
    if !semaphore::supported(kit, &probe, "crowd_semaphore").await {
        return;
    }
    let inside = run_crowd(kit, "crowd_semaphore", Want::Permit, |_| Want::Permit).await;
    assert_eq!(
        inside.state().most_holders,
        PERMITS,
        "a crowd on a semaphore of {PERMITS} has {PERMITS} permits out at once"
    );
}

/// A crowd on a read-write lock, mostly readers with a writer among every
/// ten: every waiter served (no writer starved, no reader shut out),
/// readers in together, a writer alone, and a reader's token that of the
/// last writer.
pub async fn crowd_rwlock(kit: &Kit) {
    let probe = kit.client().await;
    if !rwlock::supported(kit, &probe, "crowd_rwlock").await {
        return;
    }
    let want = |i: usize| {
        if i % WRITER_EVERY == WRITER_EVERY - 1 {
            Want::Write
        } else {
            Want::Read
        }
    };
    let inside = run_crowd(kit, "crowd_rwlock", Want::Write, want).await;
    let st = inside.state();
    assert!(
        st.most_readers >= 2,
        "readers are let in together (at most {} at once)",
        st.most_readers
    );
    assert!(
        st.exclusive_tokens.windows(2).all(|w| w[0] < w[1]),
        "writers' tokens grow in grant order: {:?}",
        st.exclusive_tokens
    );
    assert!(
        st.stale_reads.is_empty(),
        "a reader carries the last writer's token: (read, last write) {:?}",
        &st.stale_reads[..st.stale_reads.len().min(3)]
    );
}
