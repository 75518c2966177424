//! Making a backend's single attempts cancel safe.

use std::future::Future;
use std::pin::Pin;

use crate::LockError;

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
