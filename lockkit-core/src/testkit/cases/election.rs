//! Leader election ([`Election`](crate::Election)): one valid leader at a
//! time, epochs that grow, a leader demoted before another is elected, and
//! an observer that sees every change.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::join_all;
use tokio::time::{Instant, timeout};

use super::steps::ttl_leases;
use crate::recipes::{Leader, Leadership};
use crate::testkit::kit::{Kit, error_chain};
use crate::{Election, LockClient};

async fn campaign(election: &Election) -> Leadership {
    election
        .campaign()
        .await
        .unwrap_or_else(|e| panic!("campaign for {:?}: {}", election.name(), error_chain(&e)))
}

fn election(kit: &Kit, client: &LockClient, name: &str) -> Election {
    client
        .election(name)
        .expect("an election handle")
        .with_options(kit.long(client))
        .with_observe_interval(Duration::from_millis(20))
}

/// Two candidates: one leads, the other waits; the leader's resignation
/// elects the other with a greater epoch; `leader()` and an observer see
/// each leader in turn. A leader whose lease runs out (it stopped
/// renewing, as a paused process does) learns it before the next leader
/// is elected.
pub async fn election_one_leader(kit: &Kit) {
    let (a, b) = (kit.client().await, kit.client().await);
    let name = kit.name("election");
    let (ea, eb) = (election(kit, &a, &name), election(kit, &b, &name));
    // Where another client cannot name the leader (see
    // `Capabilities::shared_holds`) the observer's checks are left out: one
    // leader, and the hand-off.
    let mut changes = match a.capabilities().shared_holds {
        true => Some(Box::pin(eb.observe().await)),
        false => None,
    };
    if let Some(changes) = &mut changes {
        let first = timeout(kit.bound, changes.next())
            .await
            .expect("the observer's first look");
        assert_eq!(first.expect("a stream").expect("leader"), None, "nobody leads yet");
    }

    let la = campaign(&ea).await;
    assert!(eb.try_campaign().await.expect("try_campaign").is_none(), "two leaders");
    if let Some(changes) = &mut changes {
        let a_leads = Leader {
            owner: a.owner().to_owned(),
            epoch: la.epoch(),
        };
        assert_eq!(eb.leader().await.expect("leader"), Some(a_leads.clone()));
        let seen = timeout(kit.bound, changes.next())
            .await
            .expect("the observer sees the first leader")
            .expect("a stream")
            .unwrap_or_else(|e| panic!("observe: {}", error_chain(&e)));
        assert_eq!(seen, Some(a_leads), "the observer's next change");
    }
    let waiting = tokio::spawn(async move { campaign(&eb).await });
    let epoch_a = la.epoch();
    la.resign().await.expect("resign");
    let lb = timeout(kit.bound, waiting)
        .await
        .expect("the waiting candidate is elected")
        .expect("campaign task");
    assert!(lb.epoch() > epoch_a, "epochs grow: {} after {epoch_a}", lb.epoch());
    assert_eq!(lb.owner(), b.owner());

    // Then (perhaps nobody, then) B.
    if let Some(changes) = &mut changes {
        let mut leaders = Vec::new();
        while leaders.last().map(|l: &Leader| l.epoch) != Some(lb.epoch()) {
            let next = timeout(kit.bound, changes.next())
                .await
                .unwrap_or_else(|_| panic!("the observer missed a change; saw {leaders:?}"))
                .expect("a stream");
            if let Some(leader) = next.unwrap_or_else(|e| panic!("observe: {}", error_chain(&e))) {
                leaders.push(leader);
            }
        }
        let owners: Vec<&str> = leaders.iter().map(|l| l.owner.as_str()).collect();
        assert_eq!(owners, [b.owner()], "the next leader: {leaders:?}");
    }
    lb.resign().await.expect("resign");

    if !ttl_leases(&a) {
        return;
    }
    // A leader that stops renewing: demoted before B is elected.
    let paused = a
        .election(&name)
        .expect("election")
        .with_options(kit.short(&a))
        .campaign()
        .await
        .expect("campaign");
    let demoted = {
        let signal = paused.lost_signal();
        tokio::spawn(async move {
            signal.wait().await;
            Instant::now()
        })
    };
    let eb = election(kit, &b, &name);
    let elected = tokio::spawn(async move {
        let l = campaign(&eb).await;
        (Instant::now(), l)
    });
    let (elected_at, lb) = timeout(kit.bound, elected)
        .await
        .expect("elected once the paused leader's lease ran out")
        .expect("task");
    let demoted_at = timeout(kit.bound, demoted).await.expect("demoted").expect("task");
    assert!(
        demoted_at <= elected_at,
        "the old leader learned of its demotion {:?} after the new one was elected",
        demoted_at - elected_at
    );
    assert!(lb.epoch() > paused.epoch());
    drop(paused);
    lb.resign().await.expect("resign");
}

