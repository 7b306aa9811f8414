//! One module per subcommand; each exposes `Args` (clap) and `run(Args) -> ExitCode`.

pub mod catalog;
pub mod controller;
pub mod explain;
pub mod plan;
pub mod record;
pub mod simulate;
pub mod validate;

use kerf::manifest::{self, Limits, ManifestError, Object};
use std::path::Path;

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

/// A Go duration (`90s`, `5m`, `1h30m`), as the API's fields and upstream's flags write them.
pub fn go_duration(text: &str) -> Result<std::time::Duration, String> {
    kerf::api::duration::Duration::parse(text)
        .map(|d| d.as_std())
        .map_err(|e| e.to_string())
}
