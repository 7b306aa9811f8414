//! Karpenter-side checks of an EC2NodeClass's free-form `spec.kubelet`: every field must be
//! a `KubeletConfiguration` field (Kubernetes 1.34) of the right JSON type, and the fields
//! Karpenter reads must make sense (eviction signals, reserved resources, GC thresholds).
//! The API server accepts any kubelet object; upstream reports these on the EC2NodeClass's
//! `ValidationSucceeded` condition instead, and the NodeClass never becomes ready.

use super::path::{FieldPath, Problem};
use crate::api::Duration;
use crate::manifest::json_type;
use regex::Regex;
use serde_json::{Map, Value};
use std::sync::LazyLock;

/// The JSON shape of a KubeletConfiguration field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    Bool,
    Int32,
    Int64,
    Number,
    String,
    Duration,
    StringMap,
    StringListMap,
    BoolMap,
    StringList,
    Int32List,
    Object,
    ObjectList,
}

/// Every field of `kubelet.config.k8s.io/v1beta1` KubeletConfiguration (Kubernetes 1.34).
pub const KUBELET_FIELDS: &[(&str, FieldType)] = &[
    ("enableServer", FieldType::Bool),
    ("staticPodPath", FieldType::String),
    ("podLogsDir", FieldType::String),
    ("syncFrequency", FieldType::Duration),
    ("fileCheckFrequency", FieldType::Duration),
    ("httpCheckFrequency", FieldType::Duration),
    ("staticPodURL", FieldType::String),
    ("staticPodURLHeader", FieldType::StringListMap),
    ("address", FieldType::String),
    ("port", FieldType::Int32),
    ("readOnlyPort", FieldType::Int32),
    ("tlsCertFile", FieldType::String),
    ("tlsPrivateKeyFile", FieldType::String),
    ("tlsCipherSuites", FieldType::StringList),
    ("tlsMinVersion", FieldType::String),
    ("rotateCertificates", FieldType::Bool),
    ("serverTLSBootstrap", FieldType::Bool),
    ("authentication", FieldType::Object),
    ("authorization", FieldType::Object),
    ("registryPullQPS", FieldType::Int32),
    ("registryBurst", FieldType::Int32),
    ("imagePullCredentialsVerificationPolicy", FieldType::String),
    (
        "preloadedImagesVerificationAllowlist",
        FieldType::StringList,
    ),
    ("eventRecordQPS", FieldType::Int32),
    ("eventBurst", FieldType::Int32),
    ("enableDebuggingHandlers", FieldType::Bool),
    ("enableContentionProfiling", FieldType::Bool),
    ("healthzPort", FieldType::Int32),
    ("healthzBindAddress", FieldType::String),
    ("oomScoreAdj", FieldType::Int32),
    ("clusterDomain", FieldType::String),
    ("clusterDNS", FieldType::StringList),
    ("streamingConnectionIdleTimeout", FieldType::Duration),
    ("nodeStatusUpdateFrequency", FieldType::Duration),
    ("nodeStatusReportFrequency", FieldType::Duration),
    ("nodeLeaseDurationSeconds", FieldType::Int32),
    ("imageMinimumGCAge", FieldType::Duration),
    ("imageMaximumGCAge", FieldType::Duration),
    ("imageGCHighThresholdPercent", FieldType::Int32),
    ("imageGCLowThresholdPercent", FieldType::Int32),
    ("volumeStatsAggPeriod", FieldType::Duration),
    ("kubeletCgroups", FieldType::String),
    ("systemCgroups", FieldType::String),
    ("cgroupRoot", FieldType::String),
    ("cgroupsPerQOS", FieldType::Bool),
    ("cgroupDriver", FieldType::String),
    ("cpuManagerPolicy", FieldType::String),
    ("singleProcessOOMKill", FieldType::Bool),
    ("cpuManagerPolicyOptions", FieldType::StringMap),
    ("cpuManagerReconcilePeriod", FieldType::Duration),
    ("memoryManagerPolicy", FieldType::String),
    ("topologyManagerPolicy", FieldType::String),
    ("topologyManagerScope", FieldType::String),
    ("topologyManagerPolicyOptions", FieldType::StringMap),
    ("qosReserved", FieldType::StringMap),
    ("runtimeRequestTimeout", FieldType::Duration),
    ("hairpinMode", FieldType::String),
    ("maxPods", FieldType::Int32),
    ("podCIDR", FieldType::String),
    ("podPidsLimit", FieldType::Int64),
    ("resolvConf", FieldType::String),
    ("runOnce", FieldType::Bool),
    ("cpuCFSQuota", FieldType::Bool),
    ("cpuCFSQuotaPeriod", FieldType::Duration),
    ("nodeStatusMaxImages", FieldType::Int32),
    ("maxOpenFiles", FieldType::Int64),
    ("contentType", FieldType::String),
    ("kubeAPIQPS", FieldType::Int32),
    ("kubeAPIBurst", FieldType::Int32),
    ("serializeImagePulls", FieldType::Bool),
    ("maxParallelImagePulls", FieldType::Int32),
    ("evictionHard", FieldType::StringMap),
    ("evictionSoft", FieldType::StringMap),
    ("evictionSoftGracePeriod", FieldType::StringMap),
    ("evictionPressureTransitionPeriod", FieldType::Duration),
    ("evictionMaxPodGracePeriod", FieldType::Int32),
    ("evictionMinimumReclaim", FieldType::StringMap),
    ("mergeDefaultEvictionSettings", FieldType::Bool),
    ("podsPerCore", FieldType::Int32),
    ("enableControllerAttachDetach", FieldType::Bool),
    ("protectKernelDefaults", FieldType::Bool),
    ("makeIPTablesUtilChains", FieldType::Bool),
    ("iptablesMasqueradeBit", FieldType::Int32),
    ("iptablesDropBit", FieldType::Int32),
    ("featureGates", FieldType::BoolMap),
    ("failSwapOn", FieldType::Bool),
    ("memorySwap", FieldType::Object),
    ("containerLogMaxSize", FieldType::String),
    ("containerLogMaxFiles", FieldType::Int32),
    ("containerLogMaxWorkers", FieldType::Int32),
    ("containerLogMonitorInterval", FieldType::Duration),
    (
        "configMapAndSecretChangeDetectionStrategy",
        FieldType::String,
    ),
    ("systemReserved", FieldType::StringMap),
    ("kubeReserved", FieldType::StringMap),
    ("reservedSystemCPUs", FieldType::String),
    ("showHiddenMetricsForVersion", FieldType::String),
    ("systemReservedCgroup", FieldType::String),
    ("kubeReservedCgroup", FieldType::String),
    ("enforceNodeAllocatable", FieldType::StringList),
    ("allowedUnsafeSysctls", FieldType::StringList),
    ("volumePluginDir", FieldType::String),
    ("providerID", FieldType::String),
    ("kernelMemcgNotification", FieldType::Bool),
    ("logging", FieldType::Object),
    ("enableSystemLogHandler", FieldType::Bool),
    ("enableSystemLogQuery", FieldType::Bool),
    ("shutdownGracePeriod", FieldType::Duration),
    ("shutdownGracePeriodCriticalPods", FieldType::Duration),
    ("shutdownGracePeriodByPodPriority", FieldType::ObjectList),
    ("crashLoopBackOff", FieldType::Object),
    ("reservedMemory", FieldType::ObjectList),
    ("enableProfilingHandler", FieldType::Bool),
    ("enableDebugFlagsHandler", FieldType::Bool),
    ("seccompDefault", FieldType::Bool),
    ("memoryThrottlingFactor", FieldType::Number),
    ("registerWithTaints", FieldType::ObjectList),
    ("registerNode", FieldType::Bool),
    ("tracing", FieldType::Object),
    ("localStorageCapacityIsolation", FieldType::Bool),
    ("containerRuntimeEndpoint", FieldType::String),
    ("imageServiceEndpoint", FieldType::String),
    ("failCgroupV1", FieldType::Bool),
    ("userNamespaces", FieldType::Object),
];

