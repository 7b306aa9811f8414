//! User data per AMI family: what a new instance runs to join the cluster. AL2 calls
//! `/etc/eks/bootstrap.sh` with arguments, AL2023 reads a nodeadm `NodeConfig` from a MIME
//! archive, Bottlerocket reads TOML settings, Windows runs a PowerShell bootstrap, and Custom
//! AMIs get the user's text unchanged. Each merges the user's `spec.userData` as upstream
//! Karpenter does, and all carry the same facts: cluster name, endpoint and CA bundle, DNS IP,
//! max pods, node labels, taints (with `karpenter.sh/unregistered`) and kubelet settings.
//! [`render`] returns plain text; the launch template base64-encodes it.

mod al2;
mod al2023;
mod bottlerocket;
pub mod mime;
mod windows;

use k8s_openapi::api::core::v1::Taint;
use std::collections::BTreeMap;
use std::net::IpAddr;
use thiserror::Error;

/// The bootstrap format of an AMI family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UserDataFormat {
    Al2,
    Al2023,
    Bottlerocket,
    Windows,
    Custom,
}

/// The kubelet settings user data passes on; `extra` holds every other
/// `KubeletConfiguration` field, which only AL2023 (an inline config) can carry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KubeletArgs {
    pub cluster_dns: Vec<String>,
    pub max_pods: Option<i32>,
    pub pods_per_core: Option<i32>,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub eviction_hard: BTreeMap<String, String>,
    pub eviction_soft: BTreeMap<String, String>,
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    pub eviction_max_pod_grace_period: Option<i32>,
    pub image_gc_high_threshold_percent: Option<i32>,
    pub image_gc_low_threshold_percent: Option<i32>,
    pub cpu_cfs_quota: Option<bool>,
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// Everything user data is rendered from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BootstrapOptions {
    pub cluster_name: String,
    pub cluster_endpoint: String,
    /// The cluster's service CIDR (AL2023 requires it).
    pub cluster_cidr: Option<String>,
    /// Base64 PEM bundle of the cluster CA.
    pub ca_bundle: Option<String>,
    pub kubelet: KubeletArgs,
    pub taints: Vec<Taint>,
    pub labels: BTreeMap<String, String>,
    /// The EC2NodeClass's `spec.userData`.
    pub custom_user_data: Option<String>,
    /// `instanceStorePolicy: RAID0`.
    pub instance_store_raid0: bool,
}

/// Why user data could not be rendered. Each names the field a user should fix.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum UserDataError {
    #[error("spec.userData is not a valid MIME archive: {0}")]
    CustomMime(#[from] mime::MimeError),
    #[error("spec.userData is not valid Bottlerocket TOML: {0}")]
    CustomToml(String),
    #[error(
        "AL2023 user data needs the cluster's service CIDR (nodeadm's spec.cluster.cidr); \
         it has not been resolved yet"
    )]
    MissingClusterCidr,
    #[error("the cluster CA bundle is not valid base64: {0}")]
    CaBundle(String),
    #[error("rendering the nodeadm NodeConfig failed: {0}")]
    NodeConfig(String),
}

impl BootstrapOptions {
    /// Whether the cluster is IPv6 (its DNS service IP is).
    pub fn is_ipv6(&self) -> bool {
        self.kubelet
            .cluster_dns
            .first()
            .and_then(|ip| ip.parse::<IpAddr>().ok())
            .is_some_and(|ip| ip.is_ipv6())
    }

    /// `--node-labels="k=v,..."` (sorted), absent without labels.
    fn node_labels_arg(&self) -> Option<String> {
        if self.labels.is_empty() {
            return None;
        }
        let joined: Vec<String> = self
            .labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        Some(format!("--node-labels=\"{}\"", joined.join(",")))
    }

    fn taints_arg(&self) -> String {
        let joined: Vec<String> = self.taints.iter().map(taint_string).collect();
        format!("--register-with-taints=\"{}\"", joined.join(","))
    }

