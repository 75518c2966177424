//! One name, one lock ([the contract](crate::contract#one-name-one-lock)):
//! while a name is held as one kind — a mutex, a semaphore's permits, a
//! read-write lock's read or write holds — a request of another kind is
//! busy (`try_*`), waits (`lock`, granted once those holds are gone) or
//! times out, and `inspect` names the kind that holds it
//! ([`LockInfo::kind`](crate::LockInfo::kind)).
//!
//! The cases take the kinds the backend declares
//! ([`Capabilities::semaphores`](crate::Capabilities::semaphores),
//! [`rw_locks`](crate::Capabilities::rw_locks)); on a backend with the
//! mutex alone they check that the other kinds of a held name say
//! [`LockError::Unsupported`] and leave the mutex's hold as it was.

use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use tokio::time::timeout;

use super::steps::must_unlock;
use crate::backend::LockKind;
use crate::testkit::kit::{Kit, error_chain};
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// The semaphore of these cases.
const PERMIT: LockKind = LockKind::Permit { permits: 2 };

/// The kinds `client`'s backend declares: the mutex, and a permit, a read
/// and a write hold where it has them.
fn kinds(client: &LockClient) -> Vec<LockKind> {
    let caps = client.capabilities();
    let mut kinds = vec![LockKind::Mutex];
    if caps.semaphores {
        kinds.push(PERMIT);
    }
    if caps.rw_locks {
        kinds.extend([LockKind::Read, LockKind::Write]);
    }
    kinds
}

/// One acquisition of `kind` on `name`: `wait` as `lock` does (a timeout
/// is `Ok(None)`), else as `try_lock` does.
pub(super) async fn take(
    client: &LockClient,
    name: &str,
    kind: LockKind,
    opts: &LockOptions,
    wait: bool,
) -> Result<Option<LockGuard>, LockError> {
    if wait {
        match client.acquire_waiting(name, kind, opts).await {
            Err(LockError::WaitTimeout { .. }) => Ok(None),
            other => other.map(Some),
        }
    } else {
        client.acquire(name, kind, opts, true).await
    }
}

async fn must_take(client: &LockClient, name: &str, kind: LockKind, opts: &LockOptions) -> LockGuard {
    take(client, name, kind, opts, true)
        .await
        .unwrap_or_else(|e| panic!("{} of {name:?}: {}", kind.as_str(), error_chain(&e)))
        .unwrap_or_else(|| panic!("{} of the free name {name:?} timed out", kind.as_str()))
}

/// Asserts that `client` sees `name` held as `kind` by `owner` (owner and
/// kind left out where holds are not shared: the backend shows only that
/// the name is held).
async fn assert_held_as(client: &LockClient, name: &str, kind: LockKind, owner: &str) {
    let info = client
        .inspect(name)
        .await
        .unwrap_or_else(|e| panic!("inspect {name:?}: {}", error_chain(&e)))
        .unwrap_or_else(|| panic!("{name:?} is held as a {}, inspect says free", kind.as_str()));
    if client.capabilities().shared_holds {
        assert_eq!((info.kind, info.owner.as_str()), (kind, owner), "inspect {name:?}");
    }
}

