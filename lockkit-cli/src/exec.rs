//! `lockkit exec NAME -- CMD…`: a distributed flock(1) — under the lock
//! NAME, one of N permits of the semaphore NAME (`--permits N`), or a read
//! (`--shared`) or the write hold (`--write`) of the read-write lock NAME;
//! or once as a scheduled job (`--at-most`, `--at-least`).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use lockkit::{JobLimits, LockClient, LockError, LockGuard, LockOptions};
use tokio::process::{Child, Command};
use tokio::signal::unix::{SignalKind, signal};

use crate::args::parse_duration;
use crate::error::{CliError, EXIT_BUSY, EXIT_LOST};
use crate::target;

/// Arguments of `lockkit exec`.
#[derive(Args, Debug)]
pub struct ExecArgs {
    /// The lock name.
    name: String,
    /// How long to wait for the lock (default: the URL's `wait`, else 30s).
    #[arg(long, value_parser = parse_duration, conflicts_with = "no_wait")]
    wait: Option<Duration>,
    /// Fail at once (exit 75) if another owner holds the lock.
    #[arg(long)]
    no_wait: bool,
    /// Lease length; the lease is extended while the command runs (default 30s).
    #[arg(long, value_parser = parse_duration)]
    ttl: Option<Duration>,
    /// Owner id (equal owners share a hold, e.g. to re-enter from a child).
    #[arg(long)]
    owner: Option<String>,
    /// Take one of N permits of the semaphore NAME: at most N commands run
    /// at once, across machines (every exec of NAME must say the same N).
    #[arg(long, value_name = "N", conflicts_with_all = ["shared", "write"])]
    permits: Option<u32>,
    /// Take a read hold of the read-write lock NAME: shared with other
    /// `--shared` commands, never beside a `--write` one.
    #[arg(long, conflicts_with = "write")]
    shared: bool,
    /// Take the write hold of the read-write lock NAME: alone, and readers
    /// that come after a waiting writer wait for it. (Without --shared,
    /// --write or --permits, exec takes NAME as a plain lock.) A name is
    /// one lock whatever the kind: while commands hold NAME one way
    /// (plain, --permits, --shared/--write), an exec of NAME another way
    /// waits for them (with --no-wait: exit 75).
    #[arg(long)]
    write: bool,
    /// A scheduled job (ShedLock's lockAtMostFor): run the command only if
    /// the lock NAME is free now (else exit 75 at once), and stop it (exit
    /// 76) when this much has passed since the start.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION",
          conflicts_with_all = ["permits", "shared", "write", "wait", "no_wait"])]
    at_most: Option<Duration>,
    /// With --at-most: keep NAME blocked for at least this long from the
    /// start even when the command ends sooner (lockAtLeastFor), so a job
    /// fired on many machines a little apart runs once.
    #[arg(long, value_parser = parse_duration, value_name = "DURATION", requires = "at_most")]
    at_least: Option<Duration>,
    /// How long the command gets between SIGTERM and SIGKILL when the lock is lost.
    #[arg(long, value_parser = parse_duration, default_value = "10s")]
    grace: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// Runs the command under the lock; see the exit codes in `--help`.
