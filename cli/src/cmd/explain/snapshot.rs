//! The cluster listed once through the API (no watch): every kind a decision reads — pods,
//! nodes, namespaces, DaemonSets, PodDisruptionBudgets, volumes and storage classes,
//! NodePools, NodeClaims and EC2NodeClasses — read into the inventory `kerf plan` reads from
//! a dump, through the same manifest reader. Workload controllers (Deployments, ...) are not
//! listed: their pods are. A kind the cluster does not serve is a warning for the optional
//! ones and an error for kerf's own and the core kinds.

use std::path::Path;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::Pod;
use kerf::cluster::inventory::{Builder, Inventory};
use kerf::manifest::{self, Limits};
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};

/// Objects per list request: pages of a large cluster stay a few megabytes each.
const PAGE: u32 = 500;

/// (group, version, kind, plural, required)
const KINDS: &[(&str, &str, &str, &str, bool)] = &[
    ("", "v1", "Namespace", "namespaces", false),
    ("", "v1", "Node", "nodes", true),
    ("", "v1", "Pod", "pods", true),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        false,
    ),
    ("", "v1", "PersistentVolume", "persistentvolumes", false),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        false,
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", false),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        false,
    ),
    (
        "karpenter.k8s.aws",
        "v1",
        "EC2NodeClass",
        "ec2nodeclasses",
        true,
    ),
    ("karpenter.sh", "v1", "NodePool", "nodepools", true),
    ("karpenter.sh", "v1", "NodeClaim", "nodeclaims", true),
];

/// The client for `kubeconfig` (default: `KUBECONFIG`, else `~/.kube/config`, else in-cluster)
/// and `context`, as kubectl picks them.
pub async fn client(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Client> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let file = Kubeconfig::read_from(path)
                .with_context(|| format!("reading --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &options)
                .await
                .with_context(|| format!("loading --kubeconfig {}", path.display()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .context("loading the kubeconfig")?,
        None => kube::Config::infer()
            .await
            .context("loading the kubeconfig or in-cluster configuration")?,
    };
    kube::Client::try_from(config).context("building the Kubernetes client")
}

/// What one listing found.
pub struct Listed {
    pub inventory: Inventory,
    /// The nodes' `topology.kubernetes.io/region`, the first found.
    pub region: Option<String>,
    pub warnings: Vec<String>,
}

/// Lists every kind once and reads the objects into an inventory.
pub async fn list(client: &kube::Client) -> anyhow::Result<Listed> {
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    for &(group, version, kind, plural, required) in KINDS {
        match list_kind(client, group, version, kind, plural).await {
            Ok(mut listed) => items.append(&mut listed),
            Err(error) if !required => warnings.push(format!(
                "{kind}: not listed ({error:#}); decisions go without them"
            )),
            Err(error) => return Err(error),
        }
    }
    let region = items
        .iter()
        .filter(|o| o["kind"] == "Node")
        .find_map(|o| o["metadata"]["labels"]["topology.kubernetes.io/region"].as_str())
        .map(str::to_owned);
    let text = serde_json::to_vec(&json!({"apiVersion": "v1", "kind": "List", "items": items}))
        .context("encoding the listed objects")?;
    drop(items);
    let mut builder = Builder::default();
    let mut errors = Vec::new();
    let limits = Limits {
        typed_pods: true,
        ..Limits::default()
    };
    manifest::stream::read(
        text.as_slice(),
        "cluster",
        limits,
        &mut |object| match object {
            Ok(object) => builder.add(object),
            Err(error) => errors.push(error.to_string()),
        },
    )
    .context("reading the listed objects")?;
    if !errors.is_empty() {
        anyhow::bail!("reading the listed objects: {}", errors.join("; "));
    }
    let mut inventory = builder.finish().map_err(|problems| {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        anyhow::anyhow!("the cluster's objects: {}", lines.join("; "))
    })?;
    warnings.append(&mut inventory.warnings);
    Ok(Listed {
        inventory,
        region,
        warnings,
    })
}

/// Every object of one kind, each with its `apiVersion` and `kind` (list items lack them).
async fn list_kind(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> anyhow::Result<Vec<Value>> {
    let gvk = kube::api::GroupVersionKind::gvk(group, version, kind);
    let resource = ApiResource::from_gvk_with_plural(&gvk, plural);
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let mut out = Vec::new();
    let mut params = ListParams::default().limit(PAGE);
    loop {
        let page = api
            .list(&params)
            .await
            .with_context(|| format!("listing {plural}"))?;
        for object in page.items {
            let mut value =
                serde_json::to_value(&object).with_context(|| format!("encoding a {kind}"))?;
            value["apiVersion"] = Value::String(resource.api_version.clone());
            value["kind"] = Value::String(kind.to_owned());
            out.push(value);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(out),
        }
    }
}

/// The kube-scheduler's last message about pod `key`: its `PodScheduled=False` condition.
pub async fn scheduler_message(client: &kube::Client, key: &str) -> anyhow::Result<Option<String>> {
    let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let Some(pod) = pods
        .get_opt(name)
        .await
        .with_context(|| format!("reading pod {key}"))?
    else {
        return Ok(None);
    };
    Ok(pod
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .and_then(|c| c.message))
}
