//! `--nodeclass FILE`: finds the one EC2NodeClass in a manifest file (or directory), checks
//! it as `kerf validate` does, reads it as the typed API object and maps it onto
//! [`AllocatableSettings`] with [`AllocatableSettings::for_node_class`]. Every error starts
//! with the file and object, in `kerf validate`'s `FILE: KIND/NAME: field.path: message`
//! form.

use kerf::api::EC2NodeClass;
use kerf::catalog::{AllocatableSettings, NodeClassSettingsError};
use kerf::manifest::{self, ManifestError, Object};
use kerf::validation::{KarpenterKind, Verdict, validate_object};
use std::path::{Path, PathBuf};

/// Why `--nodeclass FILE` gave no settings.
#[derive(Debug, thiserror::Error)]
pub enum NodeClassFileError {
    #[error(transparent)]
    ReadManifest(#[from] ManifestError),
    #[error("{}: expected exactly one EC2NodeClass, found {found}", file.display())]
    CountNodeClasses { file: PathBuf, found: usize },
    /// The problems `kerf validate` would print, one line each.
    #[error("{}", lines.join("\n"))]
    Validate { lines: Vec<String> },
    #[error("{file}: {object}: {source}")]
    MapSettings {
        file: String,
        object: String,
        #[source]
        source: NodeClassSettingsError,
    },
}

/// Settings for the one EC2NodeClass in `path` under the controller settings.
pub fn read(
    path: &Path,
    reserved_enis: u32,
    vm_memory_overhead_percent: f64,
) -> Result<(AllocatableSettings, EC2NodeClass), NodeClassFileError> {
    let object = the_node_class(path)?;
    let file = &object.source.file;
    let name = object.display_name();
    match validate_object(&object) {
        Verdict::Valid(_) => {}
        Verdict::Invalid(problems) => {
            let lines = problems
                .iter()
                .map(|problem| format!("{file}: {name}: {problem}"))
                .collect();
            return Err(NodeClassFileError::Validate { lines });
        }
        Verdict::Ignored => {
            let expected = KarpenterKind::EC2NodeClass.api_version();
            let line = format!(
                "{file}: {name}: apiVersion {:?} is not {expected}",
                object.api_version
            );
            return Err(NodeClassFileError::Validate { lines: vec![line] });
        }
    }
    let node_class: EC2NodeClass = object.to_typed()?;
    let settings =
        AllocatableSettings::for_node_class(&node_class, reserved_enis, vm_memory_overhead_percent)
            .map_err(|source| NodeClassFileError::MapSettings {
                file: file.clone(),
                object: name,
                source,
            })?;
    Ok((settings, node_class))
}

/// The only object of kind EC2NodeClass among the manifests at `path`; other kinds are
/// skipped, so a file holding a whole setup works.
fn the_node_class(path: &Path) -> Result<Object, NodeClassFileError> {
    let mut found = Vec::new();
    for (file, text) in manifest::read_path(path)? {
        found.extend(
            manifest::parse_all(&text, &file)?
                .into_iter()
                .filter(|object| object.kind == KarpenterKind::EC2NodeClass.as_str()),
        );
    }
    match <[Object; 1]>::try_from(found) {
        Ok([object]) => Ok(object),
        Err(found) => Err(NodeClassFileError::CountNodeClasses {
            file: path.to_owned(),
            found: found.len(),
        }),
    }
}
