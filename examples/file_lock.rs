//! A lock backend in a directory, written from `docs/writing-a-backend.md`:
//! each lock is a line in a file, the directory is made atomic across
//! processes by an advisory lock (`flock`) on one file, and the conformance
//! kit runs against it below.
//!
//! ```sh
//! cargo run --example file_lock    # lock, print the token, unlock, on a temp dir (filelock:///DIR)
//! cargo test --example file_lock   # the conformance kit
//! ```
//!
//! The layout of a store directory:
//!
//! - `.lock` — the advisory lock every operation holds while it reads and
//!   writes (so one operation at a time, across threads and processes);
//! - `tokens` — the last fencing token handed out, in decimal;
//! - `locks/<hash>` — the held names whose name hashes to `<hash>`, one line
//!   each: `<name hex> <owner hex> <token> <expiry> <attempt>,<attempt>…`,
//!   the expiry in wall-clock milliseconds since the Unix epoch and one
//!   attempt id per share of the hold (the hold count is their number).
//!
//! Expiry is wall-clock time, so every process using one store must share a
//! clock: one host, not a network file system. A file store cannot notify a
//! waiter, so `acquire` polls with [`Backoff`].

use std::fs::{self, File, OpenOptions};
use std::future::Future;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lockkit_core::raw::{
    AcquireRequest, BackendSchemes, Backoff, ConnectUrl, ExtendOutcome, Hold, Lease, LockBackend, ReleaseOutcome,
    TryAcquire, acquire_with_backoff, async_trait, check_attempt_id, detach_acquisition, ttl_millis, valid_until,
};
use lockkit_core::{Capabilities, LockClient, LockError, LockInfo, LockOptions};

/// The backend's name in errors, traces and metrics.
const KIND: &str = "file";

/// The scheme this backend serves: `filelock:///DIR` (register it with
/// `lockkit::register_backend`, then `lockkit::connect` reaches it).
pub const SCHEMES: BackendSchemes = BackendSchemes {
    names: &["filelock"],
    connect: |url: &mut ConnectUrl| {
        let dir = url.url.to_file_path();
        Box::pin(async move {
            let dir = dir.map_err(|()| LockError::config("url path", "filelock:///DIR takes an absolute path"))?;
            Ok(Arc::new(FileLockBackend::open(dir)?) as Arc<dyn LockBackend>)
        })
    },
};

/// A lock store in a directory, shared by every process that opens it.
#[derive(Debug, Clone)]
pub struct FileLockBackend {
    store: Arc<Store>,
}

impl FileLockBackend {
    /// Opens (and creates, if need be) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, LockError> {
        let root = dir.as_ref().to_path_buf();
        fs::create_dir_all(root.join("locks")).map_err(|e| io_error("open", None, e))?;
        Ok(FileLockBackend {
            store: Arc::new(Store { root }),
        })
    }

    /// One acquisition attempt, cancel safe: the file work runs through
    /// [`detach_acquisition`], which releases a hold granted to a caller
    /// who stopped waiting (only this attempt's share of it).
    fn attempt(&self, req: &AcquireRequest<'_>) -> impl Future<Output = Result<TryAcquire, LockError>> + use<> {
        let store = self.store.clone();
        let (name, owner, attempt) = (req.name.to_owned(), req.owner.to_owned(), req.attempt.to_owned());
        let ttl_ms = ttl_millis(req.ttl);
        let checked = check_attempt_id(&attempt);
        let sent_at = Instant::now();
        let work = {
            let (store, name, owner, attempt) = (store.clone(), name.clone(), owner.clone(), attempt.clone());
            async move {
                let op_name = name.clone();
                let op = move |s: &Store, now| s.acquire(&name, &owner, &attempt, ttl_ms, now);
                store.run("acquire", Some(&op_name), op).await
            }
        };
        // The fencing token of the answer, if it is a hold.
        let token_of = |answer: &Result<Granted, LockError>| match answer {
            Ok(Granted::Yes { token, .. }) => Some(*token),
            _ => None,
        };
        let release = move |hold: Hold| async move {
            let op_name = hold.name.clone();
            let op = move |s: &Store, now| s.release(&hold, &attempt, now);
            store.run("release", Some(&op_name), op).await
        };
        // Nothing runs before the future is awaited.
        let detached = detach_acquisition(KIND, req, work, token_of, release);
        async move {
            checked?;
            Ok(match detached.await?? {
                Granted::Yes {
                    token,
                    hold_count,
                    remaining,
                } => TryAcquire::Acquired(Lease::ttl(token, hold_count, sent_at, remaining)),
                Granted::No { remaining } => TryAcquire::Busy {
                    retry_in: Some(remaining),
                },
            })
        }
    }
}

