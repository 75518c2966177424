//! The runtime a blocking client runs on, and [`OnRuntime`]: an async
//! object kept with it.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockkit_core::{LockError, LockGuard};

/// How long dropping a blocking guard waits for its release; past that the
/// release goes on in the background while the runtime lives.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How long the runtime's shutdown waits for its blocking tasks.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(1);

/// The `part` of the error a blocking call gets inside an async runtime.
const IN_ASYNC_PART: &str = "blocking API";

/// A multi-thread tokio runtime of one worker: the watchdog, lost signals
/// and background releases run on it while the caller's thread does its
/// own work. Shared (`Arc`) by a blocking client's clones, its guards and
/// handles; shut down when the last of them goes.
#[derive(Debug)]
pub(crate) struct Runtime {
    tokio: Option<tokio::runtime::Runtime>,
}

impl Runtime {
    pub fn start() -> Result<Arc<Self>, LockError> {
        let tokio = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .thread_name("lockkit-blocking")
            .build()
            .map_err(|e| LockError::backend("blocking", "start the runtime", None, false, e))?;
        Ok(Arc::new(Runtime { tokio: Some(tokio) }))
    }

    fn tokio(&self) -> &tokio::runtime::Runtime {
        self.tokio
            .as_ref()
            .expect("the runtime is taken only when it is dropped")
    }

    /// Runs `work` to completion on this runtime, blocking the calling
    /// thread; refused inside an async runtime (see [`refuse_in_async`]).
    pub fn block_on<T>(&self, work: impl Future<Output = Result<T, LockError>>) -> Result<T, LockError> {
        refuse_in_async()?;
        self.tokio().block_on(work)
    }

    /// Enters this runtime's context (for drops that spawn on the current
    /// runtime).
    pub fn enter(&self) -> tokio::runtime::EnterGuard<'_> {
        self.tokio().enter()
    }

    /// Spawns `work` on this runtime.
    pub fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        drop(self.tokio().spawn(work));
    }

    /// Waits up to `timeout` for any of `signals` to fire: `true` once one
    /// has. One task on this runtime waits for all of them and answers on
    /// a channel, so any thread may wait (inside an async runtime too, by
    /// blocking it). `signals` must not be empty.
    pub fn wait_lost(&self, signals: Vec<crate::LostSignal>, timeout: Duration) -> bool {
        if signals.iter().any(crate::LostSignal::is_lost) {
            return true;
        }
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.spawn(async move {
            let any = futures_util::future::select_all(signals.iter().map(|s| Box::pin(s.wait())));
            let lost = tokio::time::timeout(timeout, any).await.is_ok() || signals.iter().any(|s| s.is_lost());
            let _ = sender.send(lost);
        });
        receiver.recv().unwrap_or(false)
    }

    /// Releases a dropped guard: at once, on the calling thread (waiting at
    /// most [`RELEASE_WAIT`]); inside an async runtime, where this thread
    /// must not block, on a thread of its own that keeps this runtime alive
    /// until the release is done.
    pub fn release(self: &Arc<Self>, guard: LockGuard) {
        if refuse_in_async().is_ok() {
            // The timer is made inside the runtime. An error (logged by
            // the async guard) leaves the lease to run out.
            let unlock = async { tokio::time::timeout(RELEASE_WAIT, guard.unlock()).await };
            let _ = self.tokio().block_on(unlock);
            return;
        }
        let runtime = self.clone();
        // If no thread can be had, the closure and the guard in it are
        // dropped here: the async guard's drop releases on the caller's
        // runtime.
        let _ = std::thread::Builder::new()
            .name("lockkit-blocking-release".to_owned())
            .spawn(move || runtime.release(guard));
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        let Some(tokio) = self.tokio.take() else {
            return;
        };
        if refuse_in_async().is_ok() {
            tokio.shutdown_timeout(SHUTDOWN_WAIT);
        } else {
            // Dropped inside another runtime, a runtime that waits for its
            // threads would panic.
            tokio.shutdown_background();
        }
    }
}

/// [`LockError::InvalidConfig`] (part `blocking API`) when called inside an
/// async runtime, where `block_on` would panic and a blocking call would
/// stall the runtime's thread.
pub(crate) fn refuse_in_async() -> Result<(), LockError> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(LockError::config(
            IN_ASYNC_PART,
            "a blocking call inside an async (tokio) runtime would block the runtime's thread: \
             use the async client there (lockkit::LockClient; blocking::LockClient::as_async)",
        )),
        Err(_) => Ok(()),
    }
}

