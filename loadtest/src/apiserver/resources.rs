//! The resource types the emulator serves: the built-in kinds a node autoscaler touches
//! and, at run time, the kinds CustomResourceDefinitions add. A [`ResourceType`] carries
//! what discovery advertises (plural, kind, scope, verbs, subresources, short names) and
//! what the write path needs (status subresource, strategic-merge support, CRD schemas).

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::schema::Schema;

/// Storage identity of a resource: group and plural (all versions share the storage).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupResource {
    /// API group, `""` for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// Builds a group/resource pair.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }
}

/// Which subresources a resource has.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Subresources {
    /// `/status`: the main endpoint ignores status, `/status` ignores everything else.
    pub status: bool,
    /// `pods/binding`
    pub binding: bool,
    /// `pods/eviction`
    pub eviction: bool,
    /// `/scale`
    pub scale: bool,
}

/// Where `/scale` reads and writes: JSON pointers to the replicas in the spec and the status
/// and to the status's label selector (a CRD's `subresources.scale` paths; a Deployment's
/// and ReplicaSet's `.spec.replicas` and `.status.replicas`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

impl Default for ScalePaths {
    fn default() -> Self {
        Self {
            spec_replicas: "/spec/replicas".into(),
            status_replicas: "/status/replicas".into(),
            label_selector: None,
        }
    }
}

impl ScalePaths {
    /// A CRD's `.a.b` JSON path as the pointer `/a/b`.
    pub fn pointer(json_path: &str) -> String {
        json_path.replace('.', "/")
    }
}

/// Special behaviour some kinds get on the write path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behavior {
    /// Plain storage.
    Generic,
    /// Graceful deletion, status reset on create, binding and eviction.
    Pod,
    /// Namespace lifecycle (phase, `kubernetes` finalizer, content cleanup).
    Namespace,
    /// A CustomResourceDefinition: creating one serves a new resource.
    CustomResourceDefinition,
}

/// One servable resource.
#[derive(Debug, Clone)]
pub struct ResourceType {
    /// API group (`""` for core).
    pub group: String,
    /// Served versions, preferred (storage) version first.
    pub versions: Vec<String>,
    /// Plural (URL) name.
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for kubectl.
    pub short_names: Vec<String>,
    /// Categories (`all`) for kubectl.
    pub categories: Vec<String>,
    /// Subresources served.
    pub subresources: Subresources,
    /// Where `/scale` reads and writes, when `subresources.scale` is served.
    pub scale_paths: ScalePaths,
    /// Write-path specials.
    pub behavior: Behavior,
    /// Built-in kinds accept strategic merge patches; custom resources do not.
    pub strategic_merge: bool,
    /// OpenAPI schema per version, for custom resources.
    pub schemas: HashMap<String, Arc<Schema>>,
    /// `additionalPrinterColumns` per version (for kubectl's table output).
    pub printer_columns: HashMap<String, Vec<Value>>,
}

impl ResourceType {
    fn builtin(
        group: &str,
        version: &str,
        plural: &str,
        kind: &str,
        namespaced: bool,
        short: &[&str],
    ) -> Self {
        Self {
            group: group.to_string(),
            versions: vec![version.to_string()],
            plural: plural.to_string(),
            singular: kind.to_ascii_lowercase(),
            kind: kind.to_string(),
            namespaced,
            short_names: short.iter().map(|s| s.to_string()).collect(),
            categories: Vec::new(),
            subresources: Subresources::default(),
            scale_paths: ScalePaths::default(),
            behavior: Behavior::Generic,
            strategic_merge: true,
            schemas: HashMap::new(),
            printer_columns: HashMap::new(),
        }
    }

    fn with_status(mut self) -> Self {
        self.subresources.status = true;
        self
    }

    fn in_all(mut self) -> Self {
        self.categories = vec!["all".to_string()];
        self
    }

    /// Storage key.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.group, &self.plural)
    }

    /// `apiVersion` for `version`.
    pub fn api_version(&self, version: &str) -> String {
        if self.group.is_empty() {
            version.to_string()
        } else {
            format!("{}/{version}", self.group)
        }
    }

    /// The preferred (storage) version.
    pub fn storage_version(&self) -> &str {
        self.versions.first().map(String::as_str).unwrap_or("v1")
    }

    /// Whether `version` is served.
    pub fn serves(&self, version: &str) -> bool {
        self.versions.iter().any(|v| v == version)
    }

    /// `<Kind>List`
    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    /// The discovery entries (`APIResource`) for this resource and its subresources.
    pub fn discovery_entries(&self) -> Vec<Value> {
        let verbs = [
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch",
        ];
        let mut main = json!({
            "name": self.plural, "singularName": self.singular, "namespaced": self.namespaced,
            "kind": self.kind, "verbs": verbs, "storageVersionHash": "",
        });
        if !self.short_names.is_empty() {
            main["shortNames"] = json!(self.short_names);
        }
        if !self.categories.is_empty() {
            main["categories"] = json!(self.categories);
        }
        let mut entries = vec![main];
        let sub = |name: &str, kind: &str, group: Option<&str>, verbs: &[&str]| {
            let mut e = json!({
                "name": format!("{}/{name}", self.plural), "singularName": "", "namespaced": self.namespaced,
                "kind": kind, "verbs": verbs,
            });
            if let Some(group) = group {
                e["group"] = json!(group);
                e["version"] = json!("v1");
            }
            e
        };
        if self.subresources.status {
            entries.push(sub("status", &self.kind, None, &["get", "patch", "update"]));
        }
        if self.subresources.scale {
            entries.push(sub(
                "scale",
                "Scale",
                Some("autoscaling"),
                &["get", "patch", "update"],
            ));
        }
        if self.subresources.binding {
            entries.push(sub("binding", "Binding", None, &["create"]));
        }
        if self.subresources.eviction {
            entries.push(sub("eviction", "Eviction", Some("policy"), &["create"]));
        }
        entries
    }
}

