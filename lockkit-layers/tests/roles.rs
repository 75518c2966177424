//! The role-table check against guides and crate folders written for each
//! case: each kind of disagreement is found, and none where they agree.

use std::path::{Path, PathBuf};

use lockkit_layers::{LayersError, Mismatch, check_roles};

const GUIDE: &str = "# Guide\n\nEvery backend crate (`lockkit-a`, `lockkit-b`) has the same files; \
run `lockkit-layers --roles`:\n\n```\nlib.rs       crate docs\nconn         connections\n\
kinds        semaphores (not in lockkit-b: mutexes only)\n```\n\nMore text.\n";

/// A workspace folder with the guide and crates of `files` (paths under
/// the workspace).
fn workspace(guide: &str, files: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("GUIDE.md"), guide).expect("write");
    for path in files {
        let file = dir.path().join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
        std::fs::write(file, "").expect("write");
    }
    dir
}

fn check(root: &Path, crates: &[&str]) -> Result<Vec<Mismatch>, LayersError> {
    let dirs: Vec<PathBuf> = crates.iter().map(|c| root.join(c)).collect();
    check_roles(&root.join("GUIDE.md"), &dirs)
}

#[test]
fn crates_as_the_table_says_pass() {
    let ws = workspace(
        GUIDE,
        &[
            "lockkit-a/src/lib.rs",
            "lockkit-a/src/conn/mod.rs",
            "lockkit-a/src/kinds.rs",
            "lockkit-b/src/lib.rs",
            "lockkit-b/src/conn.rs",
        ],
    );
    assert_eq!(check(ws.path(), &["lockkit-a", "lockkit-b"]).expect("checked"), vec![]);
}

#[test]
fn a_missing_role_file_is_found() {
    let ws = workspace(
        GUIDE,
        &[
            "lockkit-a/src/lib.rs",
            "lockkit-a/src/kinds.rs",
            "lockkit-b/src/lib.rs",
            "lockkit-b/src/conn.rs",
        ],
    );
    let found = check(ws.path(), &["lockkit-a", "lockkit-b"]).expect("checked");
    assert_eq!(
        found,
        vec![Mismatch::Missing {
            krate: "lockkit-a".into(),
            stem: "conn".into()
        }]
    );
    assert!(found[0].to_string().contains("no conn.rs or conn/"), "{}", found[0]);
}

#[test]
fn an_excuse_for_a_file_the_crate_has_is_found() {
    let ws = workspace(
        GUIDE,
        &[
            "lockkit-a/src/lib.rs",
            "lockkit-a/src/conn.rs",
            "lockkit-a/src/kinds/mod.rs",
            "lockkit-b/src/lib.rs",
            "lockkit-b/src/conn.rs",
            "lockkit-b/src/kinds/mod.rs",
        ],
    );
    assert_eq!(
        check(ws.path(), &["lockkit-a", "lockkit-b"]).expect("checked"),
        vec![Mismatch::Excused {
            krate: "lockkit-b".into(),
            stem: "kinds".into()
        }]
    );
}

#[test]
fn a_backend_crate_the_table_does_not_name_is_found() {
    let ws = workspace(
        GUIDE,
        &[
            "lockkit-a/src/lib.rs",
            "lockkit-a/src/conn.rs",
            "lockkit-a/src/kinds.rs",
            "lockkit-b/src/lib.rs",
            "lockkit-b/src/conn.rs",
            "lockkit-c/src/backend.rs",
            "lockkit-core/src/backend.rs",
        ],
    );
    assert_eq!(
        check(ws.path(), &["lockkit-a", "lockkit-b", "lockkit-c", "lockkit-core"]).expect("checked"),
        vec![Mismatch::Unlisted {
            krate: "lockkit-c".into()
        }]
    );
}

#[test]
fn a_guide_without_the_table_or_a_named_crate_missing_is_an_error() {
    let ws = workspace("# Guide\n\nNo table here.\n", &["lockkit-a/src/lib.rs"]);
    assert!(matches!(
        check(ws.path(), &["lockkit-a"]),
        Err(LayersError::Guide { .. })
    ));
    let ws = workspace(GUIDE, &["lockkit-a/src/lib.rs"]);
    let e = check(ws.path(), &["lockkit-a"]).expect_err("lockkit-b is not checked");
    assert!(e.to_string().contains("lockkit-b"), "{e}");
}
