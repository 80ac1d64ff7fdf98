//! Opening snapshot files: symbolic links, directories, and the figures a load gives.

use std::path::PathBuf;

use super::{load, Links};
use crate::memsnap::model::tests::fixture;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "torchtop-memsnap-unit-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn a_link_is_followed_for_a_typed_path_and_refused_for_a_reported_one() {
    let dir = scratch("link");
    let link = dir.join("snapshot.pickle");
    std::os::unix::fs::symlink(fixture("oom.pickle"), &link).unwrap();
    let loaded = load(&link, Links::Follow).expect("a typed path may be a link");
    assert_eq!(loaded.snapshot.segments.len(), 6);
    assert_eq!(
        loaded.file_bytes,
        std::fs::metadata(fixture("oom.pickle")).unwrap().len()
    );
    let error = load(&link, Links::Refuse)
        .err()
        .expect("refused")
        .to_string();
    assert!(error.contains("is a symbolic link"), "{error}");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_directory_is_not_a_snapshot() {
    let dir = scratch("dir");
    let error = load(&dir, Links::Follow)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        error.ends_with("is not a regular file: give the path of a snapshot pickle"),
        "{error}"
    );
    let missing = load(&dir.join("absent.pickle"), Links::Follow)
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.contains("could not be opened: No such file or directory"),
        "{missing}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn errors_name_the_file_with_control_characters_escaped() {
    let dir = scratch("escape");
    let path = dir.join("evil\x1b]0;pwned\x07.pickle");
    std::fs::write(&path, b"not a pickle").unwrap();
    let error = load(&path, Links::Follow).err().unwrap().to_string();
    assert!(
        !error.contains('\x1b') && error.contains("evil\\e]0;pwned\\x07.pickle is not a pickle"),
        "{error}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
