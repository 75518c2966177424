//! The conformance kit against SQLite, in a temporary file (WAL, one pool per
//! client, so clients contend through the file as separate processes would).

#![cfg(feature = "sqlite")]

use std::sync::LazyLock;
use std::time::Duration;

use lockkit_core::testkit::Kit;

static DIR: LazyLock<tempfile::TempDir> = LazyLock::new(|| tempfile::tempdir().expect("temp dir"));

fn kit() -> Option<Kit> {
    let url = format!("sqlite://{}/locks.db?sweep_interval=500ms", DIR.path().display());
    Some(
        Kit::new("sqlite", move || {
            let url = url.clone();
            async move { lockkit::connect(&url).await }
        })
        .with_ttl(Duration::from_millis(500))
        .with_stress(8, 100),
    )
}

lockkit_core::conformance_tests!(kit());
