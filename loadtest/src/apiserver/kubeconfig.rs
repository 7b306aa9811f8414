//! A kubeconfig pointing at the emulator: plain `http://` server URL, no credentials, one
//! context named `kerf-sim` that is current. kube-rs, client-go and kubectl read it as is.

use std::path::Path;

/// Name of the cluster, user and context in the kubeconfig.
pub const CONTEXT: &str = "kerf-sim";

/// The kubeconfig text for a server at `url`.
pub fn render(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {CONTEXT}
  cluster:
    server: {url}
contexts:
- name: {CONTEXT}
  context:
    cluster: {CONTEXT}
    user: {CONTEXT}
    namespace: default
current-context: {CONTEXT}
users:
- name: {CONTEXT}
  user: {{}}
preferences: {{}}
"
    )
}

/// Writes the kubeconfig to `path`, naming the file in the error.
pub fn write(path: &Path, url: &str) -> Result<(), std::io::Error> {
    std::fs::write(path, render(url)).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("writing kubeconfig {}: {e}", path.display()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_valid_yaml_with_the_server() {
        let doc: serde_json::Value =
            serde_saphyr::from_str(&render("http://127.0.0.1:1234")).expect("valid YAML");
        assert_eq!(
            doc["clusters"][0]["cluster"]["server"],
            "http://127.0.0.1:1234"
        );
        assert_eq!(doc["current-context"], CONTEXT);
    }
}