const EVICTION_SIGNALS: [&str; 6] = [
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "pid.available",
];

const RESERVED_RESOURCES: [&str; 4] = ["cpu", "memory", "ephemeral-storage", "pid"];

static QUANTITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$")
        .expect("quantity pattern compiles")
});

static PERCENTAGE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^(\d{1,2}(\.\d{1,2})?|100(\.0{1,2})?)%$").expect("percentage pattern compiles")
});

/// Problems with `spec.kubelet` (an object: the schema has checked that).
pub fn validate_kubelet(kubelet: &Map<String, Value>, path: &FieldPath) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (name, value) in kubelet {
        let field = path.child(name);
        match KUBELET_FIELDS.iter().find(|(n, _)| n == name) {
            Some((_, ty)) => check_type(*ty, value, &field, &mut problems),
            None => problems.push(Problem::new(&field, "unknown KubeletConfiguration field")),
        }
    }
    if problems.is_empty() {
        check_semantics(kubelet, path, &mut problems);
    }
    problems
}

fn check_type(ty: FieldType, value: &Value, path: &FieldPath, problems: &mut Vec<Problem>) {
    let wrong = |expected: &str| {
        Problem::new(
            path,
            format!("must be {expected}, not {}", json_type(value)),
        )
    };
    let ok = match ty {
        FieldType::Bool => value.is_boolean(),
        FieldType::Int32 => value.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        FieldType::Int64 => value.is_i64(),
        FieldType::Number => value.is_number(),
        FieldType::String => value.is_string(),
        FieldType::Duration => value.is_string(),
        FieldType::StringMap => values_all(value, Value::is_string),
        FieldType::BoolMap => values_all(value, Value::is_boolean),
        FieldType::StringListMap => values_all(value, |v| elements_all(v, Value::is_string)),
        FieldType::StringList => elements_all(value, Value::is_string),
        FieldType::Int32List => elements_all(value, |v| {
            v.as_i64().is_some_and(|n| i32::try_from(n).is_ok())
        }),
        FieldType::Object => value.is_object(),
        FieldType::ObjectList => elements_all(value, Value::is_object),
    };
    if !ok {
        problems.push(wrong(type_description(ty)));
        return;
    }
    if ty == FieldType::Duration {
        let text = value.as_str().unwrap_or_default();
        if let Err(e) = Duration::parse(text.strip_prefix('-').unwrap_or(text)) {
            problems.push(Problem::new(path, e.to_string()));
        }
    }
}