    /// The kubelet flags AL2 and Windows pass through `--kubelet-extra-args`.
    fn kubelet_extra_args(&self) -> Vec<String> {
        let k = &self.kubelet;
        let mut args: Vec<String> = self.node_labels_arg().into_iter().collect();
        args.push(self.taints_arg());
        if let Some(max_pods) = k.max_pods {
            args.push(format!("--max-pods={max_pods}"));
        }
        if let Some(ppc) = k.pods_per_core {
            args.push(format!("--pods-per-core={ppc}"));
        }
        args.extend(map_arg("--system-reserved", &k.system_reserved, "="));
        args.extend(map_arg("--kube-reserved", &k.kube_reserved, "="));
        args.extend(map_arg("--eviction-hard", &k.eviction_hard, "<"));
        args.extend(map_arg("--eviction-soft", &k.eviction_soft, "<"));
        args.extend(map_arg(
            "--eviction-soft-grace-period",
            &k.eviction_soft_grace_period,
            "=",
        ));
        if let Some(v) = k.eviction_max_pod_grace_period {
            args.push(format!("--eviction-max-pod-grace-period={v}"));
        }
        if let Some(v) = k.image_gc_high_threshold_percent {
            args.push(format!("--image-gc-high-threshold={v}"));
        }
        if let Some(v) = k.image_gc_low_threshold_percent {
            args.push(format!("--image-gc-low-threshold={v}"));
        }
        if let Some(v) = k.cpu_cfs_quota {
            args.push(format!("--cpu-cfs-quota={v}"));
        }
        args
    }
}

/// `key=value:Effect`, or `key:Effect` without a value, as kubelet flags take taints.
pub fn taint_string(t: &Taint) -> String {
    match t.value.as_deref() {
        Some(v) if !v.is_empty() => format!("{}={}:{}", t.key, v, t.effect),
        _ => format!("{}:{}", t.key, t.effect),
    }
}

fn map_arg(name: &str, map: &BTreeMap<String, String>, sep: &str) -> Option<String> {
    if map.is_empty() {
        return None;
    }
    let joined: Vec<String> = map.iter().map(|(k, v)| format!("{k}{sep}{v}")).collect();
    Some(format!("{name}=\"{}\"", joined.join(",")))
}

/// Renders the user data of `format` (plain text, not base64).
pub fn render(format: UserDataFormat, opts: &BootstrapOptions) -> Result<String, UserDataError> {
    match format {
        UserDataFormat::Al2 => al2::render(opts),
        UserDataFormat::Al2023 => al2023::render(opts),
        UserDataFormat::Bottlerocket => bottlerocket::render(opts),
        UserDataFormat::Windows => Ok(windows::render(opts)),
        UserDataFormat::Custom => Ok(opts.custom_user_data.clone().unwrap_or_default()),
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.to_owned(),
            value: value.map(str::to_owned),
            effect: effect.to_owned(),
            time_added: None,
        }
    }

    pub fn options() -> BootstrapOptions {
        BootstrapOptions {
            cluster_name: "demo".into(),
            cluster_endpoint: "https://demo.eks.example".into(),
            cluster_cidr: Some("10.100.0.0/16".into()),
            ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
            kubelet: KubeletArgs {
                cluster_dns: vec!["10.100.0.10".into()],
                max_pods: Some(58),
                eviction_hard: BTreeMap::from([("memory.available".into(), "5%".into())]),
                ..KubeletArgs::default()
            },
            taints: vec![
                taint("karpenter.sh/unregistered", None, "NoExecute"),
                taint("gpu", Some("true"), "NoSchedule"),
            ],
            labels: BTreeMap::from([
                ("karpenter.sh/nodepool".into(), "default".into()),
                ("karpenter.sh/capacity-type".into(), "spot".into()),
            ]),
            custom_user_data: None,
            instance_store_raid0: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn kubelet_flags_in_upstream_order() {
        let args = options().kubelet_extra_args();
        assert_eq!(
            args,
            vec![
                "--node-labels=\"karpenter.sh/capacity-type=spot,karpenter.sh/nodepool=default\"",
                "--register-with-taints=\"karpenter.sh/unregistered:NoExecute,gpu=true:NoSchedule\"",
                "--max-pods=58",
                "--eviction-hard=\"memory.available<5%\"",
            ]
        );
    }

    #[test]
    fn ipv6_follows_the_dns_ip() {
        let mut o = options();
        assert!(!o.is_ipv6());
        o.kubelet.cluster_dns = vec!["fd00::a".into()];
        assert!(o.is_ipv6());
    }

    #[test]
    fn custom_is_passed_through() {
        let mut o = options();
        o.custom_user_data = Some("anything at all".into());
        assert_eq!(
            render(UserDataFormat::Custom, &o).unwrap(),
            "anything at all"
        );
    }
}
