//! Helpers shared by the integration tests: where the upstream contract files are.

use std::path::PathBuf;

/// `../shared` beside the checkout (as in CI), or `KERF_SHARED_DIR` when set.
pub fn shared_dir() -> PathBuf {
    std::env::var_os("KERF_SHARED_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared"))
}

pub fn upstream_examples_dir() -> PathBuf {
    shared_dir().join("upstream/examples")
}