#[async_trait]
impl LockBackend for FileLockBackend {
    fn name(&self) -> &'static str {
        KIND
    }

    fn capabilities(&self) -> Capabilities {
        // Not fair (no queue, `waiting` stays unsupported); tokens live in a
        // file, so they keep growing when every process restarts.
        Capabilities::ttl_leases()
            .with_shared_holds()
            .with_batch_extend()
            .with_durable_tokens()
            .with_admin()
            .with_idempotent_attempts()
    }

    async fn try_acquire(&self, req: &AcquireRequest<'_>) -> Result<TryAcquire, LockError> {
        self.attempt(req).await
    }

    async fn acquire(&self, req: &AcquireRequest<'_>, wait: Option<Duration>) -> Result<Option<Lease>, LockError> {
        // Nobody tells us of a release: look again, sooner when the
        // holder's lease is about to end (`Busy::retry_in`).
        let backoff = Backoff::new(Duration::from_millis(2), Duration::from_millis(50));
        acquire_with_backoff(wait, backoff, None, || self.attempt(req)).await
    }

    async fn release(&self, hold: &Hold, attempt: &str) -> Result<ReleaseOutcome, LockError> {
        check_attempt_id(attempt)?;
        let (owned, attempt) = (hold.clone(), attempt.to_owned());
        self.store
            .run("release", Some(&hold.name), move |s, now| {
                s.release(&owned, &attempt, now)
            })
            .await
    }

    async fn extend(&self, hold: &Hold, ttl: Duration) -> Result<ExtendOutcome, LockError> {
        let mut out = self.extend_many(&[(hold.clone(), ttl)]).await;
        out.pop().unwrap_or_else(|| Ok(ExtendOutcome::NotHeld))
    }

    async fn extend_many(&self, holds: &[(Hold, Duration)]) -> Vec<Result<ExtendOutcome, LockError>> {
        let sent_at = Instant::now();
        let batch: Vec<(Hold, u64)> = holds.iter().map(|(h, ttl)| (h.clone(), ttl_millis(*ttl))).collect();
        // One pass under one lock of the directory, however many holds.
        let result = self
            .store
            .run("extend", None, move |s, now| {
                batch
                    .iter()
                    .map(|(hold, ttl_ms)| s.extend(hold, *ttl_ms, now))
                    .collect::<io::Result<Vec<_>>>()
            })
            .await;
        match result {
            Ok(remaining) => remaining
                .into_iter()
                .map(|r| {
                    Ok(match r {
                        Some(remaining) => ExtendOutcome::Extended {
                            valid_until: Some(valid_until(sent_at, remaining)),
                        },
                        None => ExtendOutcome::NotHeld,
                    })
                })
                .collect(),
            // `LockError` is not `Clone`: one error of the same kind per hold.
            Err(e) => {
                let each = |h: &Hold| LockError::backend(KIND, "extend", Some(&h.name), e.is_retryable(), e.to_line());
                holds.iter().map(|(h, _)| Err(each(h))).collect()
            }
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let owned = name.to_owned();
        self.store
            .run("inspect", Some(name), move |s, now| s.inspect(&owned, now))
            .await
    }

    async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockInfo>, LockError> {
        let prefix = prefix.to_owned();
        self.store
            .run("list", None, move |s, now| s.list(&prefix, limit, now))
            .await
    }

    async fn force_release(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let owned = name.to_owned();
        self.store
            .run("force_release", Some(name), move |s, now| s.force_release(&owned, now))
            .await
    }
}

