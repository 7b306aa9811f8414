//! A temporary directory for one test's files, removed when the test ends: shared by the
//! test files that include it by path.

use std::path::PathBuf;

/// `kerf-{suite}-{name}-{pid}` under the system's temporary directory.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh directory for test `name` of the test file `suite`.
    pub fn new(suite: &str, name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("kerf-{suite}-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    /// Writes `content` to the file `name` in it.
    pub fn file(&self, name: &str, content: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, content).expect("written");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
