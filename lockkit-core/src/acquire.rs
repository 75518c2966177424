//! One acquisition of any kind, for a client's `lock` and `try_lock` and
//! for a guard's downgrade: the checks, the backend call, the take-back of
//! a failed attempt and the registration with the watchdog; and what a
//! client's clones and its guards share.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::backend::{AcquireRequest, Hold, Lease, LockBackend, LockKind, TryAcquire};
use crate::error::LockError;
use crate::held::HeldLock;
use crate::name::{new_attempt_id, validate_name};
use crate::options::LockOptions;
use crate::telemetry;
use crate::watchdog::Watchdog;

/// What a client's clones and its guards share: the backend, the default
/// options and the watchdog (stopped when the last of them goes).
pub(crate) struct Shared {
    pub(crate) backend: Arc<dyn LockBackend>,
    pub(crate) defaults: LockOptions,
    pub(crate) watchdog: Watchdog,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.watchdog.stop();
    }
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("backend", &self.backend)
            .field("defaults", &self.defaults)
            .finish()
    }
}

/// A granted acquisition registered with the watchdog: what a guard is
/// made of.
pub(crate) struct Granted {
    pub(crate) held: Arc<HeldLock>,
    /// The owner's hold count right after this acquisition.
    pub(crate) hold_count: u32,
    /// The attempt whose share of the hold the guard releases.
    pub(crate) attempt: String,
}

impl Shared {
    /// One `lock`/`try_lock` (`no_wait`) of any kind, for `owner` unless
    /// `options` name another.
    pub(crate) async fn acquire(
        &self,
        owner: &str,
        name: &str,
        kind: LockKind,
        options: &LockOptions,
        no_wait: bool,
    ) -> Result<Option<Granted>, LockError> {
        validate_name(name)?;
        options.validate()?;
        let owner = options.owner_value().unwrap_or(owner);
        let backend = &self.backend;
        if !backend.capabilities().supports(kind) {
            return Err(LockError::Unsupported {
                backend: backend.name(),
                operation: kind.family(),
            });
        }
        let attempt = new_attempt_id();
        let req = AcquireRequest {
            name,
            owner,
            ttl: options.ttl_value(),
            attempt: &attempt,
            fair: options.fair_value(),
            kind,
        };
        let wait = if no_wait {
            Some(Duration::ZERO)
        } else {
            options.wait_value()
        };
        let span = tracing::debug_span!("lockkit.acquire", backend = backend.name(), lock = %name, kind = kind.as_str(), %owner, ?wait);
        let kind = backend.name();
        async {
            let started = Instant::now();
            let lease = if wait == Some(Duration::ZERO) {
                backend.try_acquire(&req).await.map(|r| match r {
                    TryAcquire::Acquired(lease) => Some(lease),
                    TryAcquire::Busy { .. } => None,
                })
            } else {
                backend.acquire(&req, wait).await
            };
            let lease = match lease {
                Ok(lease) => lease,
                Err(error) => {
                    tracing::debug!(%error, "acquire failed");
                    telemetry::acquire_failed(kind);
                    if error.is_retryable() {
                        // It may have been granted unseen: take it back.
                        let (name, owner) = (name.to_owned(), owner.to_owned());
                        let undo = crate::undo::undo_failed_attempt(backend.clone(), name, owner, req.kind, attempt.clone(), req.ttl);
                        undo.await;
                    }
                    return Err(error);
                }
            };
            let Some(lease) = lease else {
                tracing::debug!(waited = ?started.elapsed(), "not acquired");
                telemetry::refused(kind, !no_wait);
                return Ok(None);
            };
            tracing::debug!(token = lease.token, hold_count = lease.hold_count, waited = ?started.elapsed(), "acquired");
            telemetry::acquired(kind, started.elapsed());
            Ok(Some(self.register(&req, lease, options.auto_extend_value(), started)))
        }
        .instrument(span)
        .await
    }

    /// Registers a granted lease with the watchdog.
    fn register(&self, req: &AcquireRequest<'_>, lease: Lease, auto_extend: bool, started: Instant) -> Granted {
        let hold = Hold {
            name: req.name.to_owned(),
            owner: req.owner.to_owned(),
            token: lease.token,
            kind: req.kind,
        };
        // The renewal schedule counts from the start of the call: an upper
        // bound on when the lease began.
        let held = self.watchdog.register(hold, &lease, req.ttl, auto_extend, started);
        Granted {
            held,
            hold_count: lease.hold_count,
            attempt: req.attempt.to_owned(),
        }
    }
}
