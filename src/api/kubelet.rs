//! The kubelet configuration an EC2NodeClass passes to its nodes. The CRD keeps it free-form
//! (any `KubeletConfiguration` field may be set and is passed through to user data); the
//! fields Karpenter itself reads for scheduling and allocatable are typed here, everything
//! else is kept verbatim in `other`.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// `spec.kubelet` of an EC2NodeClass.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    #[serde(rename = "clusterDNS", default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_dns: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_pods: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods_per_core: Option<i32>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub system_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub kube_reserved: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_hard: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    #[serde(
        rename = "imageGCHighThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_high_threshold_percent: Option<i32>,
    #[serde(
        rename = "imageGCLowThresholdPercent",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub image_gc_low_threshold_percent: Option<i32>,
    #[serde(
        rename = "cpuCFSQuota",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cpu_cfs_quota: Option<bool>,
    /// Every other `KubeletConfiguration` field, passed through unchanged.
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

impl JsonSchema for KubeletConfiguration {
    fn schema_name() -> Cow<'static, str> {
        "KubeletConfiguration".into()
    }
    fn inline_schema() -> bool {
        true
    }
    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "type": "object",
            "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true },
            "x-kubernetes-preserve-unknown-fields": true,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_known_fields_and_keeps_the_rest() {
        let json = serde_json::json!({
            "maxPods": 110,
            "clusterDNS": ["10.0.0.10"],
            "evictionHard": {"memory.available": "5%"},
            "imageGCHighThresholdPercent": 85,
            "containerLogMaxSize": "50Mi",
            "featureGates": {"Foo": true}
        });
        let kubelet: KubeletConfiguration = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(kubelet.max_pods, Some(110));
        assert_eq!(kubelet.cluster_dns, ["10.0.0.10"]);
        assert_eq!(kubelet.image_gc_high_threshold_percent, Some(85));
        assert_eq!(kubelet.other["containerLogMaxSize"], "50Mi");
        assert_eq!(serde_json::to_value(&kubelet).unwrap(), json);
    }
}
