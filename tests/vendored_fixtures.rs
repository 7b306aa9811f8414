//! The vendored upstream files (tests/fixtures/upstream, deploy/dashboards) are exact copies
//! of upstream's: each still has the SHA-256 recorded from its original when it was copied
//! (`tests/fixtures/upstream/SHA256SUMS`), and the vendored directories hold exactly the
//! files recorded there.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The vendored directories, from the repository root.
const VENDORED: [&str; 3] = [
    "tests/fixtures/upstream/crds",
    "tests/fixtures/upstream/examples",
    "deploy/dashboards",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "README.md")
        .collect();
    names.sort();
    names
}

/// The recorded digests, by path from the repository root.
fn recorded() -> BTreeMap<String, String> {
    let sums = common::upstream_dir().join("SHA256SUMS");
    std::fs::read_to_string(&sums)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", sums.display()))
        .lines()
        .map(|line| {
            let (digest, path) = line
                .split_once("  ")
                .unwrap_or_else(|| panic!("{}: not `DIGEST  PATH`: {line}", sums.display()));
            (path.to_owned(), digest.to_owned())
        })
        .collect()
}

fn sha256_hex(path: &Path) -> String {
    let bytes =
        std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn vendored_copies_are_complete() {
    assert_eq!(files_in(&repo().join(VENDORED[0])).len(), 5);
    assert!(files_in(&repo().join(VENDORED[1])).len() >= 10);
    assert_eq!(files_in(&repo().join(VENDORED[2])).len(), 3);
    assert!(common::upstream_dir().join("helm-values.yaml").is_file());
}

#[test]
fn vendored_copies_are_exactly_the_recorded_originals() {
    let recorded = recorded();
    let mut vendored = vec!["tests/fixtures/upstream/helm-values.yaml".to_owned()];
    for dir in VENDORED {
        vendored.extend(
            files_in(&repo().join(dir))
                .iter()
                .map(|n| format!("{dir}/{n}")),
        );
    }
    vendored.sort();
    assert_eq!(
        vendored,
        recorded.keys().cloned().collect::<Vec<_>>(),
        "the vendored files and SHA256SUMS list different files"
    );
    for (path, digest) in &recorded {
        assert_eq!(
            &sha256_hex(&repo().join(path)),
            digest,
            "{path} is no longer upstream's original"
        );
    }
}
