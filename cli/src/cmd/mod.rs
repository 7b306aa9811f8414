//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod catalog;
pub mod controller;
pub mod plan;
pub mod simulate;
pub mod validate;

use kerf::manifest::{self, ManifestError, Object};
use std::io::Read;
use std::path::{Path, PathBuf};

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

/// Every object of every path, or every read and parse error (all of them, so that one run
/// shows everything to fix).
pub fn read_objects(paths: &[PathBuf]) -> Result<Vec<Object>, Vec<String>> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let sources = match read_sources(path) {
            Ok(sources) => sources,
            Err(error) => {
                errors.push(error.to_string());
                continue;
            }
        };
        for (file, text) in sources {
            match manifest::parse_str(&text, &file) {
                Ok(documents) => {
                    for document in documents {
                        match document {
                            Ok(object) => objects.push(object),
                            Err(error) => errors.push(error.to_string()),
                        }
                    }
                }
                Err(error) => errors.push(error.to_string()),
            }
        }
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(errors)
    }
}
