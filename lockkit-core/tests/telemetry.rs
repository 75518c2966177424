//! The metrics the client records, read back through a debugging recorder.

use std::collections::HashMap;
use std::time::Duration;

use lockkit_core::memory::MemoryBackend;
use lockkit_core::{LockClient, LockOptions, telemetry};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[test]
fn acquisitions_contention_holds_extensions_and_losses_are_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    metrics::with_local_recorder(&recorder, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let backend = MemoryBackend::new();
            let opts = LockOptions::new()
                .ttl(Duration::from_millis(300))
                .wait(Duration::from_millis(50));
            let a = LockClient::new(backend.clone(), opts.clone()).unwrap();
            let b = LockClient::new(backend, opts).unwrap();
            let g = a.lock("m").await.unwrap();
            assert!(b.try_lock("m").await.unwrap().is_none());
            assert!(b.lock("m").await.is_err());
            // Held past a few renewal periods.
            tokio::time::sleep(Duration::from_millis(400)).await;
            g.unlock().await.unwrap();
            let lost = a.lock_with("m", &a.options().auto_extend(false)).await.unwrap();
            tokio::time::timeout(Duration::from_secs(10), lost.lost())
                .await
                .unwrap();
            // Let the watchdog notice the passed deadline.
            tokio::time::sleep(Duration::from_millis(50)).await;
        });
    });
    let mut seen: HashMap<(String, Vec<(String, String)>), f64> = HashMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let labels = key
            .key()
            .labels()
            .map(|l| (l.key().to_owned(), l.value().to_owned()))
            .collect();
        let v = match value {
            DebugValue::Counter(c) => c as f64,
            DebugValue::Histogram(h) => h.len() as f64,
            DebugValue::Gauge(g) => g.into_inner(),
        };
        seen.insert((key.key().name().to_owned(), labels), v);
    }
    let get = |name: &str, labels: &[(&str, &str)]| {
        let labels = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        seen.get(&(name.to_owned(), labels)).copied().unwrap_or(0.0)
    };
    let mem = [("backend", "memory")];
    assert_eq!(get(telemetry::ACQUISITIONS, &mem), 2.0);
    assert_eq!(get(telemetry::ACQUIRE_WAIT, &mem), 2.0);
    assert_eq!(
        get(telemetry::CONTENTION, &[("backend", "memory"), ("outcome", "busy")]),
        1.0
    );
    assert_eq!(
        get(telemetry::CONTENTION, &[("backend", "memory"), ("outcome", "timeout")]),
        1.0
    );
    assert_eq!(
        get(telemetry::HOLD, &mem),
        2.0,
        "both guards ended (one unlocked, one dropped)"
    );
    assert!(
        get(telemetry::EXTENSIONS, &mem) >= 2.0,
        "the watchdog extended a 300 ms lease held 400 ms"
    );
    assert_eq!(
        get(telemetry::LOSSES, &[("backend", "memory"), ("reason", "expired")]),
        1.0
    );
}
