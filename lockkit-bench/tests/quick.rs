//! The smoke run: `lockkit-bench --quick` against every backend this build
//! has, the servers' from `scripts/services` (skipped without their URL,
//! failed with `LOCKKIT_REQUIRE_SERVICES=1`). No speed is asserted; the run
//! must finish, keep w2's counter exact, and give a lockkit row for every
//! workload and a floor row where the backend has a floor.

use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_lockkit-bench");

/// Runs lockkit-bench on `url` with `args`, its JSON rows and charts
/// written into a temporary directory (returned, with `charts/` in it);
/// asserts that it succeeded. Its stdout and rows.
fn bench(url: &str, args: &[&str]) -> (String, Vec<Value>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("rows.jsonl");
    let out = Command::new(BIN)
        .args(args)
        .args(["--backend", url, "--json"])
        .arg(&json)
        .arg("--out")
        .arg(dir.path().join("charts"))
        .output()
        .expect("run lockkit-bench");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "lockkit-bench {args:?} on {url} failed: {:?}",
        out.status
    );
    let rows = std::fs::read_to_string(&json)
        .expect("json written")
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object a line"))
        .collect();
    (stdout, rows, dir)
}

/// Runs the quick benchmark on `url`; its JSON rows.
fn quick(url: &str) -> Vec<Value> {
    let (stdout, rows, dir) = bench(url, &["--quick", "--clients", "4"]);
    assert!(stdout.contains("impl") && stdout.contains("w4"), "the table is printed");
    let charts = dir.path().join("charts");
    let svgs = std::fs::read_dir(&charts).expect("charts written").count();
    assert!(svgs > 0, "no SVG charts in {}", charts.display());
    rows
}

/// Runs the quick benchmark on `url` and checks its rows; returns them.
fn check(url: &str, has_floor: bool) -> Vec<Value> {
    let rows = quick(url);
    for w in ["w1", "w2", "w3", "w4"] {
        let ours: Vec<&Value> = rows
            .iter()
            .filter(|r| r["impl"] == "lockkit" && r["workload"] == w)
            .collect();
        assert!(!ours.is_empty(), "{url}: no lockkit row for {w}");
        for r in &ours {
            for key in ["backend", "clients", "seconds", "ops_per_s", "p50_us", "p99_us"] {
                assert!(!r[key].is_null(), "{url}: {w} row lacks {key}: {r}");
            }
            // w4 counts renewal round trips: none on session leases.
            if w != "w4" {
                assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{url}: {w} did nothing: {r}");
                assert!(r["client_cpu_us_per_op"].is_f64(), "{url}: {w} row lacks its CPU: {r}");
            }
        }
    }
    // w5 and w6 where the backend has the kinds (skipped, not failed,
    // where it has not): the lock excluded.
    for r in rows.iter().filter(|r| r["workload"] == "w5" || r["workload"] == "w6") {
        assert_eq!(r["counter_exact"], true, "{url}: the lock did not exclude: {r}");
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{url}: did nothing: {r}");
    }
    let w2 = rows.iter().find(|r| r["workload"] == "w2").unwrap();
    assert_eq!(w2["counter_exact"], true, "{url}: the lock did not exclude: {w2}");
    assert!(w2["fairness_min"].is_u64() && w2["fairness_max"].is_u64(), "{w2}");
    let w4 = rows.iter().find(|r| r["workload"] == "w4").unwrap();
    assert!(
        w4["round_trips_per_period"].is_f64() && w4["rss_bytes"].is_u64(),
        "{w4}"
    );
    // Redis and Redlock rows say what the servers spent.
    for r in rows.iter().filter(|r| r["workload"] == "w1") {
        let redis = ["redis", "redlock"].contains(&r["backend"].as_str().unwrap());
        assert_eq!(r["server_us_per_op"].is_f64(), redis, "{url}: server µs: {r}");
    }
    let floors = rows.iter().filter(|r| r["impl"] == "floor").count();
    if has_floor {
        assert!(
            rows.iter().any(|r| r["impl"] == "floor" && r["workload"] == "w1"),
            "{url}: no w1 floor row"
        );
    } else {
        assert_eq!(floors, 0, "{url}: a floor where there is none");
    }
    rows
}

