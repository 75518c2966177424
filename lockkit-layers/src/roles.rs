//! The guide's table of role files, checked against the backend crates.
//!
//! CONTRIBUTING.md names the backend crates in backticks in the paragraph
//! before a fenced block, then lists one role per line of that block: the
//! file (`acquire.rs`, `conn/`, `config`), what it holds, and at the end
//! the crates without it, `(not in lockkit-x: why; not in lockkit-y: why)`.
//! A role is kept by a file or a folder of its name (a role that needs
//! more than one file is a folder). The check fails on a crate that lacks
//! a role it is not excused from, on an excuse for a file the crate has,
//! and on a crate with a `backend.rs` the paragraph does not name.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::LayersError;

/// The sentence that opens the table's paragraph.
const OPENING: &str = "Every backend crate";

/// The table as the guide writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleTable {
    /// The backend crates' folder names (`lockkit-redis`, …).
    pub crates: Vec<String>,
    /// One line of the block each.
    pub roles: Vec<Role>,
}

/// One role of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    /// Its file's name without `.rs` or `/`.
    pub stem: String,
    /// The crates the table excuses from it.
    pub absent_from: Vec<String>,
}

/// Where the guide and the crates disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mismatch {
    /// A crate has no file or folder for a role it is not excused from.
    Missing {
        /// The crate folder's name.
        krate: String,
        /// The role.
        stem: String,
    },
    /// The table excuses a crate from a role whose file it has.
    Excused {
        /// The crate folder's name.
        krate: String,
        /// The role.
        stem: String,
    },
    /// A crate with a `backend.rs` that the table does not name.
    Unlisted {
        /// The crate folder's name.
        krate: String,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::Missing { krate, stem } => {
                write!(
                    f,
                    "{krate}: no {stem}.rs or {stem}/, which the guide's role table lists"
                )
            }
            Mismatch::Excused { krate, stem } => {
                write!(f, "{krate}: has {stem}, which the guide's role table says it has not")
            }
            Mismatch::Unlisted { krate } => {
                write!(
                    f,
                    "{krate}: a backend crate (src/backend.rs) the guide's role table does not name"
                )
            }
        }
    }
}

/// Reads the role table from the guide's text.
pub fn parse(guide: &Path, text: &str) -> Result<RoleTable, LayersError> {
    let bad = |message: &str| LayersError::Guide {
        file: guide.to_path_buf(),
        message: message.to_owned(),
    };
    let start = text
        .find(OPENING)
        .ok_or_else(|| bad("no paragraph opening with \"Every backend crate\""))?;
    let rest = &text[start..];
    let fence = rest
        .find("\n```")
        .ok_or_else(|| bad("no fenced block after the paragraph"))?;
    let crates: Vec<String> = rest[..fence]
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| w.starts_with("lockkit-") && w.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .map(str::to_owned)
        .collect();
    if crates.is_empty() {
        return Err(bad("the paragraph names no crate (`lockkit-…`)"));
    }
    let block = &rest[fence + 4..];
    let block = &block[block.find('\n').map_or(0, |i| i + 1)..];
    let end = block.find("```").ok_or_else(|| bad("the fenced block does not end"))?;
    let roles: Vec<Role> = block[..end]
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(role)
        .collect();
    if roles.is_empty() {
        return Err(bad("the fenced block lists no role"));
    }
    Ok(RoleTable { crates, roles })
}

/// One line of the block: the file, then its excuses.
fn role(line: &str) -> Role {
    let file = line.split_whitespace().next().unwrap_or_default();
    let stem = file.trim_end_matches('/').trim_end_matches(".rs").to_owned();
    let absent_from = line
        .split("not in ")
        .skip(1)
        .filter_map(|part| part.split(':').next())
        .map(|k| k.trim().to_owned())
        .collect();
    Role { stem, absent_from }
}

/// Whether `src` keeps the role `stem`: a file or a folder of its name.
fn has(src: &Path, stem: &str) -> bool {
    src.join(format!("{stem}.rs")).is_file() || src.join(stem).is_dir()
}

/// Checks the guide at `guide` against the crate folders `dirs` (their
/// last path component is the crate's folder name): every crate the table
/// names must be among them.
pub fn check_roles(guide: &Path, dirs: &[PathBuf]) -> Result<Vec<Mismatch>, LayersError> {
    let text = std::fs::read_to_string(guide).map_err(|source| LayersError::Read {
        file: guide.to_path_buf(),
        source,
    })?;
    let table = parse(guide, &text)?;
    let folder = |d: &PathBuf| {
        d.canonicalize()
            .ok()
            .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
            .unwrap_or_default()
    };
    let mut found = Vec::new();
    for name in &table.crates {
        let dir = dirs
            .iter()
            .find(|d| &folder(d) == name)
            .ok_or_else(|| LayersError::Guide {
                file: guide.to_path_buf(),
                message: format!("the role table names {name}, which is not among the crates checked"),
            })?;
        let src = dir.join("src");
        for role in &table.roles {
            let excused = role.absent_from.contains(name);
            match (has(&src, &role.stem), excused) {
                (false, false) => found.push(Mismatch::Missing {
                    krate: name.clone(),
                    stem: role.stem.clone(),
                }),
                (true, true) => found.push(Mismatch::Excused {
                    krate: name.clone(),
                    stem: role.stem.clone(),
                }),
                _ => {}
            }
        }
    }
    for dir in dirs {
        let name = folder(dir);
        if name != "lockkit-core" && dir.join("src/backend.rs").is_file() && !table.crates.contains(&name) {
            found.push(Mismatch::Unlisted { krate: name });
        }
    }
    Ok(found)
}