fn type_description(ty: FieldType) -> &'static str {
    match ty {
        FieldType::Bool => "a boolean",
        FieldType::Int32 => "a 32-bit integer",
        FieldType::Int64 => "an integer",
        FieldType::Number => "a number",
        FieldType::String => "a string",
        FieldType::Duration => "a duration string",
        FieldType::StringMap => "a map of strings",
        FieldType::BoolMap => "a map of booleans",
        FieldType::StringListMap => "a map of string lists",
        FieldType::StringList => "a list of strings",
        FieldType::Int32List => "a list of 32-bit integers",
        FieldType::Object => "an object",
        FieldType::ObjectList => "a list of objects",
    }
}

fn values_all(value: &Value, f: impl Fn(&Value) -> bool) -> bool {
    value.as_object().is_some_and(|m| m.values().all(f))
}

fn elements_all(value: &Value, f: impl Fn(&Value) -> bool) -> bool {
    value.as_array().is_some_and(|a| a.iter().all(f))
}

fn string_map<'a>(kubelet: &'a Map<String, Value>, name: &str) -> Vec<(&'a str, &'a str)> {
    kubelet
        .get(name)
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.as_str(), v.as_str().unwrap_or_default()))
        .collect()
}

fn check_semantics(kubelet: &Map<String, Value>, path: &FieldPath, problems: &mut Vec<Problem>) {
    for name in ["evictionHard", "evictionSoft", "evictionSoftGracePeriod"] {
        for (signal, value) in string_map(kubelet, name) {
            let at = path.child(name).key(signal);
            if !EVICTION_SIGNALS.contains(&signal) {
                let valid = EVICTION_SIGNALS.join("', '");
                problems.push(Problem::new(
                    &at,
                    format!("valid keys for {name} are ['{valid}']"),
                ));
            } else if name == "evictionSoftGracePeriod" {
                if let Err(e) = Duration::parse(value) {
                    problems.push(Problem::new(&at, e.to_string()));
                }
            } else if !(PERCENTAGE.is_match(value) || QUANTITY.is_match(value)) {
                problems.push(Problem::new(
                    &at,
                    format!("Invalid value: {value:?}: must be a percentage or a quantity"),
                ));
            }
        }
    }
    check_soft_pairs(kubelet, path, problems);
    for name in ["kubeReserved", "systemReserved"] {
        for (resource, value) in string_map(kubelet, name) {
            let at = path.child(name).key(resource);
            if !RESERVED_RESOURCES.contains(&resource) {
                problems.push(Problem::new(
                    &at,
                    format!("valid keys for {name} are ['cpu','memory','ephemeral-storage','pid']"),
                ));
            } else if !QUANTITY.is_match(value) {
                problems.push(Problem::new(
                    &at,
                    format!("Invalid value: {value:?}: must be a quantity"),
                ));
            } else if value.starts_with('-') {
                problems.push(Problem::new(
                    &at,
                    format!("{name} value cannot be a negative resource quantity"),
                ));
            }
        }
    }
    check_bounds(kubelet, path, problems);
}

