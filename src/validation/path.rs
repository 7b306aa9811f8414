//! Field paths in the API server's notation (`spec.template.spec.requirements[0].operator`,
//! `spec.tags[kubernetes.io/cluster/x]`) and the problems reported at them.

use std::fmt;

/// A path from the object root to a field.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    pub fn root() -> Self {
        Self::default()
    }

    pub fn child(&self, name: &str) -> Self {
        if self.0.is_empty() {
            Self(name.to_owned())
        } else {
            Self(format!("{}.{name}", self.0))
        }
    }

    pub fn index(&self, index: usize) -> Self {
        Self(format!("{}[{index}]", self.0))
    }

    pub fn key(&self, key: &str) -> Self {
        Self(format!("{}[{key}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One thing wrong with an object: where, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: String,
    pub message: String,
}

impl Problem {
    pub fn new(path: &FieldPath, message: impl Into<String>) -> Self {
        Self {
            path: path.as_str().to_owned(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            f.write_str(&self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_api_server_style_paths() {
        let p = FieldPath::root()
            .child("spec")
            .child("requirements")
            .index(0)
            .child("key");
        assert_eq!(p.as_str(), "spec.requirements[0].key");
        assert_eq!(
            FieldPath::root()
                .child("spec")
                .child("tags")
                .key("a/b")
                .as_str(),
            "spec.tags[a/b]"
        );
        assert_eq!(
            Problem::new(&p, "Required value").to_string(),
            "spec.requirements[0].key: Required value"
        );
    }
}
