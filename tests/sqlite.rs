//! The conformance kit against SQLite: each case in a database file of its
//! own (WAL; one pool per client, so clients contend through the file as
//! separate processes would). Files live under cargo's target/tmp.

#![cfg(feature = "sqlite")]

use std::sync::atomic::{AtomicUsize, Ordering};

use lockkit_core::testkit::Kit;

static NEXT: AtomicUsize = AtomicUsize::new(0);

const PREFIX: &str = "lockkit-sqlite-kit-";

/// Removes the files of earlier runs whose process is gone.
fn clean_up_earlier_runs(dir: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|rest| rest.split('-').next()) else {
            continue;
        };
        if !std::path::Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn kit() -> Option<Kit> {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n == 0 {
        clean_up_earlier_runs(dir);
    }
    let file = dir.join(format!("{PREFIX}{}-{n}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
    let url = format!("sqlite://{}?sweep_interval=500ms", file.display());
    Some(
        Kit::new("sqlite", move || {
            let url = url.clone();
            async move { lockkit::connect(&url).await }
        })
        .with_stress(8, 100),
    )
}

lockkit_core::conformance_tests!(kit());
