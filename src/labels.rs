//! Well-known label, annotation, taint and finalizer names shared with upstream Karpenter.
//! They are the compatibility contract: users' manifests, dashboards and tooling key on
//! these exact strings, so every part of kerf names them through these constants. Also
//! here: [`compact`], how a store keeps a decoded label map.

use std::collections::BTreeMap;

pub const GROUP: &str = "karpenter.sh";
pub const AWS_GROUP: &str = "karpenter.k8s.aws";

// Kubernetes well-known labels.
pub const ZONE: &str = "topology.kubernetes.io/zone";
pub const REGION: &str = "topology.kubernetes.io/region";
pub const ZONE_ID: &str = "topology.k8s.aws/zone-id";
pub const HOSTNAME: &str = "kubernetes.io/hostname";
pub const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const ARCH: &str = "kubernetes.io/arch";
pub const OS: &str = "kubernetes.io/os";
pub const WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

// karpenter.sh labels.
pub const NODEPOOL: &str = "karpenter.sh/nodepool";
pub const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const REGISTERED: &str = "karpenter.sh/registered";
pub const INITIALIZED: &str = "karpenter.sh/initialized";
pub const NODE_INITIALIZED: &str = INITIALIZED;

// Capacity types.
pub const CAPACITY_TYPE_SPOT: &str = "spot";
pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";

// karpenter.sh annotations.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
pub const NODEPOOL_HASH: &str = "karpenter.sh/nodepool-hash";
pub const NODEPOOL_HASH_VERSION: &str = "karpenter.sh/nodepool-hash-version";
/// On every NodeClaim a round creates: `"true"` when a `minValues` was lowered to launch it
/// (`MIN_VALUES_POLICY=BestEffort`), `"false"` otherwise.
pub const NODECLAIM_MIN_VALUES_RELAXED: &str = "karpenter.sh/nodeclaim-min-values-relaxed";
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";

// Taints and finalizers.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

// karpenter.k8s.aws labels.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
pub const EC2NODECLASS_HASH_VERSION: &str = "karpenter.k8s.aws/ec2nodeclass-hash-version";
/// Held by an EC2NodeClass until its NodeClaims are gone and its launch templates and
/// instance profile are deleted.
pub const EC2NODECLASS_TERMINATION_FINALIZER: &str = "karpenter.k8s.aws/termination";
/// Set on a NodeClaim once its instance carries the registration tags (`Name`, ...).
pub const INSTANCE_TAGGED: &str = "karpenter.k8s.aws/tagged";
/// Set with [`INSTANCE_TAGGED`]: the instance also carries the `eks:eks-cluster-name` tag.
pub const CLUSTER_NAME_TAGGED: &str = "compatibility.karpenter.k8s.aws/cluster-name-tagged";
pub const INSTANCE_CATEGORY: &str = "karpenter.k8s.aws/instance-category";
pub const INSTANCE_FAMILY: &str = "karpenter.k8s.aws/instance-family";
pub const INSTANCE_GENERATION: &str = "karpenter.k8s.aws/instance-generation";
pub const INSTANCE_SIZE: &str = "karpenter.k8s.aws/instance-size";
pub const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
pub const INSTANCE_CPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-cpu-manufacturer";
pub const INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ: &str =
    "karpenter.k8s.aws/instance-cpu-sustained-clock-speed-mhz";
pub const INSTANCE_MEMORY: &str = "karpenter.k8s.aws/instance-memory";
pub const INSTANCE_EBS_BANDWIDTH: &str = "karpenter.k8s.aws/instance-ebs-bandwidth";
pub const INSTANCE_NETWORK_BANDWIDTH: &str = "karpenter.k8s.aws/instance-network-bandwidth";
pub const INSTANCE_HYPERVISOR: &str = "karpenter.k8s.aws/instance-hypervisor";
pub const INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED: &str =
    "karpenter.k8s.aws/instance-encryption-in-transit-supported";
pub const INSTANCE_LOCAL_NVME: &str = "karpenter.k8s.aws/instance-local-nvme";
pub const INSTANCE_GPU_NAME: &str = "karpenter.k8s.aws/instance-gpu-name";
pub const INSTANCE_GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";
pub const INSTANCE_GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
pub const INSTANCE_GPU_MEMORY: &str = "karpenter.k8s.aws/instance-gpu-memory";
pub const INSTANCE_ACCELERATOR_NAME: &str = "karpenter.k8s.aws/instance-accelerator-name";
pub const INSTANCE_ACCELERATOR_MANUFACTURER: &str =
    "karpenter.k8s.aws/instance-accelerator-manufacturer";
pub const INSTANCE_ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
pub const INSTANCE_CAPABILITY_FLEX: &str = "karpenter.k8s.aws/instance-capability-flex";

