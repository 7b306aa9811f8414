//! Helpers shared by the integration tests: where the upstream contract files are. They are
//! vendored in `tests/fixtures/upstream` (see the README there) so that a clone of the
//! repository alone runs every test.

use std::path::PathBuf;

/// The vendored copy of upstream's contract files.
pub fn upstream_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream")
}