fn check_soft_pairs(kubelet: &Map<String, Value>, path: &FieldPath, problems: &mut Vec<Problem>) {
    let soft = string_map(kubelet, "evictionSoft");
    let grace = string_map(kubelet, "evictionSoftGracePeriod");
    for (signal, _) in &soft {
        if !grace.iter().any(|(g, _)| g == signal) {
            problems.push(Problem::new(
                &path.child("evictionSoft").key(signal),
                "evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
            ));
        }
    }
    for (signal, _) in &grace {
        if !soft.iter().any(|(s, _)| s == signal) {
            problems.push(Problem::new(
                &path.child("evictionSoftGracePeriod").key(signal),
                "evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            ));
        }
    }
}

fn check_bounds(kubelet: &Map<String, Value>, path: &FieldPath, problems: &mut Vec<Problem>) {
    let int = |name: &str| kubelet.get(name).and_then(Value::as_i64);
    for name in ["maxPods", "podsPerCore"] {
        if let Some(n) = int(name).filter(|n| *n < 0) {
            problems.push(Problem::new(
                &path.child(name),
                format!("Invalid value: {n}: should be greater than or equal to 0"),
            ));
        }
    }
    for name in ["imageGCHighThresholdPercent", "imageGCLowThresholdPercent"] {
        if let Some(n) = int(name).filter(|n| !(0..=100).contains(n)) {
            problems.push(Problem::new(
                &path.child(name),
                format!("Invalid value: {n}: should be between 0 and 100"),
            ));
        }
    }
    let high = int("imageGCHighThresholdPercent");
    let low = int("imageGCLowThresholdPercent");
    if high.zip(low).is_some_and(|(high, low)| high <= low) {
        problems.push(Problem::new(
            &path.child("imageGCHighThresholdPercent"),
            "imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn problems(v: Value) -> Vec<String> {
        let path = FieldPath::root().child("spec").child("kubelet");
        validate_kubelet(v.as_object().unwrap(), &path)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn accepts_known_fields_of_the_right_type() {
        assert_eq!(
            problems(json!({
                "maxPods": 110, "clusterDNS": ["10.0.0.10"], "cpuCFSQuota": true,
                "kubeReserved": {"cpu": "100m", "memory": "1Gi"},
                "evictionHard": {"memory.available": "5%", "nodefs.available": "1Gi"},
                "evictionSoft": {"memory.available": "10%"},
                "evictionSoftGracePeriod": {"memory.available": "1m30s"},
                "imageGCHighThresholdPercent": 85, "imageGCLowThresholdPercent": 80,
                "featureGates": {"InPlacePodVerticalScaling": true},
                "shutdownGracePeriod": "30s", "containerLogMaxSize": "50Mi"
            })),
            Vec::<String>::new()
        );
    }

    #[test]
    fn rejects_unknown_fields_and_wrong_types() {
        assert_eq!(
            problems(json!({"maxPod": 1})),
            ["spec.kubelet.maxPod: unknown KubeletConfiguration field"]
        );
        assert_eq!(
            problems(json!({"maxPods": "110"})),
            ["spec.kubelet.maxPods: must be a 32-bit integer, not string"]
        );
        assert!(
            problems(json!({"shutdownGracePeriod": "soon"}))[0]
                .starts_with("spec.kubelet.shutdownGracePeriod: invalid duration")
        );
    }

    #[test]
    fn eviction_soft_needs_a_grace_period_and_vice_versa() {
        assert_eq!(
            problems(
                json!({"evictionSoft": {"memory.available": "10%"}, "evictionSoftGracePeriod": {"nodefs.available": "1m"}})
            ),
            [
                "spec.kubelet.evictionSoft[memory.available]: evictionSoft OwnerKey does not have a matching evictionSoftGracePeriod",
                "spec.kubelet.evictionSoftGracePeriod[nodefs.available]: evictionSoftGracePeriod OwnerKey does not have a matching evictionSoft",
            ]
        );
    }

    #[test]
    fn reserved_resources_and_gc_thresholds() {
        assert_eq!(
            problems(json!({"kubeReserved": {"gpu": "1"}})),
            [
                "spec.kubelet.kubeReserved[gpu]: valid keys for kubeReserved are ['cpu','memory','ephemeral-storage','pid']"
            ]
        );
        assert_eq!(
            problems(json!({"systemReserved": {"cpu": "-1"}})),
            [
                "spec.kubelet.systemReserved[cpu]: systemReserved value cannot be a negative resource quantity"
            ]
        );
        assert_eq!(
            problems(json!({"imageGCHighThresholdPercent": 50, "imageGCLowThresholdPercent": 60})),
            [
                "spec.kubelet.imageGCHighThresholdPercent: imageGCHighThresholdPercent must be greater than imageGCLowThresholdPercent"
            ]
        );
        assert!(
            problems(json!({"evictionHard": {"memory.free": "1Gi"}}))[0]
                .contains("valid keys for evictionHard")
        );
    }
}
