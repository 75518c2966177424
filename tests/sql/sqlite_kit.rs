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

/// A database file of its own, not there yet.
fn new_db_file() -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    if n == 0 {
        clean_up_earlier_runs(dir);
    }
    let file = dir.join(format!("{PREFIX}{}-{n}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
    file
}

fn kit() -> Option<Kit> {
    let url = format!("sqlite://{}?sweep_interval=500ms", new_db_file().display());
    Some(
        Kit::new("sqlite", move || {
            let url = url.clone();
            async move { lockkit::connect(&url).await }
        })
        .with_stress(8, 100),
    )
}

lockkit_core::conformance_tests!(kit());

/// Clients (separate pools, like processes) opening one new database file at
/// once: its switch to WAL makes some of them meet `SQLITE_BUSY` at once,
/// which `connect` must wait out, not report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_clients_open_a_new_file_at_once() {
    for round in 0..20 {
        let url = format!("sqlite://{}", new_db_file().display());
        let clients = futures_util::future::join_all((0..12).map(|_| lockkit::connect(&url))).await;
        let clients: Vec<_> = clients
            .into_iter()
            .map(|c| c.unwrap_or_else(|e| panic!("round {round}: connect to a new file: {e:?}")))
            .collect();
        let g = clients[0].lock("opened").await.expect("lock");
        assert!(clients[11].try_lock("opened").await.expect("try_lock").is_none());
        g.unlock().await.expect("unlock");
    }
}