// Extended resources.
pub const RESOURCE_NVIDIA_GPU: &str = "nvidia.com/gpu";
pub const RESOURCE_AMD_GPU: &str = "amd.com/gpu";
pub const RESOURCE_AWS_NEURON: &str = "aws.amazon.com/neuron";
pub const RESOURCE_AWS_NEURON_CORE: &str = "aws.amazon.com/neuroncore";
pub const RESOURCE_HABANA_GAUDI: &str = "habana.ai/gaudi";
pub const RESOURCE_AWS_POD_ENI: &str = "vpc.amazonaws.com/pod-eni";
pub const RESOURCE_EFA: &str = "vpc.amazonaws.com/efa";

pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

// Core Kubernetes resource names.
pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_PODS: &str = "pods";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";

// Aliases Kubernetes still accepts for the labels above (normalised by `normalize_label_key`).
pub const ZONE_BETA: &str = "failure-domain.beta.kubernetes.io/zone";
pub const REGION_BETA: &str = "failure-domain.beta.kubernetes.io/region";
pub const INSTANCE_TYPE_BETA: &str = "beta.kubernetes.io/instance-type";
pub const ARCH_BETA: &str = "beta.kubernetes.io/arch";
pub const OS_BETA: &str = "beta.kubernetes.io/os";

// More karpenter.k8s.aws labels the AWS provider declares well known.
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
pub const INSTANCE_NITRO_ENCLAVES_SUPPORTED: &str = "karpenter.k8s.aws/nitro-sandbox";
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

// Taints other controllers put on nodes while they start.
pub const TAINT_NODE_NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const TAINT_NODE_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const TAINT_EXTERNAL_CLOUD_PROVIDER: &str = "node.cloudprovider.kubernetes.io/uninitialized";
/// Prefix of the Node Readiness Controller's taints, whose suffix names a readiness rule.
pub const TAINT_NODE_READINESS_PREFIX: &str = "readiness.k8s.io/";

/// Labels kerf knows the values of (from NodePools, instance types and offerings), so
/// pods and NodePools may constrain them without any NodePool defining them: upstream
/// Karpenter's `WellKnownLabels` plus those the AWS provider adds. Core labels come first
/// because typo hints pick the first label that looks like the mistyped one.
pub const WELL_KNOWN_LABELS: &[&str] = &[
    NODEPOOL,
    ZONE,
    REGION,
    INSTANCE_TYPE,
    ARCH,
    OS,
    CAPACITY_TYPE,
    WINDOWS_BUILD,
    CAPACITY_RESERVATION_ID,
    CAPACITY_RESERVATION_TYPE,
    CAPACITY_RESERVATION_INTERRUPTIBLE,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
    INSTANCE_NITRO_ENCLAVES_SUPPORTED,
    INSTANCE_CATEGORY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_SIZE,
    INSTANCE_LOCAL_NVME,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    ZONE_ID,
    INSTANCE_TENANCY,
    PLACEMENT_GROUP_ID,
    PLACEMENT_GROUP_PARTITION,
];

/// Label domains reserved for kerf itself: users may not set labels under them except the
/// well-known ones.
pub const RESTRICTED_LABEL_DOMAINS: &[&str] = &[GROUP, AWS_GROUP];

/// Labels users may not constrain on NodePools because the provisioning logic owns them.
pub const RESTRICTED_LABELS: &[&str] = &[HOSTNAME];

/// Deprecated label aliases and the well-known label each one means.
pub const NORMALIZED_LABELS: &[(&str, &str)] = &[
    (ZONE_BETA, ZONE),
    (ARCH_BETA, ARCH),
    (OS_BETA, OS),
    (INSTANCE_TYPE_BETA, INSTANCE_TYPE),
    (REGION_BETA, REGION),
];

/// Whether `key` is one of [`WELL_KNOWN_LABELS`]. A `match` rather than a scan because the
/// scheduler asks this for every undefined key of every compatibility check.
pub fn is_well_known_label(key: &str) -> bool {
    matches!(
        key,
        NODEPOOL
            | ZONE
            | REGION
            | INSTANCE_TYPE
            | ARCH
            | OS
            | CAPACITY_TYPE
            | WINDOWS_BUILD
            | CAPACITY_RESERVATION_ID
            | CAPACITY_RESERVATION_TYPE
            | CAPACITY_RESERVATION_INTERRUPTIBLE
            | INSTANCE_HYPERVISOR
            | INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED
            | INSTANCE_NITRO_ENCLAVES_SUPPORTED
            | INSTANCE_CATEGORY
            | INSTANCE_CAPABILITY_FLEX
            | INSTANCE_FAMILY
            | INSTANCE_GENERATION
            | INSTANCE_SIZE
            | INSTANCE_LOCAL_NVME
            | INSTANCE_CPU
            | INSTANCE_CPU_MANUFACTURER
            | INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ
            | INSTANCE_MEMORY
            | INSTANCE_EBS_BANDWIDTH
            | INSTANCE_NETWORK_BANDWIDTH
            | INSTANCE_GPU_NAME
            | INSTANCE_GPU_MANUFACTURER
            | INSTANCE_GPU_COUNT
            | INSTANCE_GPU_MEMORY
            | INSTANCE_ACCELERATOR_NAME
            | INSTANCE_ACCELERATOR_MANUFACTURER
            | INSTANCE_ACCELERATOR_COUNT
            | ZONE_ID
            | INSTANCE_TENANCY
            | PLACEMENT_GROUP_ID
            | PLACEMENT_GROUP_PARTITION
    )
}