/// What an acquisition attempt found.
#[derive(Debug)]
enum Granted {
    /// Acquired or re-entered; the lease runs `remaining` from the file's
    /// point of view.
    Yes {
        token: u64,
        hold_count: u32,
        remaining: Duration,
    },
    /// Another owner holds it for `remaining` more.
    No { remaining: Duration },
}

/// One held name, as a line of its bucket file.
#[derive(Debug, Clone)]
struct Record {
    name: String,
    owner: String,
    token: u64,
    /// Wall-clock milliseconds since the Unix epoch.
    expires_ms: u64,
    /// One attempt id per share of the hold.
    attempts: Vec<String>,
}

impl Record {
    fn hold_count(&self) -> u32 {
        u32::try_from(self.attempts.len()).unwrap_or(u32::MAX)
    }

    fn remaining(&self, now: u64) -> Duration {
        Duration::from_millis(self.expires_ms.saturating_sub(now))
    }

    fn info(&self, now: u64) -> LockInfo {
        LockInfo {
            name: self.name.clone(),
            owner: self.owner.clone(),
            hold_count: self.hold_count(),
            token: self.token,
            remaining: Some(self.remaining(now)),
            kind: lockkit_core::LockKind::Mutex,
        }
    }

    fn is(&self, hold: &Hold) -> bool {
        self.name == hold.name && self.owner == hold.owner && self.token == hold.token
    }

    fn to_line(&self) -> String {
        format!(
            "{} {} {} {} {}\n",
            hex(self.name.as_bytes()),
            hex(self.owner.as_bytes()),
            self.token,
            self.expires_ms,
            self.attempts.join(",")
        )
    }

    fn parse(line: &str) -> io::Result<Record> {
        let bad = || io::Error::new(io::ErrorKind::InvalidData, format!("not a lock record: {line:?}"));
        let mut fields = line.split(' ');
        let mut next = || fields.next().ok_or_else(bad);
        let (name, owner, token, expires, attempts) = (next()?, next()?, next()?, next()?, next()?);
        Ok(Record {
            name: unhex(name).ok_or_else(bad)?,
            owner: unhex(owner).ok_or_else(bad)?,
            token: token.parse().map_err(|_| bad())?,
            expires_ms: expires.parse().map_err(|_| bad())?,
            attempts: attempts
                .split(',')
                .filter(|a| !a.is_empty())
                .map(str::to_owned)
                .collect(),
        })
    }
}

/// The directory, and the operations that run while its lock is held.
#[derive(Debug)]
struct Store {
    root: PathBuf,
}

