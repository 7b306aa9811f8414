//! Discovery documents (`/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>`,
//! `/apis/<group>/<version>`) built from the resources currently served, so a CRD shows up
//! as soon as it is created. Only the legacy (unaggregated) format is served: clients that
//! ask for aggregated discovery fall back to it on seeing `application/json`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{Value, json};

use super::resources::ResourceType;

/// The Kubernetes minor version (`1.<minor>`) the emulator reports unless changed.
pub const DEFAULT_MINOR: u32 = 33;

/// The Kubernetes version the emulator reports, which a test can change as a control-plane
/// upgrade would ([`super::RunningServer::set_kubernetes_minor`]). Clones share it.
#[derive(Debug, Clone)]
pub struct ServedVersion(Arc<AtomicU32>);

impl Default for ServedVersion {
    fn default() -> Self {
        Self(Arc::new(AtomicU32::new(DEFAULT_MINOR)))
    }
}

impl ServedVersion {
    pub fn set_minor(&self, minor: u32) {
        self.0.store(minor, Ordering::Relaxed);
    }

    /// `/version`
    pub fn document(&self) -> Value {
        let minor = self.0.load(Ordering::Relaxed);
        json!({
            "major": "1", "minor": minor.to_string(), "gitVersion": format!("v1.{minor}.0"),
            "gitCommit": "kerf-emulator", "gitTreeState": "clean",
            "buildDate": "2025-04-23T00:00:00Z", "goVersion": "go1.24.2", "compiler": "gc",
            "platform": "linux/amd64",
        })
    }
}

/// `/api`
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// Versions served per non-core group, preferred first.
fn groups(types: &[Arc<ResourceType>]) -> BTreeMap<String, Vec<String>> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for rt in types.iter().filter(|rt| !rt.group.is_empty()) {
        let versions = groups.entry(rt.group.clone()).or_default();
        for v in &rt.versions {
            if !versions.contains(v) {
                versions.push(v.clone());
            }
        }
    }
    groups
}

fn group_entry(name: &str, versions: &[String]) -> Value {
    let entries: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v}))
        .collect();
    let preferred = entries.first().cloned().unwrap_or(Value::Null);
    json!({"name": name, "versions": entries, "preferredVersion": preferred})
}

/// `/apis`
pub fn group_list(types: &[Arc<ResourceType>]) -> Value {
    let groups: Vec<Value> = groups(types)
        .iter()
        .map(|(name, versions)| group_entry(name, versions))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>`, or `None` when the group is not served.
pub fn group(types: &[Arc<ResourceType>], name: &str) -> Option<Value> {
    let groups = groups(types);
    let versions = groups.get(name)?;
    let mut entry = group_entry(name, versions);
    entry["kind"] = json!("APIGroup");
    entry["apiVersion"] = json!("v1");
    Some(entry)
}

/// `/api/v1` or `/apis/<group>/<version>`, or `None` when nothing is served there.
pub fn resource_list(types: &[Arc<ResourceType>], group: &str, version: &str) -> Option<Value> {
    let mut served: Vec<&Arc<ResourceType>> = types
        .iter()
        .filter(|rt| rt.group == group && rt.serves(version))
        .collect();
    if served.is_empty() {
        return None;
    }
    served.sort_by(|a, b| a.plural.cmp(&b.plural));
    let resources: Vec<Value> = served
        .iter()
        .flat_map(|rt| rt.discovery_entries())
        .collect();
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::resources::builtin_types;

    #[test]
    fn lists_groups_and_resources() {
        let types: Vec<Arc<ResourceType>> = builtin_types().into_iter().map(Arc::new).collect();
        let groups = group_list(&types);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert!(names.contains(&"apps") && names.contains(&"policy") && !names.contains(&""));
        let core = resource_list(&types, "", "v1").expect("core is served");
        assert_eq!(core["groupVersion"], "v1");
        assert!(
            core["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|r| r["name"] == "pods/eviction")
        );
        assert!(resource_list(&types, "apps", "v2").is_none());
        assert_eq!(
            group(&types, "apps").map(|g| g["preferredVersion"]["version"].clone()),
            Some(json!("v1"))
        );
    }
}