/// Whether `key` is one of [`RESTRICTED_LABELS`].
pub fn is_restricted_label(key: &str) -> bool {
    RESTRICTED_LABELS.contains(&key)
}

/// The well-known label a deprecated alias stands for, or `key` itself.
pub fn normalize_label_key(key: &str) -> &str {
    NORMALIZED_LABELS
        .iter()
        .find(|(alias, _)| *alias == key)
        .map_or(key, |(_, stable)| stable)
}

/// The domain (prefix before `/`) of a label key; empty for unprefixed keys.
pub fn label_domain(key: &str) -> &str {
    key.split_once('/').map_or("", |(domain, _)| domain)
}

/// Whether `key` lies in a [`RESTRICTED_LABEL_DOMAINS`] domain or one of its subdomains.
pub fn is_in_restricted_domain(key: &str) -> bool {
    let domain = label_domain(key);
    RESTRICTED_LABEL_DOMAINS.iter().any(|restricted| {
        domain == *restricted
            || domain
                .strip_suffix(restricted)
                .is_some_and(|rest| rest.ends_with('.'))
    })
}

// Labels and annotations the Kubernetes workload controllers stamp on the pods they create;
// topology spread `matchLabelKeys` and affinity selectors commonly key on them.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
pub const STATEFULSET_POD_NAME: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX: &str = "apps.kubernetes.io/pod-index";
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
pub const JOB_NAME_LEGACY: &str = "job-name";
pub const JOB_CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";
pub const JOB_CONTROLLER_UID_LEGACY: &str = "controller-uid";
pub const JOB_COMPLETION_INDEX: &str = "batch.kubernetes.io/job-completion-index";

/// On a Node, `true` leaves its taints to the cloud provider: registration does not sync
/// the NodeClaim's taints onto it.
pub const DO_NOT_SYNC_TAINTS: &str = "karpenter.sh/do-not-sync-taints";
/// Kubernetes' label that takes a draining Node out of load-balancer target groups.
pub const EXCLUDE_FROM_EXTERNAL_LOAD_BALANCERS: &str =
    "node.kubernetes.io/exclude-from-external-load-balancers";

/// Rebuilds a label (or annotation) map with full B-tree nodes. Decoding inserts the JSON's
/// sorted keys one by one, and each node split on the way leaves the node behind it half
/// empty; collecting builds the tree from sorted entries, every node full. For a Node's
/// thirty labels that is one 11-entry leaf fewer, about 540 bytes of 3.9 KB
/// (`tests/label_map_memory.rs`), for each map a store keeps.
pub fn compact(map: &mut BTreeMap<String, String>) {
    *map = std::mem::take(map).into_iter().collect();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_predicate_agrees_with_the_list() {
        for label in WELL_KNOWN_LABELS {
            assert!(is_well_known_label(label), "{label}");
        }
        assert!(!is_well_known_label(HOSTNAME));
        assert!(!is_well_known_label("topology.kubernetes.io/zones"));
        let mut sorted = WELL_KNOWN_LABELS.to_vec();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), WELL_KNOWN_LABELS.len(), "duplicate entries");
    }

    #[test]
    fn aliases_normalise_to_stable_labels() {
        assert_eq!(normalize_label_key(ZONE_BETA), ZONE);
        assert_eq!(normalize_label_key(INSTANCE_TYPE_BETA), INSTANCE_TYPE);
        assert_eq!(normalize_label_key("team"), "team");
    }

    #[test]
    fn restricted_domains_cover_subdomains_only() {
        assert!(is_in_restricted_domain("karpenter.sh/foo"));
        assert!(is_in_restricted_domain("sub.karpenter.k8s.aws/foo"));
        assert!(!is_in_restricted_domain("notkarpenter.sh/foo"));
        assert!(!is_in_restricted_domain("karpenter.sh"));
        assert_eq!(label_domain("a.b/c"), "a.b");
    }
}