/// The built-in resources, as a 1.33 API server serves the subset kerf needs.
pub fn builtin_types() -> Vec<ResourceType> {
    let core =
        |plural, kind, ns, short: &[&str]| ResourceType::builtin("", "v1", plural, kind, ns, short);
    // RBAC objects are served so a chart's Roles and bindings can be applied (kubectl, the
    // chart tests); the emulator stores them like any object.
    let rbac = |plural, kind, ns| {
        ResourceType::builtin("rbac.authorization.k8s.io", "v1", plural, kind, ns, &[])
    };
    let mut pod = core("pods", "Pod", true, &["po"]).with_status().in_all();
    pod.subresources.binding = true;
    pod.subresources.eviction = true;
    pod.behavior = Behavior::Pod;
    let mut namespace = core("namespaces", "Namespace", false, &["ns"]).with_status();
    namespace.behavior = Behavior::Namespace;
    let mut deployment =
        ResourceType::builtin("apps", "v1", "deployments", "Deployment", true, &["deploy"])
            .with_status()
            .in_all();
    deployment.subresources.scale = true;
    let mut replicaset =
        ResourceType::builtin("apps", "v1", "replicasets", "ReplicaSet", true, &["rs"])
            .with_status()
            .in_all();
    replicaset.subresources.scale = true;
    let mut crd = ResourceType::builtin(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        false,
        &["crd", "crds"],
    )
    .with_status();
    crd.behavior = Behavior::CustomResourceDefinition;
    vec![
        pod,
        core("nodes", "Node", false, &["no"]).with_status(),
        namespace,
        core("events", "Event", true, &["ev"]),
        core("persistentvolumes", "PersistentVolume", false, &["pv"]).with_status(),
        core(
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
        )
        .with_status(),
        core("configmaps", "ConfigMap", true, &["cm"]),
        core("podtemplates", "PodTemplate", true, &[]),
        core("secrets", "Secret", true, &[]),
        core("serviceaccounts", "ServiceAccount", true, &["sa"]),
        core("services", "Service", true, &["svc"])
            .with_status()
            .in_all(),
        ResourceType::builtin("apps", "v1", "daemonsets", "DaemonSet", true, &["ds"])
            .with_status()
            .in_all(),
        deployment,
        replicaset,
        ResourceType::builtin("apps", "v1", "statefulsets", "StatefulSet", true, &["sts"])
            .with_status()
            .in_all(),
        // Stored only: nothing in the emulator runs a Job (`kerf simulate` makes a Job's pods
        // itself); served so a client that lists and watches them (`kerf record`) can.
        ResourceType::builtin("batch", "v1", "jobs", "Job", true, &[]).with_status(),
        ResourceType::builtin(
            "policy",
            "v1",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
        )
        .with_status(),
        ResourceType::builtin(
            "storage.k8s.io",
            "v1",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
        ),
        ResourceType::builtin("storage.k8s.io", "v1", "csinodes", "CSINode", false, &[]),
        ResourceType::builtin(
            "storage.k8s.io",
            "v1",
            "volumeattachments",
            "VolumeAttachment",
            false,
            &[],
        )
        .with_status(),
        ResourceType::builtin("coordination.k8s.io", "v1", "leases", "Lease", true, &[]),
        rbac("clusterroles", "ClusterRole", false),
        rbac("clusterrolebindings", "ClusterRoleBinding", false),
        rbac("roles", "Role", true),
        rbac("rolebindings", "RoleBinding", true),
        ResourceType::builtin("events.k8s.io", "v1", "events", "Event", true, &["ev"]),
        crd,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_advertise_their_subresources() {
        let pods = builtin_types()
            .into_iter()
            .find(|t| t.plural == "pods")
            .expect("pods are built in");
        let names: Vec<String> = pods
            .discovery_entries()
            .iter()
            .map(|e| e["name"].as_str().unwrap_or_default().to_string())
            .collect();
        assert_eq!(
            names,
            ["pods", "pods/status", "pods/binding", "pods/eviction"]
        );
        let eviction = &pods.discovery_entries()[3];
        assert_eq!(eviction["group"], "policy");
        assert_eq!(eviction["kind"], "Eviction");
        assert_eq!(pods.api_version("v1"), "v1");
    }
}
