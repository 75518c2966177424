//! The check against small crates written for each case: it finds the
//! cycles put in on purpose and none where names only pass through.

use std::path::{Path, PathBuf};

use lockkit_layers::check;

/// A crate folder with `files` (path under `src/`, text).
fn krate(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let file = dir.path().join("src").join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
        std::fs::write(file, text).expect("write");
    }
    dir
}

/// The files of each cycle, under `src/`.
fn cycles(dir: &Path) -> Vec<Vec<String>> {
    let src = dir.join("src");
    check(dir)
        .expect("checked")
        .into_iter()
        .map(|c| {
            c.files
                .iter()
                .map(|f: &PathBuf| f.strip_prefix(&src).expect("under src").display().to_string())
                .collect()
        })
        .collect()
}

#[test]
fn two_files_that_use_each_other_are_a_cycle() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "pub struct A;\npub fn f() -> crate::b::B { crate::b::B }\n"),
        ("b.rs", "use crate::a::A;\npub struct B;\npub fn g(_: A) {}\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["a.rs", "b.rs"]]);
}

#[test]
fn a_chain_without_a_way_back_is_no_cycle() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a.rs", "use crate::b::B;\npub fn f(_: B) {}\n"),
        ("b.rs", "pub struct B(pub crate::c::C);\n"),
        ("c.rs", "pub struct C;\n"),
    ]);
    assert!(cycles(dir.path()).is_empty());
}

#[test]
fn a_name_taken_through_a_re_export_counts_where_it_is_defined() {
    // `user` names `crate::Error`, which lib.rs only passes on from
    // `error`; lib.rs itself uses `user`: no cycle through lib.rs.
    let dir = krate(&[
        (
            "lib.rs",
            "mod error;\nmod user;\npub use error::Error;\npub fn run() { user::go() }\n",
        ),
        ("error.rs", "pub struct Error;\n"),
        ("user.rs", "use crate::Error;\npub fn go() { let _ = Error; }\n"),
    ]);
    assert!(cycles(dir.path()).is_empty());
    // The same name defined in lib.rs closes the circle.
    let dir = krate(&[
        ("lib.rs", "mod user;\npub struct Error;\npub fn run() { user::go() }\n"),
        ("user.rs", "use crate::Error;\npub fn go() { let _ = Error; }\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["lib.rs", "user.rs"]]);
}

#[test]
fn a_folder_module_and_its_child_that_use_each_other_are_a_cycle() {
    let dir = krate(&[
        ("lib.rs", "mod wait;\n"),
        (
            "wait/mod.rs",
            "mod live;\npub fn key() -> u8 { 1 }\npub fn start() { live::spawn() }\n",
        ),
        ("wait/live.rs", "pub fn spawn() { let _ = super::key(); }\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["wait/live.rs", "wait/mod.rs"]]);
}

#[test]
fn paths_inside_macro_calls_count() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub const A: u8 = 1;\npub fn f() { println!(\"{}\", crate::b::B); }\n",
        ),
        ("b.rs", "pub const B: u8 = crate::a::A;\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["a.rs", "b.rs"]]);
}

#[test]
fn code_only_tests_compile_is_left_out() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        (
            "a.rs",
            "pub struct A;\n#[cfg(test)]\nmod tests {\n    use crate::b::B;\n    #[test]\n    fn t() { let _ = B; }\n}\n",
        ),
        ("b.rs", "use crate::a::A;\npub struct B;\npub fn g(_: A) {}\n"),
    ]);
    assert!(cycles(dir.path()).is_empty());
}

#[test]
fn a_glob_import_counts_what_it_brings_in() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\n"),
        ("a.rs", "use crate::b::*;\npub struct A;\npub fn f() -> B { B }\n"),
        ("b.rs", "pub struct B;\npub fn g(_: crate::a::A) {}\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["a.rs", "b.rs"]]);
}

#[test]
fn names_from_other_crates_are_no_arrows() {
    let dir = krate(&[
        ("lib.rs", "mod a;\nmod b;\nuse std::sync::Arc;\n"),
        ("a.rs", "use std::sync::Arc;\npub fn f(_: Arc<u8>) { crate::b::g() }\n"),
        ("b.rs", "use super::Arc;\npub fn g() { let _ = Arc::new(1); }\n"),
    ]);
    assert!(cycles(dir.path()).is_empty());
}

#[test]
fn a_missing_module_file_is_an_error() {
    let dir = krate(&[("lib.rs", "mod gone;\n")]);
    let err = check(dir.path()).expect_err("an error");
    assert!(err.to_string().contains("gone.rs"), "{err}");
}

#[test]
fn a_name_taken_through_a_folders_mod_rs_counts_that_mod_rs_too() {
    // `faults` takes `Args` through `chaos/mod.rs`, which uses `faults`:
    // a cycle, though `Args` is defined in `chaos/args.rs`.
    let dir = krate(&[
        ("lib.rs", "mod chaos;\nmod faults;\n"),
        (
            "chaos/mod.rs",
            "mod args;\npub use args::Args;\npub fn run() { crate::faults::go() }\n",
        ),
        ("chaos/args.rs", "pub struct Args;\n"),
        ("faults.rs", "use crate::chaos::Args;\npub fn go() { let _ = Args; }\n"),
    ]);
    assert_eq!(cycles(dir.path()), [["chaos/mod.rs", "faults.rs"]]);
    // Taken from the file that defines it, no cycle.
    let dir = krate(&[
        ("lib.rs", "mod chaos;\nmod faults;\n"),
        (
            "chaos/mod.rs",
            "pub(crate) mod args;\npub fn run() { crate::faults::go() }\n",
        ),
        ("chaos/args.rs", "pub struct Args;\n"),
        (
            "faults.rs",
            "use crate::chaos::args::Args;\npub fn go() { let _ = Args; }\n",
        ),
    ]);
    assert!(cycles(dir.path()).is_empty());
}