/// What a blocking call returns, made from what the async call returned.
pub(crate) trait FromAsync {
    /// The async call's value.
    type Async;
    /// Wraps `value`, with `runtime` for the objects that keep running on it.
    fn from_async(value: Self::Async, runtime: &Arc<Runtime>) -> Self;
}

impl<T: FromAsync> FromAsync for Option<T> {
    type Async = Option<T::Async>;
    fn from_async(value: Self::Async, runtime: &Arc<Runtime>) -> Self {
        value.map(|v| T::from_async(v, runtime))
    }
}

impl<T: FromAsync> FromAsync for Vec<T> {
    type Async = Vec<T::Async>;
    fn from_async(value: Self::Async, runtime: &Arc<Runtime>) -> Self {
        value.into_iter().map(|v| T::from_async(v, runtime)).collect()
    }
}

/// Values returned as they are.
macro_rules! plain_values {
    ($($t:ty),*) => {$(
        impl FromAsync for $t {
            type Async = $t;
            fn from_async(value: $t, _: &Arc<Runtime>) -> $t {
                value
            }
        }
    )*};
}

plain_values!(
    (),
    usize,
    lockkit_core::LockInfo,
    lockkit_core::Unlocked,
    lockkit_core::Leader
);

/// The blocking wrappers, each of the async object of the same name on a
/// runtime.
macro_rules! wrappers {
    ($($wrapper:ident),*) => {$(
        impl FromAsync for super::$wrapper {
            type Async = crate::$wrapper;
            fn from_async(value: crate::$wrapper, runtime: &Arc<Runtime>) -> Self {
                super::$wrapper(OnRuntime::new(value, runtime.clone()))
            }
        }
    )*};
}

wrappers!(
    LockClient, LockGuard, LostSignal, Semaphore, RwLock, MultiGuard, Election, Leadership
);

/// An async object with the runtime it runs on: dropped inside that
/// runtime's context (a backend's connections may spawn their clean-up),
/// and keeping the runtime alive while it lives.
pub(crate) struct OnRuntime<T> {
    /// `None` only once taken on the way out.
    value: Option<T>,
    runtime: Arc<Runtime>,
}

impl<T> OnRuntime<T> {
    pub fn new(value: T, runtime: Arc<Runtime>) -> Self {
        OnRuntime {
            value: Some(value),
            runtime,
        }
    }

    pub fn get(&self) -> &T {
        self.value.as_ref().expect("taken only on the way out")
    }

    pub fn get_mut(&mut self) -> &mut T {
        self.value.as_mut().expect("taken only on the way out")
    }

    /// Takes the value out, on the wrapper's way out; `None` once taken.
    pub fn take(&mut self) -> Option<T> {
        self.value.take()
    }

    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// `value` wrapped with this one's runtime.
    pub fn with<U: FromAsync>(&self, value: U::Async) -> U {
        U::from_async(value, &self.runtime)
    }

    /// The blocking form of an async method of the value: runs the future
    /// `method` makes to completion on the runtime and wraps its value.
    pub fn call<'a, F, U>(&'a self, method: impl FnOnce(&'a T) -> F) -> Result<U, LockError>
    where
        F: Future<Output = Result<U::Async, LockError>>,
        U: FromAsync,
    {
        let value = self.runtime.block_on(method(self.get()))?;
        Ok(self.with(value))
    }
}

impl<T> Drop for OnRuntime<T> {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            let _entered = self.runtime.enter();
            drop(value);
        }
    }
}

impl<T: Clone> Clone for OnRuntime<T> {
    fn clone(&self) -> Self {
        OnRuntime::new(self.get().clone(), self.runtime.clone())
    }
}

impl<T: fmt::Debug> fmt::Debug for OnRuntime<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.value {
            Some(value) => value.fmt(f),
            None => f.write_str("(released)"),
        }
    }
}

/// Blocking forms of async methods of a wrapper's [`OnRuntime`] value
/// (field `0`): each runs the async method on the runtime.
macro_rules! blocking_methods {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self $(, $arg: $ty)*) -> Result<$out, LockError> {
            self.0.call(|value| value.$name($($arg),*))
        }
    )*};
}

/// Methods that do not block, passed to a wrapper's [`OnRuntime`] value
/// (field `0`) as they are.
macro_rules! same_methods {
    ($($(#[$doc:meta])* fn $name:ident(&self $(, $arg:ident: $ty:ty)*) -> $out:ty;)*) => {$(
        $(#[$doc])*
        pub fn $name(&self $(, $arg: $ty)*) -> $out {
            self.0.get().$name($($arg),*)
        }
    )*};
}

pub(crate) use {blocking_methods, same_methods};
