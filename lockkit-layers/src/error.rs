//! What can stop a check: a file that cannot be read or parsed, a module
//! whose file is missing.

use std::path::PathBuf;

/// Why a crate could not be checked.
#[derive(Debug, thiserror::Error)]
pub enum LayersError {
    /// A source file could not be read.
    #[error("{}: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A source file is not valid Rust.
    #[error("{}: {message}", file.display())]
    Parse {
        /// The file.
        file: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A `mod` declaration names a module with neither `name.rs` nor
    /// `name/mod.rs`.
    #[error("module {module}: neither {module}.rs nor {module}/mod.rs in {}", dir.display())]
    NoModuleFile {
        /// The module's name.
        module: String,
        /// Where its file was looked for.
        dir: PathBuf,
    },
    /// The guide's role table cannot be read as one.
    #[error("{}: {message}", file.display())]
    Guide {
        /// The guide.
        file: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// The crate folder has neither `src/lib.rs` nor `src/main.rs`.
    #[error("{}: neither src/lib.rs nor src/main.rs", dir.display())]
    NoRoot {
        /// The crate folder.
        dir: PathBuf,
    },
}
