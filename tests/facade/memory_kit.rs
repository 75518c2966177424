//! The conformance kit against the in-memory backend.

use std::time::Duration;

use lockkit_core::testkit::Kit;

fn kit() -> Option<Kit> {
    Some(
        Kit::new("memory", || lockkit::connect("memory://"))
            .with_ttl(Duration::from_millis(300))
            .with_stress(8, 1000),
    )
}

lockkit_core::conformance_tests!(kit());
