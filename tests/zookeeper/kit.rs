//! The conformance kit against ZooKeeper: a single server
//! (`LOCKKIT_ZK_URL`) and a three-node ensemble (`LOCKKIT_ZK_ENSEMBLE_URL`),
//! both from `scripts/services`.
#![cfg(feature = "zookeeper")]

use std::fs::File;
use std::sync::LazyLock;

use lockkit_core::testkit::Kit;

/// Held (shared) while this process runs ensemble cases, so that the fault
/// tests of tests/zookeeper_ensemble/main.rs, which stop servers and take it
/// exclusively, never run at the same time — not even from another cargo.
static ENSEMBLE_IN_USE: LazyLock<File> = LazyLock::new(|| {
    let path = std::env::temp_dir().join("lockkit-zk-ensemble.lock");
    let file = File::create(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    file.lock_shared().expect("lock the ensemble for the conformance run");
    file
});

/// The kit for the server in `var`, with a 4 s session timeout so the crash
/// case does not wait for the 10 s default.
///
/// The waiter behind a dead one takes its node out only if it saw that node
/// waiting (a node it first saw at the head may hold from its create on,
/// unclaimed). `dead_waiter_skipped` releases right after the live waiter
/// queued: when the listing behind that waiter's create reaches the server
/// after the release (a loaded run: 4.4 s once), the dead node is first in
/// it and goes with its session. So the kit allows a session timeout and
/// its expiry tick; `processes.rs` waits until the waiter behind has
/// looked, and holds the 1.5 s bound.
fn kit(var: &str) -> Option<Kit> {
    Kit::from_env(var, |url| async move {
        let sep = if url.contains('?') { '&' } else { '?' };
        lockkit::connect(&format!("{url}{sep}session_timeout={}s", SESSION.as_secs())).await
    })
    .map(|k| k.with_stress(8, 50).with_dead_waiter_bound(SESSION * 2))
}

/// The kit clients' session timeout.
const SESSION: std::time::Duration = std::time::Duration::from_secs(4);

mod single {
    lockkit_core::conformance_tests!(super::kit("LOCKKIT_ZK_URL"));
}

mod ensemble {
    lockkit_core::conformance_tests!(super::kit("LOCKKIT_ZK_ENSEMBLE_URL").inspect(|_| {
        std::sync::LazyLock::force(&super::ENSEMBLE_IN_USE);
    }));
}