/// Checks the quick run on the server of `var`; with the `peers` feature,
/// also that each of `peers` (crate names) has a w1 row and an excluding
/// w2 row beside lockkit's.
#[cfg(any(feature = "redis", feature = "mysql", feature = "postgres", feature = "zookeeper"))]
fn on_server(var: &str, peers: &[&str]) {
    let Some(url) = lockkit::testkit::server_url(var) else {
        return;
    };
    let rows = check(&url, true);
    if !cfg!(feature = "peers") {
        assert!(
            rows.iter()
                .all(|r| ["lockkit", "floor"].contains(&r["impl"].as_str().unwrap())),
            "{url}: peer rows without the peers feature"
        );
        return;
    }
    for peer in peers {
        for w in ["w1", "w2"] {
            let r = rows
                .iter()
                .find(|r| r["impl"] == *peer && r["workload"] == w)
                .unwrap_or_else(|| panic!("{url}: no {peer} row for {w}"));
            // Uncontended, every peer must work. Contended, a peer may do
            // nothing: distributed-lock-redis on Redlock leaves the nodes of a
            // failed attempt taken, and its contenders split the nodes until
            // the keys expire, or for good (docs/bench/README.md, the peers).
            if w == "w1" {
                assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{url}: {peer} did nothing: {r}");
            } else {
                assert_eq!(r["counter_exact"], true, "{url}: {peer} did not exclude: {r}");
                assert!(r["switches_per_s"].is_f64() && r["fairness_min"].is_u64(), "{r}");
            }
        }
    }
}

#[test]
fn memory() {
    let rows = check("memory://", false);
    for w in ["w5", "w6"] {
        assert!(
            rows.iter().any(|r| r["impl"] == "lockkit" && r["workload"] == w),
            "memory has every kind: no {w} row"
        );
    }
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    check(&format!("sqlite://{}", dir.path().join("bench.db").display()), true);
}

#[cfg(feature = "redis")]
#[test]
fn redis() {
    on_server("LOCKKIT_REDIS_URL", &["rslock", "distributed-lock-redis"]);
}

#[cfg(feature = "redis")]
#[test]
fn redlock() {
    on_server("LOCKKIT_REDLOCK_URL", &["rslock", "distributed-lock-redis"]);
}

#[cfg(feature = "mysql")]
#[test]
fn mysql() {
    on_server("LOCKKIT_MYSQL_URL", &[]);
}

#[cfg(feature = "postgres")]
#[test]
fn postgres() {
    on_server("LOCKKIT_POSTGRES_URL", &[]);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper() {
    on_server("LOCKKIT_ZK_URL", &["zookeeper-client"]);
}

/// The crowd workloads' smoke run on `url`: `crowd` at C=16 (over worker
/// processes) and a served-once crowd of 20, every kind. No speed is
/// asserted, nor that a slow kind served every waiter of the measured
/// crowd in 1 s; every row must be there, exclude, and the served-once
/// crowd (waits of 120 s) must serve all 20 where the kind exists.
fn crowd(url: &str) -> Vec<Value> {
    let (stdout, rows, dir) = bench(url, &["--quick", "--workload", "crowd,crowd-once"]);
    assert!(
        stdout.contains("crowd: C waiters") && stdout.contains("| backend | mutex |"),
        "both tables"
    );
    assert!(dir.path().join("charts/crowd.svg").exists(), "the crowd chart");
    for w in ["crowd", "crowd-once"] {
        for kind in ["mutex", "semaphore:3", "rw"] {
            let r = rows
                .iter()
                .find(|r| r["workload"] == w && r["kind"] == kind)
                .unwrap_or_else(|| panic!("{url}: no {w} {kind} row"));
            if r["unsupported"] == true {
                continue;
            }
            assert_eq!(r["counter_exact"], true, "{url}: the crowd's holds overlapped: {r}");
            assert_eq!(r["violations"], 0, "{r}");
            assert!(r["failed"].is_null(), "{url}: a worker failed: {r}");
            assert!(r["most_held"].as_u64().unwrap() >= 1, "{r}");
            if w == "crowd-once" {
                assert_eq!(r["served"], 20, "{url}: a served-once crowd left waiters: {r}");
            }
        }
    }
    rows
}

#[test]
fn crowd_memory() {
    let rows = crowd("memory://");
    // In one process memory serves the whole measured crowd and lets a
    // semaphore's permits in together.
    for r in rows.iter().filter(|r| r["workload"] == "crowd") {
        assert_eq!(r["served"], r["clients"], "{r}");
    }
    let sem = rows
        .iter()
        .find(|r| r["workload"] == "crowd" && r["kind"] == "semaphore:3")
        .unwrap();
    assert_eq!(sem["most_held"], 3, "{sem}");
}

#[cfg(feature = "sqlite")]
#[test]
fn crowd_sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    crowd(&format!("sqlite://{}", dir.path().join("bench.db").display()));
}
