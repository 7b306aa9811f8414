//! `manifest::read_path` on the file system: a single file, and a directory searched
//! recursively for YAML and JSON files in sorted order, other files skipped.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use kerf::manifest::{ManifestError, parse_all, read_path};
use std::path::PathBuf;

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kerf-manifest-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("nested/deeper")).unwrap();
    dir
}

const POD: &str = "apiVersion: v1\nkind: Pod\nmetadata: {name: NAME}\n";

#[test]
fn reads_directories_recursively_and_sorted() {
    let dir = temp_dir("recursive");
    std::fs::write(dir.join("b.yaml"), POD.replace("NAME", "b")).unwrap();
    std::fs::write(dir.join("a.yml"), POD.replace("NAME", "a")).unwrap();
    std::fs::write(
        dir.join("nested/deeper/c.json"),
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"c"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("nested/notes.txt"), "not a manifest").unwrap();
    let files = read_path(&dir).unwrap();
    let names: Vec<String> = files
        .iter()
        .map(|(f, _)| {
            PathBuf::from(f)
                .strip_prefix(&dir)
                .unwrap()
                .display()
                .to_string()
        })
        .collect();
    assert_eq!(names, ["a.yml", "b.yaml", "nested/deeper/c.json"]);
    let objects: Vec<String> = files
        .iter()
        .flat_map(|(f, t)| parse_all(t, f).unwrap())
        .map(|o| o.display_name())
        .collect();
    assert_eq!(objects, ["Pod/a", "Pod/b", "Pod/c"]);
}

#[test]
fn reads_a_single_file_whatever_its_extension() {
    let dir = temp_dir("single");
    let file = dir.join("manifest");
    std::fs::write(&file, POD.replace("NAME", "x")).unwrap();
    let files = read_path(&file).unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(files[0].0, file.display().to_string());
}

#[test]
fn names_missing_paths() {
    let err = read_path(&PathBuf::from("/nonexistent/kerf")).unwrap_err();
    assert!(matches!(err, ManifestError::ReadFile { .. }));
    assert!(
        err.to_string()
            .starts_with("/nonexistent/kerf: cannot read:"),
        "{err}"
    );
}