impl Store {
    /// Runs `op` on a blocking thread while holding the directory's lock;
    /// `now` is the wall clock read under the lock. I/O errors become
    /// typed [`LockError`]s for `operation` (on the lock `name`).
    async fn run<T, F>(self: &Arc<Self>, operation: &'static str, name: Option<&str>, op: F) -> Result<T, LockError>
    where
        T: Send + 'static,
        F: FnOnce(&Store, u64) -> io::Result<T> + Send + 'static,
    {
        let store = self.clone();
        let joined = tokio::task::spawn_blocking(move || {
            let lock = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(store.root.join(".lock"))?;
            lock.lock()?; // released when `lock` is closed, also on a panic
            op(&store, now_ms())
        })
        .await;
        match joined {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => Err(io_error(operation, name, e)),
            Err(e) => Err(LockError::backend(KIND, operation, name, false, e)),
        }
    }

    fn acquire(&self, name: &str, owner: &str, attempt: &str, ttl_ms: u64, now: u64) -> io::Result<Granted> {
        let mut bucket = self.read(name, now)?;
        let expires = now.saturating_add(ttl_ms);
        let record = match bucket.iter_mut().find(|r| r.name == name) {
            Some(r) if r.owner == owner => {
                // Re-entry; the same attempt again is the same share.
                if !r.attempts.iter().any(|a| a == attempt) {
                    r.attempts.push(attempt.to_owned());
                }
                r.expires_ms = r.expires_ms.max(expires);
                r.clone()
            }
            Some(r) => {
                return Ok(Granted::No {
                    remaining: r.remaining(now),
                });
            }
            None => {
                let record = Record {
                    name: name.to_owned(),
                    owner: owner.to_owned(),
                    token: self.next_token()?,
                    expires_ms: expires,
                    attempts: vec![attempt.to_owned()],
                };
                bucket.push(record.clone());
                record
            }
        };
        self.write(name, &bucket)?;
        Ok(Granted::Yes {
            token: record.token,
            hold_count: record.hold_count(),
            remaining: record.remaining(now),
        })
    }

    fn release(&self, hold: &Hold, attempt: &str, now: u64) -> io::Result<ReleaseOutcome> {
        let mut bucket = self.read(&hold.name, now)?;
        let Some(i) = bucket.iter().position(|r| r.is(hold)) else {
            return Ok(ReleaseOutcome::NotHeld);
        };
        // A share already taken back (a repeated release) changes nothing.
        bucket[i].attempts.retain(|a| a != attempt);
        let remaining = bucket[i].hold_count();
        if remaining == 0 {
            bucket.remove(i);
        }
        self.write(&hold.name, &bucket)?;
        Ok(ReleaseOutcome::Released { remaining })
    }

    /// The lease left after extending `hold`; `None`: not held.
    fn extend(&self, hold: &Hold, ttl_ms: u64, now: u64) -> io::Result<Option<Duration>> {
        let mut bucket = self.read(&hold.name, now)?;
        let Some(r) = bucket.iter_mut().find(|r| r.is(hold)) else {
            return Ok(None);
        };
        r.expires_ms = r.expires_ms.max(now.saturating_add(ttl_ms));
        let remaining = r.remaining(now);
        self.write(&hold.name, &bucket)?;
        Ok(Some(remaining))
    }

    fn inspect(&self, name: &str, now: u64) -> io::Result<Option<LockInfo>> {
        Ok(self
            .read(name, now)?
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.info(now)))
    }

    fn list(&self, prefix: &str, limit: usize, now: u64) -> io::Result<Vec<LockInfo>> {
        let mut held = Vec::new();
        for entry in fs::read_dir(self.root.join("locks"))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                continue;
            }
            for r in parse_bucket(&path)? {
                if r.expires_ms > now && r.name.starts_with(prefix) {
                    held.push(r.info(now));
                }
            }
        }
        held.sort_by(|a, b| a.name.cmp(&b.name));
        held.truncate(limit);
        Ok(held)
    }

    fn force_release(&self, name: &str, now: u64) -> io::Result<Option<LockInfo>> {
        let mut bucket = self.read(name, now)?;
        let Some(i) = bucket.iter().position(|r| r.name == name) else {
            return Ok(None);
        };
        let removed = bucket.remove(i);
        self.write(name, &bucket)?;
        Ok(Some(removed.info(now)))
    }

    /// The live records of `name`'s bucket (expired ones are left out, and
    /// go at the bucket's next write).
    fn read(&self, name: &str, now: u64) -> io::Result<Vec<Record>> {
        let mut bucket = parse_bucket(&self.bucket(name))?;
        bucket.retain(|r| r.expires_ms > now);
        Ok(bucket)
    }

    /// Replaces `name`'s bucket (write a new file, then rename it over the
    /// old one, so a crash leaves one or the other); empty, removes it.
    fn write(&self, name: &str, bucket: &[Record]) -> io::Result<()> {
        let path = self.bucket(name);
        if bucket.is_empty() {
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            };
        }
        let text: String = bucket.iter().map(Record::to_line).collect();
        replace(&path, text.as_bytes(), false)
    }

    /// The next fencing token, from the counter file (synced, so tokens
    /// never repeat after a crash).
    fn next_token(&self) -> io::Result<u64> {
        let path = self.root.join("tokens");
        let last: u64 = match fs::read_to_string(&path) {
            Ok(text) => text
                .trim()
                .parse()
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "the token counter is not a number"))?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => 0,
            Err(e) => return Err(e),
        };
        let next = last + 1;
        replace(&path, next.to_string().as_bytes(), true)?;
        Ok(next)
    }

    /// The bucket file of `name`: its 64-bit FNV-1a hash in hex (names are
    /// up to 255 bytes of anything; a file name cannot hold them as-is).
    fn bucket(&self, name: &str) -> PathBuf {
        let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        self.root.join("locks").join(format!("{hash:016x}"))
    }
}

