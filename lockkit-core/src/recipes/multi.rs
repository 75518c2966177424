//! [`MultiGuard`]: several names locked together, all or nothing.

use std::time::{Duration, Instant};

use futures_util::future::select_all;

use crate::error::LostReason;
use crate::{LockClient, LockError, LockGuard, LockOptions};

/// Several names held together: what [`LockClient::lock_all`] returns.
///
/// One guard, one lost signal: the set is lost as soon as any member is.
/// Each member keeps its own fencing token ([`token`](Self::token)).
/// Dropping it releases every member (in the background, as a dropped
/// [`LockGuard`] does).
#[derive(Debug)]
#[must_use = "dropping a multi-guard releases every lock in it"]
pub struct MultiGuard {
    /// In the order taken: the names' byte order.
    guards: Vec<LockGuard>,
}

impl MultiGuard {
    /// The names held, in the order they were taken (byte order).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.guards.iter().map(LockGuard::name)
    }

    /// The members' guards, in the order taken.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fencing token of member `name` (`None`: not in the set).
    pub fn token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Whether any member is lost.
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// The first lost member and why, once one is.
    pub fn lost_reason(&self) -> Option<(&str, LostReason)> {
        self.guards.iter().find_map(|g| g.lost_reason().map(|r| (g.name(), r)))
    }

    /// Resolves when any member is lost (never, while all stay held).
    /// Cancel safe.
    pub async fn lost(&self) {
        let each = self.guards.iter().map(|g| Box::pin(g.lost()));
        let _ = select_all(each).await;
    }

    /// Releases every member (in the reverse order of taking), each even
    /// when an earlier one fails; the first failure is returned.
    pub async fn unlock(self) -> Result<(), LockError> {
        let mut first = None;
        for guard in self.guards.into_iter().rev() {
            if let Err(e) = guard.unlock().await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// The members' guards, to release one by one.
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }
}

/// The names to take, in the one order every client takes them in (byte
/// order, each once): two clients locking overlapping sets never each
/// hold what the other waits for.
fn canonical<'a>(names: &[&'a str]) -> Result<Vec<&'a str>, LockError> {
    if names.is_empty() {
        return Err(LockError::InvalidConfig {
            part: "lock_all".to_owned(),
            reason: "no names to lock".to_owned(),
        });
    }
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted)
}

/// Gives back what an incomplete set took (the reverse order).
async fn release_all(taken: Vec<LockGuard>) {
    for guard in taken.into_iter().rev() {
        if let Err(error) = guard.unlock().await {
            tracing::debug!(%error, "lock_all: releasing a member of an incomplete set failed");
        }
    }
}

impl LockClient {
    /// Locks every name in `names`, all or nothing, within one wait bound
    /// (the default options' wait for the whole set), taking them in byte
    /// order so that clients locking overlapping sets never deadlock.
    /// Duplicates count once. On failure (the bound ran out: a
    /// [`LockError::WaitTimeout`] naming the member waited for) the members
    /// already taken are released before it returns.
    ///
    /// Cancel safe: a dropped call releases what it took.
    pub async fn lock_all(&self, names: &[&str]) -> Result<MultiGuard, LockError> {
        self.lock_all_with(names, &self.options()).await
    }

    /// [`lock_all`](Self::lock_all) with `options` (their wait bounds the
    /// whole set; ttl and auto-extend apply to every member).
    pub async fn lock_all_with(&self, names: &[&str], options: &LockOptions) -> Result<MultiGuard, LockError> {
        let names = canonical(names)?;
        options.validate()?;
        let deadline = options.wait_value().map(|w| Instant::now() + w);
        let mut taken = Vec::with_capacity(names.len());
        for name in names {
            let mut member = options.clone();
            if let Some(deadline) = deadline {
                member = member.wait(deadline.saturating_duration_since(Instant::now()));
            }
            match self.lock_with(name, &member).await {
                Ok(guard) => taken.push(guard),
                Err(e) => {
                    release_all(taken).await;
                    return Err(match e {
                        LockError::WaitTimeout { backend, name, .. } => LockError::WaitTimeout {
                            backend,
                            name,
                            waited: options.wait_value().unwrap_or(Duration::ZERO),
                        },
                        e => e,
                    });
                }
            }
        }
        Ok(MultiGuard { guards: taken })
    }

    /// Locks every name in `names` if none is held by another owner; never
    /// waits. `Ok(None)` (nothing held) when one is busy.
    pub async fn try_lock_all(&self, names: &[&str]) -> Result<Option<MultiGuard>, LockError> {
        let names = canonical(names)?;
        let options = self.options();
        let mut taken = Vec::with_capacity(names.len());
        for name in names {
            match self.try_lock_with(name, &options).await {
                Ok(Some(guard)) => taken.push(guard),
                Ok(None) => {
                    release_all(taken).await;
                    return Ok(None);
                }
                Err(e) => {
                    release_all(taken).await;
                    return Err(e);
                }
            }
        }
        Ok(Some(MultiGuard { guards: taken }))
    }
}