/// A name held as each kind refuses every other: their tries are busy
/// (the holder's own too), their `lock` times out within its bound,
/// `inspect` names the kind that holds it; a `lock` of another kind that
/// waits is granted once the hold is given back, and then holds the name
/// alone in its turn.
pub async fn one_name_one_lock(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let kinds = kinds(&a);
    if kinds.len() == 1 {
        return mutex_only(kit, &a, &b).await;
    }
    for &held in &kinds {
        let name = kit.name("one_name_one_lock");
        let guard = must_take(&a, &name, held, &kit.long(&a)).await;
        assert_eq!(guard.kind(), held);
        let others: Vec<LockKind> = kinds.iter().copied().filter(|k| !k.same_lock(held)).collect();
        for &other in &others {
            let tried = take(&b, &name, other, &kit.long(&b), false).await;
            let tried = tried.unwrap_or_else(|e| panic!("try {} of {name:?}: {}", other.as_str(), error_chain(&e)));
            assert!(
                tried.is_none(),
                "{}: a {} was granted on {name:?} held as a {}",
                kit.label(),
                other.as_str(),
                held.as_str()
            );
            assert_held_as(&b, &name, held, a.owner()).await;
            let own = take(&a, &name, other, &kit.long(&a), false).await.unwrap();
            assert!(
                own.is_none(),
                "the {} holder's own {} was granted",
                held.as_str(),
                other.as_str()
            );
        }
        let brief = b.options().wait(kit.ttl / 4);
        let timed_out = take(&b, &name, others[0], &brief, true).await.unwrap();
        assert!(
            timed_out.is_none(),
            "a {} waited past a {} hold",
            others[0].as_str(),
            held.as_str()
        );
        hand_over(kit, (&a, guard), (&b, others[0]), &name).await;
    }
}

/// `b` waits for a hold of `next` on `name`, which `a` holds with `guard`;
/// `a` lets go; `b` is granted and holds the name alone as `next`.
async fn hand_over(kit: &Kit, (a, guard): (&LockClient, LockGuard), (b, next): (&LockClient, LockKind), name: &str) {
    let held = guard.kind();
    let waiter = {
        let (b, name, opts) = (b.clone(), name.to_owned(), kit.long(b));
        tokio::spawn(async move { take(&b, &name, next, &opts, true).await })
    };
    if a.capabilities().fair {
        super::steps::until_waiting(kit, a, name, next, 1).await;
    }
    assert!(
        !waiter.is_finished(),
        "a {} was let in beside a {}",
        next.as_str(),
        held.as_str()
    );
    must_unlock(guard).await;
    let granted = timeout(kit.bound, waiter)
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{}: a {} waiting on {name:?} was not granted within {:?} of the {} hold's release",
                kit.label(),
                next.as_str(),
                kit.bound,
                held.as_str()
            )
        })
        .expect("the waiting task")
        .unwrap_or_else(|e| panic!("{} of {name:?}: {}", next.as_str(), error_chain(&e)))
        .unwrap_or_else(|| panic!("{} of {name:?} timed out", next.as_str()));
    assert_eq!(granted.kind(), next);
    let back = take(a, name, held, &kit.long(a), false).await.unwrap();
    assert!(
        back.is_none(),
        "a {} came back beside a {}",
        held.as_str(),
        next.as_str()
    );
    assert_held_as(a, name, next, b.owner()).await;
    must_unlock(granted).await;
    let free = take(a, name, held, &kit.long(a), false).await.unwrap();
    must_unlock(free.unwrap_or_else(|| panic!("{name:?} is not free after every hold went"))).await;
}

/// A backend with the mutex alone: the other kinds of a held name are
/// refused as unsupported, and the mutex's hold stands.
async fn mutex_only(kit: &Kit, a: &LockClient, b: &LockClient) {
    let name = kit.name("one_name_one_lock");
    let guard = must_take(a, &name, LockKind::Mutex, &kit.long(a)).await;
    for other in [PERMIT, LockKind::Read, LockKind::Write] {
        match take(b, &name, other, &kit.long(b), false).await {
            Err(LockError::Unsupported { .. }) => {}
            got => panic!("a backend without {} must say Unsupported, got {got:?}", other.family()),
        }
    }
    assert_held_as(b, &name, LockKind::Mutex, a.owner()).await;
    eprintln!("{}: one_name_one_lock: the mutex is the only kind", kit.label());
    must_unlock(guard).await;
}

/// Who is inside the name now: the kind and how many.
#[derive(Default)]
struct Inside {
    now: Mutex<(Option<LockKind>, usize)>,
    violations: Mutex<Vec<String>>,
}

