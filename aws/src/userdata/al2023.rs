//! Amazon Linux 2023 user data: a MIME archive ending in a nodeadm `NodeConfig` that kerf
//! generates (cluster details, inline kubelet config with taints, label flags). The user's
//! parts come first — an archive as-is, a YAML document as another `NodeConfig`, anything
//! else as a script — and nodeadm merges the NodeConfigs in order, so kerf's facts win.

use super::mime::{self, CONTENT_TYPE_NODECONFIG, CONTENT_TYPE_SHELL, MimePart};
use super::{BootstrapOptions, KubeletArgs, UserDataError};
use base64::Engine;
use serde_json::{Map, Value, json};

pub fn render(opts: &BootstrapOptions) -> Result<String, UserDataError> {
    let mut parts = custom_parts(opts.custom_user_data.as_deref())?;
    parts.push(MimePart::new(
        CONTENT_TYPE_NODECONFIG,
        &node_config_yaml(opts)?,
    ));
    Ok(mime::serialize(&parts))
}

fn custom_parts(custom: Option<&str>) -> Result<Vec<MimePart>, UserDataError> {
    let Some(text) = custom.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    if mime::looks_like_mime(text) {
        return Ok(mime::parse(text)?);
    }
    let is_yaml_mapping = serde_saphyr::from_str::<Map<String, Value>>(text).is_ok();
    let content_type = if is_yaml_mapping {
        CONTENT_TYPE_NODECONFIG
    } else {
        CONTENT_TYPE_SHELL
    };
    Ok(vec![MimePart::new(content_type, text)])
}

fn node_config_yaml(opts: &BootstrapOptions) -> Result<String, UserDataError> {
    let cidr = opts
        .cluster_cidr
        .as_deref()
        .filter(|c| !c.is_empty())
        .ok_or(UserDataError::MissingClusterCidr)?;
    let mut cluster = Map::new();
    cluster.insert("apiServerEndpoint".into(), json!(opts.cluster_endpoint));
    if let Some(ca) = opts.ca_bundle.as_deref().filter(|c| !c.is_empty()) {
        // nodeadm takes the CA as base64 bytes; checking it decodes catches a corrupt
        // bundle here rather than on every node.
        base64::engine::general_purpose::STANDARD
            .decode(ca)
            .map_err(|e| UserDataError::CaBundle(e.to_string()))?;
        cluster.insert("certificateAuthority".into(), json!(ca));
    }
    cluster.insert("cidr".into(), json!(cidr));
    cluster.insert("name".into(), json!(opts.cluster_name));

    let mut kubelet = Map::new();
    kubelet.insert("config".into(), Value::Object(inline_kubelet_config(opts)));
    if let Some(labels) = opts.node_labels_arg() {
        kubelet.insert("flags".into(), json!([labels]));
    }
    let mut spec = Map::new();
    spec.insert("cluster".into(), Value::Object(cluster));
    if opts.instance_store_raid0 {
        spec.insert(
            "instance".into(),
            json!({"localStorage": {"strategy": "RAID0"}}),
        );
    }
    spec.insert("kubelet".into(), Value::Object(kubelet));
    let config = json!({
        "apiVersion": "node.eks.aws/v1alpha1",
        "kind": "NodeConfig",
        "spec": Value::Object(spec),
    });
    let yaml =
        serde_saphyr::to_string(&config).map_err(|e| UserDataError::NodeConfig(e.to_string()))?;
    Ok(format!("# Karpenter Generated NodeConfig\n{yaml}"))
}