/// Many candidates campaigning in turns: never two valid leaderships at
/// once, each epoch greater than the one before.
pub async fn election_never_two_leaders(kit: &Kit) {
    let name = kit.name("election_many");
    let clients = join_all((0..4).map(|_| kit.client())).await;
    let leading = Arc::new(AtomicUsize::new(0));
    let epochs = Arc::new(std::sync::Mutex::new(Vec::new()));
    let rounds = kit.stress_iterations.clamp(1, 10);
    let runs = clients.into_iter().map(|client| {
        let (leading, epochs) = (leading.clone(), epochs.clone());
        let election = election(kit, &client, &name);
        tokio::spawn(async move {
            for _ in 0..rounds {
                let l = campaign(&election).await;
                assert_eq!(leading.fetch_add(1, Ordering::SeqCst), 0, "two valid leaders at once");
                epochs.lock().unwrap().push(l.epoch());
                tokio::task::yield_now().await;
                assert!(!l.is_lost(), "a leadership lost while leading briefly");
                leading.fetch_sub(1, Ordering::SeqCst);
                l.resign().await.expect("resign");
            }
        })
    });
    for r in timeout(kit.bound * 4, join_all(runs))
        .await
        .expect("the campaigns finish")
    {
        r.expect("a candidate panicked");
    }
    let epochs = epochs.lock().unwrap().clone();
    assert_eq!(epochs.len(), 4 * rounds);
    assert!(
        epochs.windows(2).all(|w| w[0] < w[1]),
        "epochs grow leadership after leadership: {epochs:?}"
    );
}

/// The next leader an observer reports, skipping `None`s (nobody leads
/// between two leaderships); it must come within the kit's bound.
async fn next_leader<S>(kit: &Kit, changes: &mut S, what: &str) -> Leader
where
    S: futures_util::Stream<Item = Result<Option<Leader>, crate::LockError>> + Unpin,
{
    loop {
        let next = timeout(kit.bound, changes.next())
            .await
            .unwrap_or_else(|_| panic!("the observer did not see {what} within {:?}", kit.bound))
            .expect("a stream");
        if let Some(leader) = next.unwrap_or_else(|e| panic!("observe: {}", error_chain(&e))) {
            return leader;
        }
    }
}

/// An observer sees every leadership that lasts until it is seen, in
/// epoch order, each once: leaders that resign, a hand-off to a waiting
/// candidate, and (TTL leases) a leader whose lease ran out. Where the
/// backend pushes changes ([`crate::Capabilities::pushes_changes`]) the
/// observer's own interval is an hour: what it sees, it was told.
pub async fn election_observe_sees_every_change(kit: &Kit) {
    let clients = join_all((0..3).map(|_| kit.client())).await;
    let name = kit.name("election_observe");
    if !clients[0].capabilities().shared_holds {
        eprintln!(
            "{}: holds are not shared (Capabilities::shared_holds): an observer cannot name another client's leader",
            kit.label()
        );
        return;
    }
    let pushed = clients[0].backend().capabilities().pushes_changes;
    let interval = match pushed {
        true => Duration::from_secs(3600),
        false => crate::recipes::DEFAULT_OBSERVE_INTERVAL,
    };
    let observer = clients[0]
        .election(&name)
        .expect("election")
        .with_observe_interval(interval);
    let mut changes = Box::pin(observer.observe().await);
    let first = timeout(kit.bound, changes.next()).await.expect("the first look");
    assert_eq!(first.expect("a stream").expect("leader"), None, "nobody leads yet");
    let mut seen = Vec::new();

    // Leaders one after another, each resigning once it was seen.
    for round in 0..4 {
        let client = &clients[round % 3];
        let leadership = campaign(&election(kit, client, &name)).await;
        let leader = next_leader(kit, &mut changes, &format!("leader {round}")).await;
        assert_eq!(
            leader,
            Leader {
                owner: client.owner().to_owned(),
                epoch: leadership.epoch()
            },
            "round {round}: the observer saw {seen:?} before"
        );
        seen.push(leader);
        leadership.resign().await.expect("resign");
    }

    // A hand-off: the next candidate waits while one leads.
    let leading = campaign(&election(kit, &clients[1], &name)).await;
    let leader = next_leader(kit, &mut changes, "the leader before a hand-off").await;
    assert_eq!(leader.epoch, leading.epoch());
    seen.push(leader);
    let waiting = {
        let e = election(kit, &clients[2], &name);
        tokio::spawn(async move { campaign(&e).await })
    };
    while clients[1].backend().waiting(&name).await.unwrap_or(1) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    leading.resign().await.expect("resign");
    let next = timeout(kit.bound, waiting).await.expect("the hand-off").expect("task");
    let leader = next_leader(kit, &mut changes, "the leader after a hand-off").await;
    assert_eq!(
        leader,
        Leader {
            owner: clients[2].owner().to_owned(),
            epoch: next.epoch()
        }
    );
    seen.push(leader);
    next.resign().await.expect("resign");
    assert!(
        seen.windows(2).all(|w| w[0].epoch < w[1].epoch),
        "epochs grow in what the observer saw: {seen:?}"
    );

    if !ttl_leases(&clients[0]) {
        return;
    }
    // A leader whose lease runs out (it stopped renewing): the observer
    // sees nobody lead, without anybody releasing.
    let lapsing = clients[1]
        .election(&name)
        .expect("election")
        .with_options(kit.short(&clients[1]))
        .campaign()
        .await
        .expect("campaign");
    let leader = next_leader(kit, &mut changes, "the leader whose lease runs out").await;
    assert_eq!(leader.epoch, lapsing.epoch());
    let next = timeout(kit.bound, changes.next())
        .await
        .expect("the observer sees the lease run out")
        .expect("a stream")
        .expect("leader");
    assert_eq!(next, None, "nobody leads once the lease ran out");
    drop(lapsing);
}
