//! The embedded EC2 instance-type catalog and the allocatable computation. [`Catalog`]
//! opens the catalog compiled into the binary for one region; [`Catalog::instance_types`]
//! resolves every type offered there for an [`AllocatableSettings`] (what an EC2NodeClass and
//! the controller settings contribute; [`AllocatableSettings::for_node_class`] builds it from
//! a typed [`EC2NodeClass`](crate::api::EC2NodeClass)) into [`InstanceType`]s with upstream's
//! labels, capacity, overhead and offerings; [`InstanceType::allocatable`] is capacity minus
//! overhead.
//!
//! # Data and how to regenerate it
//!
//! `data/catalog.json` is generated offline by `python3 scripts/gen-catalog.py` (options
//! `--data DIR` for the directory holding `ec2-on-demand-prices.json`, `ec2-vpc-limits.json`
//! and `ec2-bandwidth.json`, default the vendored `scripts/ec2-facts`; `--out FILE`). It
//! needs the `moto` Python package, whose DescribeInstanceTypes data gives each type's EC2
//! facts and whose DescribeInstanceTypeOfferings data gives the zones (and zone ids) per
//! region for 30 regions. The file holds raw facts only ([`InstanceTypeInfo`]); every
//! derivation below is Rust, so live EC2 answers can go through the same code. It is
//! committed (≈0.7 MB, one type per line so regenerations diff cleanly) and parsed once per
//! process.
//!
//! # Rules
//!
//! * Selection, as upstream's DescribeInstanceTypes filters: `hvm` types supporting `x86_64`
//!   or `arm64` (mac and i386-only types are dropped). A region lists the types moto offers
//!   in at least one of its zones. Windows families drop arm64 types (no Windows AMI).
//! * Labels and capacity follow upstream `pkg/providers/instancetype/types.go` (v1.14):
//!   see the `type_labels`, `capacity` and `overhead` modules for the exact derivations.
//!   `karpenter.k8s.aws/instance-tenancy` is `{default, dedicated}` for every type
//!   ([`INSTANCE_TENANCY_VALUES`]); zone, zone id and capacity type are per [`Offering`].
//! * Offerings: one per zone offering the type and per capacity type among the type's
//!   supported usage classes (`on-demand`, `spot`). Prices: us-east-1 on-demand prices are
//!   data; other regions and spot prices are derived by the rules in [`pricing`] (region
//!   multiplier; spot = category ratio × per-zone factor).
//! * Types without a price: kept, with every offering `available: false` and price 0 — as
//!   upstream, which only makes an offering available when it has a price. They are listed
//!   (so `kerf catalog` shows them) but the scheduler never launches them.
//! * Allocatable = capacity − (kube-reserved + system-reserved + hard eviction thresholds)
//!   over capacity's names. `evictionSoft` does not reduce allocatable (upstream v1.14 only
//!   reserves the hard thresholds), and kube-reserved memory uses the ENI-limited pod count
//!   (without `RESERVED_ENIS`) on AL2/AL2023/Custom even when `maxPods` is set, as upstream.
//! * Not modelled here: capacity reservations (reserved offerings), the memory capacity
//!   upstream learns from launched nodes, CEL expressions in kubelet settings (feature gate
//!   `NodeClassCEL`, off by default).

mod capacity;
mod embedded;
mod info;
mod instance_type;
mod node_class;
mod overhead;
pub mod pricing;
mod settings;
mod snapshot;
mod type_labels;

pub use capacity::{eni_limited_pods, ephemeral_storage, memory, pods};
pub use embedded::{Catalog, CatalogError, Zone};
pub use info::{Accelerator, Gpu, InstanceStorage, InstanceTypeInfo, NeuronDevice, VpcLimits};
pub use instance_type::{CapacityType, InstanceType, Offering};
pub use node_class::NodeClassSettingsError;
pub use overhead::{Overhead, kube_reserved};
pub use settings::{
    AllocatableSettings, BlockDeviceSize, DEFAULT_EBS_VOLUME_SIZE,
    DEFAULT_VM_MEMORY_OVERHEAD_PERCENT, EvictionValue, EvictionValueError, KubeletSettings,
    MEMORY_AVAILABLE, NODEFS_AVAILABLE,
};
pub use snapshot::{CatalogFacts, CatalogSnapshot};
pub use type_labels::{
    INSTANCE_TENANCY_VALUES, INSTANCE_TYPE_LABEL_KEYS, category_and_generation, family_and_size,
    instance_type_labels,
};

#[cfg(test)]
mod tests;