pub async fn run(url: String, args: ExecArgs) -> Result<ExitCode, CliError> {
    let client = target::connect(&url).await?;
    let mut opts = client.options();
    if let Some(ttl) = args.ttl {
        opts = opts.ttl(ttl);
    }
    if let Some(wait) = args.wait {
        opts = opts.wait(wait);
    }
    if let Some(owner) = &args.owner {
        opts = opts.owner(owner.clone());
    }
    if let Some(at_most) = args.at_most {
        let limits = JobLimits::new(args.at_least.unwrap_or_default(), at_most);
        let args = &args;
        let job = client.run_exclusive_with(&args.name, limits, &opts, |ctx| async move {
            let child = spawn(args, ctx.token())?;
            supervise(child, ctx.lost(), args).await
        });
        return match job.await? {
            None => {
                eprintln!("lockkit: {}", busy(args));
                Ok(ExitCode::from(EXIT_BUSY))
            }
            Some(ran) => Ok(ExitCode::from(ran?)),
        };
    }
    let guard = match take(&client, &args, &opts).await {
        Ok(Some(g)) => g,
        Ok(None) => {
            eprintln!("lockkit: {}", busy(&args));
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Err(e @ LockError::WaitTimeout { .. }) => {
            eprintln!("lockkit: {e}");
            return Ok(ExitCode::from(EXIT_BUSY));
        }
        Err(e) => return Err(e.into()),
    };
    let child = spawn(&args, guard.fencing_token())?;
    let code = supervise(child, guard.lost(), &args).await?;
    if code != EXIT_LOST
        && let Err(e) = guard.unlock().await
    {
        eprintln!("lockkit: releasing {:?}: {e}", args.name);
    }
    Ok(ExitCode::from(code))
}

/// Starts the command with the lock's token and name in its environment.
fn spawn(args: &ExecArgs, token: u64) -> Result<Child, CliError> {
    Ok(Command::new(&args.command[0])
        .args(&args.command[1..])
        .env("LOCKKIT_FENCING_TOKEN", token.to_string())
        .env("LOCKKIT_LOCK_NAME", &args.name)
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", args.command[0]))?)
}

/// Waits for the command, passing SIGTERM and SIGINT on; stops it when
/// `lost` fires. Its exit code, or [`EXIT_LOST`].
async fn supervise(mut child: Child, lost: impl Future<Output = ()>, args: &ExecArgs) -> Result<u8, CliError> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    tokio::pin!(lost);
    let status = loop {
        tokio::select! {
            status = child.wait() => break status?,
            _ = &mut lost => {
                eprintln!("lockkit: lock {:?} was lost; stopping the command", args.name);
                terminate(&mut child, args.grace).await?;
                return Ok(EXIT_LOST);
            }
            _ = sigterm.recv() => forward(&child, libc::SIGTERM),
            _ = sigint.recv() => forward(&child, libc::SIGINT),
        }
    };
    Ok(exit_code(status))
}

/// Why `--no-wait` got nothing, for the message.
fn busy(args: &ExecArgs) -> String {
    let name = &args.name;
    match (args.permits, args.shared, args.write) {
        (Some(n), _, _) => format!("every permit of semaphore {name:?} ({n}) is held"),
        (None, true, _) => format!("read-write lock {name:?} is held by a writer, or a writer waits"),
        (None, _, true) => format!("read-write lock {name:?} is held"),
        _ => format!("lock {name:?} is held by another owner"),
    }
}

/// Takes what `args` ask for: waiting as `opts` say, or only if free with
/// `--no-wait` (`None`: not free).
async fn take(client: &LockClient, args: &ExecArgs, opts: &LockOptions) -> Result<Option<LockGuard>, LockError> {
    let name = &args.name;
    let no_wait = args.no_wait;
    if let Some(permits) = args.permits {
        let sem = client.semaphore(name, permits)?;
        return match no_wait {
            true => sem.try_acquire_with(opts).await,
            false => sem.acquire_with(opts).await.map(Some),
        };
    }
    if args.shared || args.write {
        let rw = client.rw_lock(name)?;
        return match (no_wait, args.shared) {
            (true, true) => rw.try_read_with(opts).await,
            (true, false) => rw.try_write_with(opts).await,
            (false, true) => rw.read_with(opts).await.map(Some),
            (false, false) => rw.write_with(opts).await.map(Some),
        };
    }
    match no_wait {
        true => client.try_lock_with(name, opts).await,
        false => client.lock_with(name, opts).await.map(Some),
    }
}

fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => crate::error::EXIT_ERROR,
    }
}

fn forward(child: &Child, sig: libc::c_int) {
    if let Some(pid) = child.id() {
        // SAFETY: kill(2) with a pid we spawned and a valid signal number.
        unsafe { libc::kill(pid as libc::pid_t, sig) };
    }
}

/// SIGTERM, then SIGKILL if the child is still running after `grace`.
async fn terminate(child: &mut Child, grace: Duration) -> std::io::Result<()> {
    forward(child, libc::SIGTERM);
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        child.kill().await?;
    }
    Ok(())
}