impl Inside {
    fn enter(&self, kind: LockKind) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        let (inside, n) = *now;
        let bound = match kind {
            LockKind::Permit { permits } => permits as usize,
            LockKind::Read => usize::MAX,
            _ => 1,
        };
        let together = inside.is_none_or(|k| k == kind || (k.same_lock(kind) && kind == LockKind::Read));
        if n > 0 && (!together || n + 1 > bound) {
            let mut v = self.violations.lock().unwrap_or_else(|e| e.into_inner());
            v.push(format!("a {} granted beside {n} {:?}", kind.as_str(), inside));
        }
        *now = (Some(kind), n + 1);
    }

    fn leave(&self) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        now.1 -= 1;
        if now.1 == 0 {
            now.0 = None;
        }
    }
}

/// A crowd of every kind the backend has on one name (the kit's crowd
/// size, 200 by default), queued behind a mutex: every waiter is served,
/// and no two kinds ever hold the name at once (nor more than a kind
/// allows: one mutex, one writer, two permits).
pub async fn crowd_one_name(kit: &Kit) {
    let clients = join_all((0..kit.crowd_clients).map(|_| kit.client())).await;
    let kinds = kinds(&clients[0]);
    let name = kit.name("crowd_one_name");
    let gate = must_take(&clients[0], &name, LockKind::Mutex, &kit.long(&clients[0])).await;
    let inside = Arc::new(Inside::default());
    let n = kit.crowd_clients * kit.crowd_per_client;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let client = clients[i % clients.len()].with_new_owner();
            let kind = kinds[i % kinds.len()];
            let (name, inside) = (name.clone(), inside.clone());
            let opts = client
                .options()
                .ttl(std::time::Duration::from_secs(60))
                .wait(kit.crowd_wait);
            tokio::spawn(async move {
                let guard = take(&client, &name, kind, &opts, true).await?;
                let Some(guard) = guard else { return Ok(false) };
                inside.enter(kind);
                tokio::task::yield_now().await;
                inside.leave();
                guard.unlock().await.map(|_| true)
            })
        })
        .collect();
    settle(kit, &clients[0], &name, &kinds, n).await;
    must_unlock(gate).await;
    let mut served = 0;
    for (i, t) in tasks.into_iter().enumerate() {
        let kind = kinds[i % kinds.len()].as_str();
        match t.await.expect("a crowd task") {
            Ok(true) => served += 1,
            Ok(false) => panic!(
                "{}: waiter {i} ({kind}) not served within {:?}",
                kit.label(),
                kit.crowd_wait
            ),
            Err(e) => panic!("{}: waiter {i} ({kind}): {}", kit.label(), error_chain(&e)),
        }
    }
    let violations = inside.violations.lock().unwrap_or_else(|e| e.into_inner()).clone();
    assert!(violations.is_empty(), "{}: {violations:?}", kit.label());
    assert_eq!(served, n, "every waiter served");
}

/// Waits until the backend counts `n` waiters of `kinds` on `name` — or,
/// where it counts fewer or none, until the count has stopped moving for a
/// second — within the kit's bound: the crowd stands in line before the
/// gate opens.
async fn settle(kit: &Kit, client: &LockClient, name: &str, kinds: &[LockKind], n: usize) {
    let deadline = tokio::time::Instant::now() + kit.bound;
    let (mut last, mut since) = (usize::MAX, tokio::time::Instant::now());
    while tokio::time::Instant::now() < deadline {
        let mut waiting = 0;
        for kind in kinds.iter().filter(|k| **k != LockKind::Read) {
            waiting += match client.backend().waiting_for(name, *kind).await {
                Ok(w) => w,
                Err(LockError::Unsupported { .. }) => 0,
                Err(e) => panic!("waiting({name:?}): {}", error_chain(&e)),
            };
        }
        if waiting >= n {
            return;
        }
        if waiting != last {
            (last, since) = (waiting, tokio::time::Instant::now());
        } else if since.elapsed() >= std::time::Duration::from_secs(1) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
