//! Making a backend's single attempts cancel safe.

use std::future::Future;

use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

use crate::LockError;

/// Runs `work` on its own task, so a request that reached the server always
/// has its answer read, even if the caller stops waiting (a timeout, a
/// `select!`). If the caller is gone when `work` finishes — or goes away
/// after the answer arrived but before it read it — `on_orphan` gets the
/// result, e.g. to release a hold that nobody will ever use.
///
/// Backends wrap each network attempt of `try_acquire`/`acquire` in this; the
/// waiting between attempts stays in the caller's future.
pub async fn detach<T, W, O, OF>(backend: &'static str, work: W, on_orphan: O) -> Result<T, LockError>
where
    T: Send + 'static,
    W: Future<Output = T> + Send + 'static,
    O: FnOnce(T) -> OF + Send + 'static,
    OF: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    let handler: Handler<T> = Box::new(move |v| Box::pin(on_orphan(v)));
    let orphan = Arc::new(Mutex::new(Some(handler)));
    let task_orphan = orphan.clone();
    tokio::spawn(async move {
        let result = work.await;
        if let Err(result) = tx.send(result) {
            let handler = task_orphan.lock().unwrap_or_else(|e| e.into_inner()).take();
            if let Some(handler) = handler {
                handler(result).await;
            }
        }
    });
    let mut receiving = Receiving { rx: Some(rx), orphan };
    let rx = receiving.rx.as_mut().expect("set above");
    let result = rx.await;
    receiving.rx = None; // read: nothing left to clean up
    result.map_err(|e| LockError::backend(backend, "acquire attempt", None, true, e))
}

/// The caller's side of a detached attempt. Dropped before the answer was
/// read, it closes the channel and hands an answer that already arrived to
/// the orphan handler; one that arrives later is handled by the task.
struct Receiving<T: Send + 'static> {
    rx: Option<oneshot::Receiver<T>>,
    orphan: Arc<Mutex<Option<Handler<T>>>>,
}

/// The orphan handler, type-erased so both sides can hold it.
type Handler<T> = Box<dyn FnOnce(T) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send>;

impl<T: Send + 'static> Drop for Receiving<T> {
    fn drop(&mut self) {
        let Some(mut rx) = self.rx.take() else { return };
        rx.close();
        let Ok(result) = rx.try_recv() else { return };
        let handler = self.orphan.lock().unwrap_or_else(|e| e.into_inner()).take();
        match (handler, tokio::runtime::Handle::try_current()) {
            (Some(handler), Ok(rt)) => {
                rt.spawn(handler(result));
            }
            _ => tracing::warn!("a cancelled attempt's result could not be cleaned up; its lease will run out"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

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

    /// The answer arrived while the caller was still there, but the caller
    /// was dropped before reading it: it must still be cleaned up.
    #[tokio::test]
    async fn an_answer_dropped_unread_is_cleaned_up() {
        let (done_tx, done_rx) = oneshot::channel();
        let mut attempt = Box::pin(detach("test", async { 9 }, move |v| async move {
            let _ = done_tx.send(v);
        }));
        // Poll once: the work is spawned; then give it time to answer.
        let first = std::future::poll_fn(|cx| std::task::Poll::Ready(attempt.as_mut().poll(cx).is_pending())).await;
        assert!(first, "the answer cannot be there before the task ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
        drop(attempt);
        let v = tokio::time::timeout(Duration::from_secs(10), done_rx)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(v, 9);
        let kept: Result<u32, _> = detach("test", async { 5 }, |_| async { panic!("not orphaned") }).await;
        assert_eq!(kept.unwrap(), 5);
    }
}
