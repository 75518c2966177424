//! Finds module cycles: files of one crate that take names from each other
//! in a circle (`a.rs` uses `b.rs`, which uses `c.rs`, which uses
//! `a.rs`). A crate without them can be read, and drawn, in layers.
//!
//! An arrow goes from a file to the file of every module of its crate that
//! it names: in a `use`, in a path (`crate::conn::Arg`, `super::Shared`,
//! `child::f`), and in a macro call's paths. A name taken through another
//! module's `use` (a re-export in a folder's `mod.rs`) is an arrow to that
//! module as well as to the file that defines it; the crate root's
//! re-exports are the crate's face and count only where they lead. Code
//! under `#[cfg(test)]` is left out; a method called on a value is not
//! seen (the check reads names, not types).
//!
//!
//! With `--roles GUIDE` it also checks the guide's table of role files
//! against the backend crates ([`check_roles`]).
//!
//! ```no_run
//! let cycles = lockkit_layers::check(std::path::Path::new("lockkit-sql"))?;
//! for cycle in &cycles {
//!     println!("{cycle}");
//! }
//! # Ok::<(), lockkit_layers::LayersError>(())
//! ```

mod error;
mod graph;
mod refs;
mod roles;
mod tree;

use std::path::Path;

pub use error::LayersError;
pub use graph::Cycle;
pub use roles::{Mismatch, Role, RoleTable, check_roles};

/// The module cycles of the crate in folder `dir`: of its library
/// (`src/lib.rs`) and of its binary (`src/main.rs`), each a tree of its
/// own.
pub fn check(dir: &Path) -> Result<Vec<Cycle>, LayersError> {
    let roots: Vec<_> = ["src/lib.rs", "src/main.rs"]
        .iter()
        .map(|r| dir.join(r))
        .filter(|r| r.is_file())
        .collect();
    if roots.is_empty() {
        return Err(LayersError::NoRoot { dir: dir.to_path_buf() });
    }
    let mut cycles = Vec::new();
    for root in roots {
        cycles.extend(graph::cycles(&tree::Tree::read(&root)?));
    }
    Ok(cycles)
}
