//! Reading Kubernetes manifests: YAML or JSON, multi-document, `kind: List` expanded. Every
//! object keeps where it came from (file, document number, line) so that later errors can
//! point at it. Objects stay generic (`serde_json::Value` plus apiVersion, kind, name,
//! namespace) because the same reader feeds `kerf validate` (Karpenter objects) and
//! `kerf plan` (pods, deployments, nodes, ...); [`Object::to_typed`] converts one when the
//! caller knows its type.
//!
//! Input is streamed ([`stream`]): objects reach the caller one document (or `List` item) at
//! a time, already stripped of what no decision reads (`prune`), so a dump of a large
//! cluster costs the memory of what kerf keeps from it, not of its text. Only [`files`]
//! touches the file system (for the CLI and tests); parsing is pure.

mod duplicate;
mod fast;
#[cfg(test)]
mod fast_tests;
pub mod files;
mod json;
mod ordered;
mod prune;
mod split;
pub mod stream;
mod typed;

use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;

pub use files::{manifest_files, read_file, read_path, read_path_objects};
pub use stream::{DEFAULT_MAX_YAML_NODES, Limits};

/// Where an object was read from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The file name as given (or `-` for standard input).
    pub file: String,
    /// 1-based position among the file's non-empty documents.
    pub document: usize,
    /// 1-based line where the document (or the `List` item) starts, when known.
    pub line: Option<u64>,
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => write!(f, "{} (document {})", self.file, self.document),
        }
    }
}

/// One Kubernetes object from a manifest.
#[derive(Clone, Debug, PartialEq)]
pub struct Object {
    pub api_version: String,
    pub kind: String,
    pub name: Option<String>,
    pub namespace: Option<String>,
    /// The object's fields (pruned); `Null` where it was read as [`Object::pod`] instead.
    pub value: Value,
    pub source: Source,
    /// A `v1` Pod read straight into its typed form, pruned alike, when the reader was asked
    /// to ([`Limits::typed_pods`]) and could.
    pub pod: Option<Box<Pod>>,
}

impl Object {
    /// `KIND/NAME`, with `<unnamed>` when metadata.name is missing.
    pub fn display_name(&self) -> String {
        format!(
            "{}/{}",
            self.kind,
            self.name.as_deref().unwrap_or("<unnamed>")
        )
    }

    /// The API group: `karpenter.sh` for `karpenter.sh/v1`, empty for core `v1`.
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map_or("", |(group, _)| group)
    }

    /// Deserialises the object into `T`.
    pub fn to_typed<T: DeserializeOwned>(&self) -> Result<T, ManifestError> {
        serde_json::from_value(self.value.clone()).map_err(|e| ManifestError::Convert {
            source_ref: self.source.clone(),
            object: self.display_name(),
            message: e.to_string(),
        })
    }
}

/// Why manifests could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ManifestError {
    #[error("{path}: cannot read: {message}")]
    ReadFile { path: String, message: String },
    #[error("{path}: cannot list directory: {message}")]
    ReadDir { path: String, message: String },
    #[error("{}: {message}", location(file, *line))]
    Parse {
        file: String,
        line: Option<u64>,
        message: String,
    },
    /// A key set twice in one YAML mapping (which the API server's decoder refuses too);
    /// `first` is the line of its first definition where the text could be looked at again.
    #[error("{}: mapping key {key:?} {}", location(file, Some(*line)), first_definition(*first))]
    DuplicateKey {
        file: String,
        line: u64,
        column: u64,
        key: String,
        first: Option<u64>,
    },
    /// A YAML document above [`Limits::max_yaml_nodes`].
    #[error("{file}: the document has more than {limit} nodes; raise it with --max-yaml-nodes")]
    TooManyNodes { file: String, limit: usize },
    #[error("{source_ref}: {message}")]
    Document { source_ref: Source, message: String },
    #[error("{source_ref}: {object}: {message}")]
    Convert {
        source_ref: Source,
        object: String,
        message: String,
    },
}

fn location(file: &str, line: Option<u64>) -> String {
    match line {
        Some(line) => format!("{file}:{line}"),
        None => file.to_owned(),
    }
}

fn first_definition(first: Option<u64>) -> String {
    match first {
        Some(first) => format!("already defined at line {first}"),
        None => "defined twice in the same mapping".to_owned(),
    }
}

impl ManifestError {
    /// Names the first definition of a duplicated key, looking in `text` (the input the
    /// error came from); any other error is returned as it is.
    pub fn with_first_definition(self, text: &str) -> Self {
        match self {
            Self::DuplicateKey {
                file,
                line,
                column,
                key,
                first: None,
            } => Self::DuplicateKey {
                first: duplicate::first_definition(text, &key, line, column),
                file,
                line,
                column,
                key,
            },
            other => other,
        }
    }

    /// The file the error is about.
    pub fn file(&self) -> &str {
        match self {
            Self::ReadFile { path, .. } | Self::ReadDir { path, .. } => path,
            Self::Parse { file, .. }
            | Self::TooManyNodes { file, .. }
            | Self::DuplicateKey { file, .. } => file,
            Self::Document { source_ref, .. } | Self::Convert { source_ref, .. } => {
                &source_ref.file
            }
        }
    }
}

