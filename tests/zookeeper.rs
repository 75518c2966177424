//! The conformance kit against ZooKeeper: a single server
//! (`LOCKKIT_ZK_URL`) and a three-node ensemble (`LOCKKIT_ZK_ENSEMBLE_URL`),
//! both from `scripts/services`.
#![cfg(feature = "zookeeper")]

use lockkit_core::testkit::Kit;

/// The kit for the server in `var`, with a 4 s session timeout so the crash
/// case does not wait for the 10 s default.
fn kit(var: &str) -> Option<Kit> {
    Kit::from_env(var, |url| async move {
        let sep = if url.contains('?') { '&' } else { '?' };
        lockkit::connect(&format!("{url}{sep}session_timeout=4s")).await
    })
    .map(|k| k.with_stress(8, 50))
}

mod single {
    lockkit_core::conformance_tests!(super::kit("LOCKKIT_ZK_URL"));
}

mod ensemble {
    lockkit_core::conformance_tests!(super::kit("LOCKKIT_ZK_ENSEMBLE_URL"));
}
