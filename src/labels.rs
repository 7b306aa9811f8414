//! Well-known label, annotation, taint and finalizer names shared with upstream Karpenter.
//! They are the compatibility contract: users' manifests, dashboards and tooling key on
//! these exact strings, so every part of kerf names them through these constants.

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
pub const NODECLAIM_TERMINATION_TIMESTAMP: &str = "karpenter.sh/nodeclaim-termination-timestamp";

// Taints and finalizers.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
pub const UNREGISTERED_TAINT: &str = "karpenter.sh/unregistered";
pub const TERMINATION_FINALIZER: &str = "karpenter.sh/termination";

// karpenter.k8s.aws labels.
pub const EC2NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
pub const EC2NODECLASS_HASH: &str = "karpenter.k8s.aws/ec2nodeclass-hash";
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

// karpenter.k8s.aws labels that are allowed in NodePool requirements and template labels
// alongside the instance-* ones above.
pub const INSTANCE_TENANCY: &str = "karpenter.k8s.aws/instance-tenancy";
pub const CAPACITY_RESERVATION_TYPE: &str = "karpenter.k8s.aws/capacity-reservation-type";
pub const CAPACITY_RESERVATION_ID: &str = "karpenter.k8s.aws/capacity-reservation-id";
pub const CAPACITY_RESERVATION_INTERRUPTIBLE: &str =
    "karpenter.k8s.aws/capacity-reservation-interruptible";
pub const NITRO_SANDBOX: &str = "karpenter.k8s.aws/nitro-sandbox";
pub const PLACEMENT_GROUP_ID: &str = "karpenter.k8s.aws/placement-group-id";
pub const PLACEMENT_GROUP_PARTITION: &str = "karpenter.k8s.aws/placement-group-partition";

pub const RESOURCE_PRIVATE_IPV4_ADDRESS: &str = "vpc.amazonaws.com/PrivateIPv4Address";

// Core Kubernetes resource names.
pub const RESOURCE_CPU: &str = "cpu";
pub const RESOURCE_MEMORY: &str = "memory";
pub const RESOURCE_PODS: &str = "pods";
pub const RESOURCE_EPHEMERAL_STORAGE: &str = "ephemeral-storage";

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
