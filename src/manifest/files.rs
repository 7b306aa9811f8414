//! The manifest reader's one edge to the file system: which files a path names (a file, or
//! every `*.yaml`, `*.yml` and `*.json` below a directory, sorted) and their objects streamed
//! through [`super::stream`], or their text. Used by the CLI's commands and the tests; the
//! controller never calls it.

use std::path::{Path, PathBuf};

use super::stream::{self, Limits};
use super::{ManifestError, Object};

/// The manifest files a path names: the file itself, or every `*.yaml`, `*.yml` and
/// `*.json` below a directory (recursively, sorted by path).
pub fn manifest_files(path: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let metadata = std::fs::metadata(path).map_err(|e| ManifestError::ReadFile {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    if !metadata.is_dir() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    collect_manifest_files(path, &mut files)?;
    files.sort();
    Ok(files)
}

fn collect_manifest_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let read_dir_error = |e: std::io::Error| ManifestError::ReadDir {
        path: dir.display().to_string(),
        message: e.to_string(),
    };
    for entry in std::fs::read_dir(dir).map_err(read_dir_error)? {
        let path = entry.map_err(read_dir_error)?.path();
        if path.is_dir() {
            collect_manifest_files(&path, out)?;
        } else if is_manifest_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

fn is_manifest_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| matches!(e, "yaml" | "yml" | "json"))
}

/// Streams every object of every manifest file `path` names to `sink` (see
/// [`stream::read`]). A file that cannot be opened or parsed does not stop the others: every
/// such error is returned once all files were read.
pub fn read_path_objects(
    path: &Path,
    limits: Limits,
    sink: &mut dyn FnMut(Result<Object, ManifestError>),
) -> Result<(), Vec<ManifestError>> {
    let files = manifest_files(path).map_err(|e| vec![e])?;
    let errors: Vec<ManifestError> = files
        .iter()
        .filter_map(|file| read_file(file, limits, sink).err())
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}

/// Streams the objects of one file to `sink`.
pub fn read_file(
    file: &Path,
    limits: Limits,
    sink: &mut dyn FnMut(Result<Object, ManifestError>),
) -> Result<(), ManifestError> {
    let name = file.display().to_string();
    let input = std::fs::File::open(file).map_err(|e| ManifestError::ReadFile {
        path: name.clone(),
        message: e.to_string(),
    })?;
    stream::read(input, &name, limits, sink).map_err(|error| match error {
        // Only now is the text needed again, to find where the key was first defined.
        ManifestError::DuplicateKey { .. } => match std::fs::read_to_string(file) {
            Ok(text) => error.with_first_definition(&text),
            Err(_) => error,
        },
        other => other,
    })
}

/// The text of every manifest file a path names, with the file name to report.
pub fn read_path(path: &Path) -> Result<Vec<(String, String)>, ManifestError> {
    manifest_files(path)?
        .into_iter()
        .map(|file| {
            let name = file.display().to_string();
            std::fs::read_to_string(&file)
                .map(|text| (name.clone(), text))
                .map_err(|e| ManifestError::ReadFile {
                    path: name,
                    message: e.to_string(),
                })
        })
        .collect()
}
