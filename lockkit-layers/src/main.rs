//! `lockkit-layers [--roles GUIDE] CRATE_DIR...`: prints the module cycles
//! of each crate and, with `--roles`, where the guide's table of role files
//! and the backend crates disagree; exits 1 if anything was found (2 if a
//! crate or the guide could not be read).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let guide = match args.iter().position(|a| a == "--roles") {
        Some(i) if i + 1 < args.len() => {
            let guide = args.remove(i + 1);
            args.remove(i);
            Some(PathBuf::from(guide))
        }
        Some(_) => return usage(),
        None => None,
    };
    if args.is_empty() {
        return usage();
    }
    let mut found = 0;
    for dir in &args {
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
    } else {
        println!("no module cycle in {} crates", args.len());
    }
    if let Some(guide) = guide {
        let dirs: Vec<PathBuf> = args.iter().map(PathBuf::from).collect();
        match lockkit_layers::check_roles(&guide, &dirs) {
            Ok(mismatches) if mismatches.is_empty() => {
                println!("the role table of {} matches the backend crates", guide.display());
            }
            Ok(mismatches) => {
                for m in &mismatches {
                    println!("{m}");
                }
                found += mismatches.len();
            }
            Err(e) => {
                eprintln!("lockkit-layers: {e}");
                return ExitCode::from(2);
            }
        }
    }
    if found > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: lockkit-layers [--roles GUIDE] CRATE_DIR...");
    ExitCode::from(2)
}
