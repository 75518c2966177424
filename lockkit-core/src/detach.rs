//! Making a backend's single attempts cancel safe.

use std::future::Future;

use tokio::sync::oneshot;

use crate::LockError;

/// Runs `work` on its own task, so a request that reached the server always
/// has its answer read, even if the caller stops waiting (a timeout, a
/// `select!`). If the caller is gone when `work` finishes, `on_orphan` gets
/// the result — e.g. to release a hold that nobody will ever use.
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
    tokio::spawn(async move {
        let result = work.await;
        if let Err(result) = tx.send(result) {
            on_orphan(result).await;
        }
    });
    rx.await
        .map_err(|e| LockError::backend(backend, "acquire attempt", None, true, e))
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
}
