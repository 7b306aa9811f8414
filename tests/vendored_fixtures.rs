//! The vendored upstream files (tests/fixtures/upstream, deploy/dashboards) are exact copies
//! of upstream's. Where the session's `../shared/upstream` (or `$KERF_SHARED_DIR/upstream`)
//! exists beside the checkout, every vendored file is compared with it byte for byte; a
//! plain clone has nothing to compare with and checks only that the copies are complete.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};

/// The vendored directories and where their originals sit under `shared/upstream`.
const VENDORED: &[(&str, &str)] = &[
    ("tests/fixtures/upstream/crds", "crds"),
    ("tests/fixtures/upstream/examples", "examples"),
    ("deploy/dashboards", "dashboards"),
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn shared_upstream() -> Option<PathBuf> {
    std::env::var_os("KERF_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared"))
        .join("upstream")
        .canonicalize()
        .ok()
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

#[test]
fn vendored_copies_are_complete() {
    assert_eq!(files_in(&repo().join(VENDORED[0].0)).len(), 3);
    assert!(files_in(&repo().join(VENDORED[1].0)).len() >= 10);
    assert_eq!(files_in(&repo().join(VENDORED[2].0)).len(), 3);
    assert!(common::upstream_dir().join("helm-values.yaml").is_file());
}

#[test]
fn vendored_copies_equal_shared_upstream_where_present() {
    let Some(shared) = shared_upstream() else {
        eprintln!("note: no ../shared/upstream beside the checkout; nothing to compare with");
        return;
    };
    let mut pairs: Vec<(PathBuf, PathBuf)> = vec![(
        common::upstream_dir().join("helm-values.yaml"),
        shared.join("helm-values.yaml"),
    )];
    for (ours, theirs) in VENDORED {
        let (ours, theirs) = (repo().join(ours), shared.join(theirs));
        assert_eq!(files_in(&ours), files_in(&theirs), "{}", ours.display());
        for name in files_in(&ours) {
            pairs.push((ours.join(&name), theirs.join(&name)));
        }
    }
    for (ours, theirs) in pairs {
        assert!(
            std::fs::read(&ours).unwrap() == std::fs::read(&theirs).unwrap(),
            "{} differs from {}",
            ours.display(),
            theirs.display()
        );
    }
}
