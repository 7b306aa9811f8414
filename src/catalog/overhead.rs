//! What the node keeps for itself, as upstream computes `InstanceTypeOverhead`:
//! kube-reserved (CPU by bands of 6 % of the first core, 1 % of the second, 0.5 % of cores 3–4
//! and 0.25 % above; memory `11 × pods + 255` MiB; ephemeral storage 1Gi; then the
//! EC2NodeClass `kubeReserved` entries replace the computed ones), system-reserved (only what
//! the EC2NodeClass sets), and the hard eviction thresholds (memory.available 100Mi,
//! nodefs.available 10 % of ephemeral storage, or the `evictionHard` values, percentages taken
//! of capacity). Floating-point steps are done in `f64` in upstream's order, so results match
//! to the byte.

use super::capacity::{eni_limited_pods, pods};
use super::info::InstanceTypeInfo;
use super::settings::{AllocatableSettings, EvictionValue, MEMORY_AVAILABLE, NODEFS_AVAILABLE};
use crate::labels::{RESOURCE_CPU, RESOURCE_EPHEMERAL_STORAGE, RESOURCE_MEMORY};
use crate::resources::{Format, Quantity, Resources, quantity_from_go_float};
use serde::Serialize;

/// The three overhead components; allocatable is capacity minus their sum.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    /// The sum of the three components (Karpenter `InstanceTypeOverhead.Total`).
    pub fn total(&self) -> Resources {
        let mut total = self.kube_reserved.clone();
        total.add_assign(&self.system_reserved);
        total.add_assign(&self.eviction_threshold);
        total
    }
}

/// CPU reservation bands in millicores: `[start, end)` and the share reserved within it.
const CPU_BANDS: [(i64, i64, f64); 4] = [
    (0, 1000, 0.06),
    (1000, 2000, 0.01),
    (2000, 4000, 0.005),
    (4000, 1 << 31, 0.0025),
];

/// The overhead of `info` given its `capacity` (memory and ephemeral storage feed the
/// eviction thresholds).
pub fn overhead(
    info: &InstanceTypeInfo,
    settings: &AllocatableSettings,
    capacity: &Resources,
) -> Overhead {
    let family = settings.ami_family;
    let reserved_pods = if family.uses_eni_limited_memory_overhead() {
        eni_limited_pods(info, 0, settings.network_interfaces.as_deref())
    } else {
        pods(info, settings)
    };
    Overhead {
        kube_reserved: kube_reserved(
            info.vcpus as i64 * 1000,
            reserved_pods,
            &settings.kubelet.kube_reserved,
        ),
        system_reserved: settings.kubelet.system_reserved.clone(),
        eviction_threshold: eviction_threshold(
            capacity.memory(),
            capacity.ephemeral_storage(),
            settings,
        ),
    }
}

/// Upstream's `kubeReservedResources` for `cpu_millis` of CPU and `pods` pods, with the
/// EC2NodeClass overrides applied last.
pub fn kube_reserved(cpu_millis: i64, pods: i64, overrides: &Resources) -> Resources {
    let mut cpu = Quantity::ZERO;
    for (start, end, share) in CPU_BANDS {
        if cpu_millis >= start {
            let span = if cpu_millis < end {
                cpu_millis - start
            } else {
                end - start
            };
            cpu += Quantity::from_milli((span as f64 * share) as i64, Format::DecimalSI);
        }
    }
    let mut reserved = Resources::new()
        .with(RESOURCE_CPU, cpu)
        .with(RESOURCE_MEMORY, Quantity::mebibytes(11 * pods + 255))
        .with(RESOURCE_EPHEMERAL_STORAGE, Quantity::gibibytes(1));
    reserved.extend(overrides.iter());
    reserved
}

/// Hard eviction thresholds: the defaults, replaced by `evictionHard` where set. Soft
/// thresholds do not count (upstream only reserves the hard ones).
pub fn eviction_threshold(
    memory: Quantity,
    storage: Quantity,
    settings: &AllocatableSettings,
) -> Resources {
    let default_nodefs = (storage.value() as f64 / 100.0 * 10.0).ceil();
    let mut threshold = Resources::new()
        .with(RESOURCE_MEMORY, Quantity::mebibytes(100))
        .with(
            RESOURCE_EPHEMERAL_STORAGE,
            quantity_from_go_float(default_nodefs).unwrap_or(Quantity::ZERO),
        );
    let hard = &settings.kubelet.eviction_hard;
    if let Some(value) = hard.get(MEMORY_AVAILABLE) {
        threshold.insert(RESOURCE_MEMORY, signal(memory, *value));
    }
    if let Some(value) = hard.get(NODEFS_AVAILABLE) {
        threshold.insert(RESOURCE_EPHEMERAL_STORAGE, signal(storage, *value));
    }
    threshold
}

/// A threshold in absolute terms: a percentage of `capacity`, or the quantity itself.
fn signal(capacity: Quantity, value: EvictionValue) -> Quantity {
    match value {
        EvictionValue::Quantity(quantity) => quantity,
        EvictionValue::Percentage(percent) => capacity.percentage(percent),
    }
}
