//! Reading Kubernetes manifests: YAML or JSON, multi-document, `kind: List`.