/// The kubelet configuration as nodeadm merges it into the kubelet's config file: every
/// field the user set, kerf's computed ones, and the taints to register with.
fn inline_kubelet_config(opts: &BootstrapOptions) -> Map<String, Value> {
    let k: &KubeletArgs = &opts.kubelet;
    let mut config = k.extra.clone();
    let mut set = |key: &str, value: Value| {
        config.insert(key.to_owned(), value);
    };
    if !k.cluster_dns.is_empty() {
        set("clusterDNS", json!(k.cluster_dns));
    }
    if let Some(v) = k.max_pods {
        set("maxPods", json!(v));
    }
    if let Some(v) = k.pods_per_core {
        set("podsPerCore", json!(v));
    }
    for (key, map) in [
        ("systemReserved", &k.system_reserved),
        ("kubeReserved", &k.kube_reserved),
        ("evictionHard", &k.eviction_hard),
        ("evictionSoft", &k.eviction_soft),
        ("evictionSoftGracePeriod", &k.eviction_soft_grace_period),
    ] {
        if !map.is_empty() {
            set(key, json!(map));
        }
    }
    if let Some(v) = k.eviction_max_pod_grace_period {
        set("evictionMaxPodGracePeriod", json!(v));
    }
    if let Some(v) = k.image_gc_high_threshold_percent {
        set("imageGCHighThresholdPercent", json!(v));
    }
    if let Some(v) = k.image_gc_low_threshold_percent {
        set("imageGCLowThresholdPercent", json!(v));
    }
    if let Some(v) = k.cpu_cfs_quota {
        set("cpuCFSQuota", json!(v));
    }
    let taints: Vec<Value> = opts
        .taints
        .iter()
        .map(|t| {
            let mut m = Map::new();
            m.insert("effect".into(), json!(t.effect));
            m.insert("key".into(), json!(t.key));
            if let Some(v) = t.value.as_deref().filter(|v| !v.is_empty()) {
                m.insert("value".into(), json!(v));
            }
            Value::Object(m)
        })
        .collect();
    set("registerWithTaints", Value::Array(taints));
    config
}

#[cfg(test)]
mod tests {
    use super::super::test_support::options;
    use super::*;

    fn node_config(user_data: &str) -> Value {
        let parts = mime::parse(user_data).unwrap();
        let last = parts.last().unwrap();
        assert_eq!(last.content_type, CONTENT_TYPE_NODECONFIG);
        serde_saphyr::from_str(&last.body).unwrap()
    }

    #[test]
    fn node_config_carries_cluster_kubelet_and_labels() {
        let mut o = options();
        o.kubelet
            .extra
            .insert("containerLogMaxSize".into(), json!("50Mi"));
        let cfg = node_config(&render(&o).unwrap());
        assert_eq!(cfg["apiVersion"], "node.eks.aws/v1alpha1");
        assert_eq!(cfg["kind"], "NodeConfig");
        let cluster = &cfg["spec"]["cluster"];
        assert_eq!(cluster["name"], "demo");
        assert_eq!(cluster["apiServerEndpoint"], "https://demo.eks.example");
        assert_eq!(cluster["certificateAuthority"], "Y2EtYnVuZGxlCg==");
        assert_eq!(cluster["cidr"], "10.100.0.0/16");
        let kubelet = &cfg["spec"]["kubelet"]["config"];
        assert_eq!(kubelet["maxPods"], 58);
        assert_eq!(kubelet["clusterDNS"], json!(["10.100.0.10"]));
        assert_eq!(kubelet["evictionHard"]["memory.available"], "5%");
        assert_eq!(kubelet["containerLogMaxSize"], "50Mi");
        assert_eq!(
            kubelet["registerWithTaints"],
            json!([
                {"effect": "NoExecute", "key": "karpenter.sh/unregistered"},
                {"effect": "NoSchedule", "key": "gpu", "value": "true"}
            ])
        );
        assert_eq!(
            cfg["spec"]["kubelet"]["flags"],
            json!([
                "--node-labels=\"karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default\""
            ])
        );
    }

    #[test]
    fn user_parts_come_first_and_yaml_is_a_node_config() {
        let mut o = options();
        o.custom_user_data =
            Some("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec: {}\n".into());
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].content_type, CONTENT_TYPE_NODECONFIG);
        assert!(parts[0].body.starts_with("apiVersion"));

        o.custom_user_data = Some("#!/bin/bash\necho hello\n".into());
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts[0].content_type, CONTENT_TYPE_SHELL);

        o.custom_user_data = Some(mime::serialize(&[MimePart::new(
            CONTENT_TYPE_SHELL,
            "echo a\n",
        )]));
        let parts = mime::parse(&render(&o).unwrap()).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].body, "echo a\n");
    }

    #[test]
    fn raid0_and_required_cidr() {
        let mut o = options();
        o.instance_store_raid0 = true;
        let cfg = node_config(&render(&o).unwrap());
        assert_eq!(cfg["spec"]["instance"]["localStorage"]["strategy"], "RAID0");
        o.cluster_cidr = None;
        assert_eq!(render(&o), Err(UserDataError::MissingClusterCidr));
        o.cluster_cidr = Some("10.0.0.0/16".into());
        o.ca_bundle = Some("not base64!".into());
        assert!(matches!(render(&o), Err(UserDataError::CaBundle(_))));
    }
}
