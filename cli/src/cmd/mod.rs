//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod catalog;
pub mod controller;
pub mod plan;
pub mod validate;

use kerf::manifest::{self, ManifestError};
use std::io::Read;
use std::path::Path;

/// The manifest texts behind one `-f` argument, as `(source name, text)`: a file, a
/// directory's manifests, or standard input for `-`.
pub fn read_sources(path: &Path) -> Result<Vec<(String, String)>, ManifestError> {
    if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|error| ManifestError::ReadFile {
                path: "-".to_owned(),
                message: error.to_string(),
            })?;
        return Ok(vec![("-".to_owned(), text)]);
    }
    manifest::read_path(path)
}