fn parse_bucket(path: &Path) -> io::Result<Vec<Record>> {
    match fs::read_to_string(path) {
        Ok(text) => text.lines().map(Record::parse).collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Writes `path` anew through a temporary file and a rename.
fn replace(path: &Path, bytes: &[u8], sync: bool) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    if sync {
        file.sync_data()?;
    }
    fs::rename(&tmp, path)
}

fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// An I/O error as a typed [`LockError`]: retryable when trying again may
/// help (an interrupted call), not for missing rights or a corrupt file.
fn io_error(operation: &'static str, name: Option<&str>, e: io::Error) -> LockError {
    use io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    let retryable = matches!(e.kind(), Interrupted | WouldBlock | TimedOut);
    LockError::backend(KIND, operation, name, retryable, e)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<String> {
    let bytes: Option<Vec<u8>> = (0..text.len())
        .step_by(2)
        .map(|i| text.get(i..i + 2).and_then(|pair| u8::from_str_radix(pair, 16).ok()))
        .collect();
    String::from_utf8(bytes?).ok()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    lockkit::register_backend(SCHEMES)?;
    let locks = lockkit::connect(&format!("filelock://{}?ttl=10s", dir.path().display())).await?;
    let guard = locks.lock("report:nightly").await?;
    println!(
        "holding {:?} with fencing token {}",
        guard.name(),
        guard.fencing_token()
    );

    // Another owner (here: another client on the same directory) is refused.
    let other = LockClient::new(FileLockBackend::open(dir.path())?, LockOptions::new())?;
    assert!(other.try_lock("report:nightly").await?.is_none());

    let unlocked = guard.unlock().await?;
    println!("unlocked ({} holds left)", unlocked.remaining_holds);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use lockkit_core::testkit::Kit;

    /// A new store directory per case, removed when the case's kit goes.
    fn kit() -> Option<Kit> {
        let dir = Arc::new(tempfile::tempdir().expect("a temporary directory"));
        Some(Kit::new("file", move || {
            let dir = dir.clone();
            async move { LockClient::new(FileLockBackend::open(dir.path())?, LockOptions::new()) }
        }))
    }

    lockkit_core::conformance_tests!(
        kit(),
        not_applicable: [fifo_order, releaser_does_not_overtake, dead_waiter_skipped]
            because "no queue of waiters: the file backend is not fair"
    );

    /// Registered, the backend is reached by URL, with its own scheme and
    /// lockkit's common parameters; a relative path is a typed error.
    #[tokio::test]
    async fn reached_by_url_once_registered() {
        let dir = tempfile::tempdir().unwrap();
        lockkit::register_backend(SCHEMES).unwrap();
        let url = format!("filelock://{}?wait=1s", dir.path().display());
        let locks = lockkit::connect(&url).await.unwrap();
        assert_eq!(locks.options().wait_value(), Some(Duration::from_secs(1)));
        let held = locks.lock("by-url").await.unwrap();
        let direct = LockClient::new(FileLockBackend::open(dir.path()).unwrap(), LockOptions::new()).unwrap();
        assert!(direct.try_lock("by-url").await.unwrap().is_none(), "one store");
        held.unlock().await.unwrap();
        let relative = lockkit::connect("filelock://relative/dir").await.unwrap_err();
        assert!(matches!(relative, LockError::InvalidConfig { .. }), "{relative:?}");
    }

    #[test]
    fn records_round_trip() {
        let r = Record {
            name: "nul\0 and\nnewline 锁".to_owned(),
            owner: "an owner with spaces".to_owned(),
            token: 7,
            expires_ms: 1_700_000_000_000,
            attempts: vec!["0123456789abcdef".to_owned(), "fedcba9876543210".to_owned()],
        };
        let line = r.to_line();
        let back = Record::parse(line.trim_end()).unwrap();
        assert_eq!((back.name, back.owner, back.token), (r.name, r.owner, r.token));
        assert_eq!((back.expires_ms, back.attempts), (r.expires_ms, r.attempts));
        assert!(Record::parse("zz 00 1 2 ").is_err());
    }
}
