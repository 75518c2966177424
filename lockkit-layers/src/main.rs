//! `lockkit-layers CRATE_DIR...`: prints the module cycles of each crate
//! and exits 1 if there is one (2 if a crate could not be read).

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dirs: Vec<String> = std::env::args().skip(1).collect();
    if dirs.is_empty() {
        eprintln!("usage: lockkit-layers CRATE_DIR...");
        return ExitCode::from(2);
    }
    let mut found = 0;
    for dir in &dirs {
        match lockkit_layers::check(Path::new(dir)) {
            Ok(cycles) => {
                for c in &cycles {
                    print!("{dir}: {c}");
                }
                found += cycles.len();
            }
            Err(e) => {
                eprintln!("lockkit-layers: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if found > 0 {
        println!("{found} module cycles");
        return ExitCode::FAILURE;
    }
    println!("no module cycle in {} crates", dirs.len());
    ExitCode::SUCCESS
}
