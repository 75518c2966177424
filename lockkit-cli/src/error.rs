//! What a command ends with: its error type and the exit codes that are
//! not the command's own.

/// The error type of the commands.
pub type CliError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Exit code when the lock could not be had in time (or at once, with `--no-wait`).
pub const EXIT_BUSY: u8 = 75;
/// Exit code when the lock was lost while the command ran (the command was signalled).
pub const EXIT_LOST: u8 = 76;
/// Exit code for errors: bad input, unreachable backend.
pub const EXIT_ERROR: u8 = 1;