/// The objects of one manifest text, each document on its own: a broken document does not
/// hide the good ones around it. A YAML syntax error fails the whole text, since the
/// document boundaries after it cannot be trusted.
pub fn parse_str(
    text: &str,
    file: &str,
) -> Result<Vec<Result<Object, ManifestError>>, ManifestError> {
    let mut objects = Vec::new();
    stream::read(text.as_bytes(), file, Limits::default(), &mut |object| {
        objects.push(object)
    })
    .map_err(|e| e.with_first_definition(text))?;
    Ok(objects)
}

/// Like [`parse_str`], stopping at the first broken document.
pub fn parse_all(text: &str, file: &str) -> Result<Vec<Object>, ManifestError> {
    parse_str(text, file)?.into_iter().collect()
}

pub(crate) fn to_object(value: Value, source: Source) -> Result<Object, ManifestError> {
    let document_error = |message: String| ManifestError::Document {
        source_ref: source.clone(),
        message,
    };
    let Value::Object(map) = &value else {
        return Err(document_error(format!(
            "expected a Kubernetes object (a mapping), found {}",
            json_type(&value)
        )));
    };
    let text_field = |field: &str| -> Result<String, ManifestError> {
        match map.get(field) {
            Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
            Some(Value::String(_)) | None => Err(document_error(format!("{field} is not set"))),
            Some(other) => Err(document_error(format!(
                "{field} must be a string, found {}",
                json_type(other)
            ))),
        }
    };
    let api_version = text_field("apiVersion")?;
    let kind = text_field("kind")?;
    let metadata = map.get("metadata");
    let meta_text = |field: &str| {
        metadata
            .and_then(|m| m.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    Ok(Object {
        api_version,
        kind,
        name: meta_text("name"),
        namespace: meta_text("namespace"),
        source,
        value,
        pod: None,
    })
}

/// A pod the typed path read (see `typed`).
pub(crate) fn pod_object(pod: Pod, source: Source) -> Object {
    Object {
        api_version: "v1".to_owned(),
        kind: "Pod".to_owned(),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        value: Value::Null,
        source,
        pod: Some(Box::new(pod)),
    }
}

/// The JSON type name of a value, as the API server names it in errors.
pub fn json_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_multi_document_yaml_with_sources() {
        let text = "# leading comment\n---\napiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata:\n  name: a\n---\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  namespace: ns\n";
        let objects = parse_all(text, "m.yaml").unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].display_name(), "NodePool/a");
        assert_eq!(objects[0].group(), "karpenter.sh");
        assert_eq!(objects[0].source.document, 1);
        assert_eq!(objects[0].source.line, Some(3));
        assert_eq!(objects[1].namespace.as_deref(), Some("ns"));
        assert_eq!(objects[1].group(), "");
        assert_eq!(objects[1].source.document, 2);
        assert_eq!(objects[1].source.line, Some(9));
    }

    #[test]
    fn expands_lists_and_reads_json() {
        let text = r#"{"apiVersion": "v1", "kind": "List", "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a"}},
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "b"}}]}
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}"#;
        let objects = parse_all(text, "l.json").unwrap();
        let names: Vec<_> = objects.iter().map(Object::display_name).collect();
        assert_eq!(names, ["Pod/a", "Pod/b", "Node/n"]);
        assert_eq!(objects[2].source.line, Some(4));
        let typed: serde_json::Map<String, Value> = objects[0].to_typed().unwrap();
        assert_eq!(typed["kind"], "Pod");
    }

    #[test]
    fn expands_typed_lists() {
        let text = "apiVersion: v1\nkind: PodList\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n";
        let objects = parse_all(text, "l.yaml").unwrap();
        assert_eq!(objects[0].display_name(), "Pod/a");
    }

    #[test]
    fn names_file_and_line_of_syntax_errors() {
        let err = parse_str("a: 1\nb: [\n", "bad.yaml").unwrap_err();
        assert!(
            matches!(err, ManifestError::Parse { line: Some(2), .. }),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(text.starts_with("bad.yaml:2: "), "{text}");
        assert!(text.contains("unclosed bracket"), "{text}");
    }

    #[test]
    fn broken_documents_do_not_hide_good_ones() {
        let text =
            "kind: NodePool\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\n---\n- 1\n";
        let results = parse_str(text, "m.yaml").unwrap();
        assert_eq!(results.len(), 3);
        let first = results[0].as_ref().unwrap_err().to_string();
        assert_eq!(first, "m.yaml:1: apiVersion is not set");
        assert!(results[1].is_ok());
        let third = results[2].as_ref().unwrap_err().to_string();
        assert!(third.contains("found array"), "{third}");
        assert!(parse_all(text, "m.yaml").is_err());
    }

    #[test]
    fn reports_type_conversion_failures_with_the_object() {
        let objects = parse_all("apiVersion: v1\nkind: X\nmetadata: {name: nm}\n", "f").unwrap();
        let err = objects[0]
            .to_typed::<Vec<String>>()
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("f:1: X/nm: "), "{err}");
    }
}
