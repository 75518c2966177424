//! Making a backend's single attempts cancel safe.

use std::future::Future;
use std::pin::Pin;

use crate::LockError;
use crate::backend::{AcquireRequest, Hold, ReleaseOutcome};

/// Runs `work` so that a request that reached the server always has its
/// answer read, even if the caller stops waiting (a timeout, a `select!`):
/// `work` is polled in the caller's own task (no task spawn, no hand-off
/// between threads on the way), and if the caller's future is dropped
/// before `work` finished, the rest of `work` goes on as a background task
/// whose result goes to `on_orphan` — e.g. to release a hold that nobody
/// will ever use. An answer is never left unread: `work`'s result is
/// returned in the same poll that produced it.
///
/// Backends wrap each network attempt of `try_acquire`/`acquire` in this;
/// the waiting between attempts stays in the caller's future. Never fails
/// today; the `Result` keeps room for a runtime that cannot run the work.
pub async fn detach<T, W, O, OF>(backend: &'static str, work: W, on_orphan: O) -> Result<T, LockError>
where
    T: Send + 'static,
    W: Future<Output = T> + Send + 'static,
    O: FnOnce(T) -> OF + Send + 'static,
    OF: Future<Output = ()> + Send + 'static,
{
    let mut running = Running {
        backend,
        work: Some(Box::pin(work)),
        on_orphan: Some(on_orphan),
    };
    let result = std::future::poll_fn(|cx| match running.work.as_mut() {
        Some(work) => work.as_mut().poll(cx),
        None => unreachable!("the work is only taken once it finished"),
    })
    .await;
    running.work = None; // finished and read: nothing to hand over
    Ok(result)
}

/// [`detach`] for the acquisition attempt `req`: if the
/// caller stops waiting before the answer came and the answer turns out to
/// be a hold (`token_of` gives its fencing token), `release` gives that
/// attempt's share back in the background — a hold nobody will ever use
/// must not wait for its lease to end. `release` is the backend's own
/// release of that attempt (called with the hold; it knows the attempt
/// id); a failure is logged, and the hold then ends with its lease or
/// session. `req` is read at the call: the future does not borrow it.
pub fn detach_acquisition<T, W, K, R, RF>(
    backend: &'static str,
    req: &AcquireRequest<'_>,
    work: W,
    token_of: K,
    release: R,
) -> impl Future<Output = Result<T, LockError>> + Send + use<T, W, K, R, RF>
where
    T: Send + 'static,
    W: Future<Output = T> + Send + 'static,
    K: FnOnce(&T) -> Option<u64> + Send + 'static,
    R: FnOnce(Hold) -> RF + Send + 'static,
    RF: Future<Output = Result<ReleaseOutcome, LockError>> + Send + 'static,
{
    let (name, owner, kind) = (req.name.to_owned(), req.owner.to_owned(), req.kind);
    detach(backend, work, move |out| async move {
        let Some(token) = token_of(&out) else {
            return;
        };
        let hold = Hold {
            name,
            owner,
            token,
            kind,
        };
        let name = hold.name.clone();
        match release(hold).await {
            Ok(_) => tracing::debug!(backend, lock = %name, "released the hold of a cancelled acquisition"),
            Err(error) => tracing::warn!(backend, lock = %name, %error,
                "releasing the hold of a cancelled acquisition failed; it ends with its lease or session"),
        }
    })
}

/// The work of a [`detach`] while it runs. Dropped before the work finished,
/// it moves the rest of the work, and then `on_orphan`, onto a task.
struct Running<T, O, OF>
where
    T: Send + 'static,
    O: FnOnce(T) -> OF + Send + 'static,
    OF: Future<Output = ()> + Send + 'static,
{
    backend: &'static str,
    work: Option<Pin<Box<dyn Future<Output = T> + Send>>>,
    on_orphan: Option<O>,
}

impl<T, O, OF> Drop for Running<T, O, OF>
where
    T: Send + 'static,
    O: FnOnce(T) -> OF + Send + 'static,
    OF: Future<Output = ()> + Send + 'static,
{
    fn drop(&mut self) {
        let (Some(work), Some(on_orphan)) = (self.work.take(), self.on_orphan.take()) else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { on_orphan(work.await).await });
            }
            Err(_) => tracing::warn!(
                backend = self.backend,
                "a cancelled attempt was dropped outside a tokio runtime; its lease will run out"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::LockKind;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;
    use tokio::sync::oneshot;

    #[tokio::test]
    async fn orphaned_results_are_cleaned_up() {
        let cleaned = Arc::new(AtomicBool::new(false));
        let flag = cleaned.clone();
        let (done_tx, done_rx) = oneshot::channel();
        let attempt = detach(
            "test",
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                7
            },
            move |v| async move {
                assert_eq!(v, 7);
                flag.store(true, Ordering::SeqCst);
                let _ = done_tx.send(());
            },
        );
        // The caller gives up before the work is done.
        assert!(tokio::time::timeout(Duration::from_millis(1), attempt).await.is_err());
        tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .unwrap()
            .unwrap();
        assert!(cleaned.load(Ordering::SeqCst));

        let kept = detach("test", async { 5 }, |_| async { panic!("not orphaned") }).await;
        assert_eq!(kept.unwrap(), 5);
    }

    /// A cancelled acquisition that got a hold releases it; one that got
    /// none, or whose caller waited, releases nothing.
    #[tokio::test]
    async fn a_cancelled_acquisition_releases_what_it_got() {
        let (released_tx, released_rx) = oneshot::channel();
        let req = AcquireRequest {
            name: "n",
            owner: "o",
            ttl: Duration::from_secs(1),
            attempt: "0123456789abcdef",
            fair: true,
            kind: LockKind::Mutex,
        };
        let attempt = detach_acquisition(
            "test",
            &req,
            async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some(7u64)
            },
            |got: &Option<u64>| *got,
            move |h: Hold| async move {
                let _ = released_tx.send(h.token);
                Ok(ReleaseOutcome::Released { remaining: 0 })
            },
        );
        assert!(tokio::time::timeout(Duration::from_millis(1), attempt).await.is_err());
        let token = tokio::time::timeout(Duration::from_secs(10), released_rx)
            .await
            .unwrap();
        assert_eq!(token.unwrap(), 7);

        let kept = detach_acquisition(
            "test",
            &req,
            async { Some(5u64) },
            |got: &Option<u64>| *got,
            |_| async { panic!("not orphaned") },
        )
        .await;
        assert_eq!(kept.unwrap(), Some(5));
    }

    /// The work runs in the caller's task, and a finished answer is the
    /// caller's, never the orphan handler's.
    #[tokio::test]
    async fn runs_inline_and_returns_what_finished() {
        let caller = tokio::task::try_id();
        let (ran_in, v) = detach(
            "test",
            async {
                tokio::task::yield_now().await;
                (tokio::task::try_id(), 9)
            },
            |_| async { panic!("not orphaned") },
        )
        .await
        .unwrap();
        assert_eq!(ran_in, caller, "no task of its own");
        assert_eq!(v, 9);
    }

    /// Dropped after the request went out but before the answer came: the
    /// rest of the work still runs, and its answer is cleaned up.
    #[tokio::test]
    async fn dropped_mid_request_finishes_in_the_background() {
        let (sent_tx, sent_rx) = oneshot::channel::<()>();
        let (answer_tx, answer_rx) = oneshot::channel::<u32>();
        let (done_tx, done_rx) = oneshot::channel();
        let mut attempt = Box::pin(detach(
            "test",
            async move {
                let _ = sent_tx.send(());
                answer_rx.await.unwrap()
            },
            move |v| async move {
                let _ = done_tx.send(v);
            },
        ));
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(attempt.as_mut().poll(cx).is_pending())).await;
        assert!(first, "waits for its answer");
        sent_rx.await.unwrap();
        drop(attempt);
        answer_tx.send(4).unwrap();
        let v = tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, 4);
    }
}
