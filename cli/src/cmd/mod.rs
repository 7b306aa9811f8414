//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod catalog;
pub mod controller;
pub mod plan;
pub mod simulate;
pub mod validate;

use kerf::manifest::{self, Limits, ManifestError, Object};
use std::path::{Path, PathBuf};

/// Streams every object behind one `-f` argument to `sink`: a file, a directory's
/// manifests, or standard input for `-`. Read and parse errors are returned, all of them, so
/// that one run shows everything to fix.
pub fn read_each(
    path: &Path,
    limits: Limits,
    sink: &mut dyn FnMut(Result<Object, ManifestError>),
) -> Result<(), Vec<ManifestError>> {
    if path.as_os_str() == "-" {
        return manifest::stream::read(std::io::stdin(), "-", limits, sink).map_err(|e| vec![e]);
    }
    manifest::read_path_objects(path, limits, sink)
}

/// Every object of every path, or every read and parse error.
pub fn read_objects(paths: &[PathBuf]) -> Result<Vec<Object>, Vec<String>> {
    let mut objects = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        let read = read_each(path, Limits::default(), &mut |object| match object {
            Ok(object) => objects.push(object),
            Err(error) => errors.push(error.to_string()),
        });
        if let Err(failures) = read {
            errors.extend(failures.iter().map(ToString::to_string));
        }
    }
    if errors.is_empty() {
        Ok(objects)
    } else {
        Err(errors)
    }
}
