//! The well-known labels an instance type carries as its scheduling requirements, derived
//! from its EC2 facts as upstream's `computeRequirements` derives them: name parsing for
//! category/family/generation/size (`m7i-flex.large` → `m`, `m7i-flex`, `7`, `large`;
//! `u-6tb1.metal` → `u`, `u-6tb1`, `1`, `metal`), memory and GPU memory in MiB, bandwidths in
//! Mbps, clock speed in MHz, manufacturers and names lower-kebab-cased. A label that does not
//! apply is absent, which upstream expresses as a `DoesNotExist` requirement.

use super::info::InstanceTypeInfo;
use crate::api::AmiFamily;
use crate::labels::*;
use std::collections::BTreeMap;

/// Every label key an instance type may define. A key in this list that is absent from an
/// instance type's labels means "does not exist" for that type (e.g. no GPU labels on a CPU
/// type), not "any value".
pub const INSTANCE_TYPE_LABEL_KEYS: &[&str] = &[
    INSTANCE_TYPE,
    ARCH,
    OS,
    REGION,
    WINDOWS_BUILD,
    INSTANCE_CPU,
    INSTANCE_CPU_MANUFACTURER,
    INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
    INSTANCE_MEMORY,
    INSTANCE_EBS_BANDWIDTH,
    INSTANCE_NETWORK_BANDWIDTH,
    INSTANCE_CATEGORY,
    INSTANCE_CAPABILITY_FLEX,
    INSTANCE_FAMILY,
    INSTANCE_GENERATION,
    INSTANCE_LOCAL_NVME,
    INSTANCE_SIZE,
    INSTANCE_GPU_NAME,
    INSTANCE_GPU_MANUFACTURER,
    INSTANCE_GPU_COUNT,
    INSTANCE_GPU_MEMORY,
    INSTANCE_ACCELERATOR_NAME,
    INSTANCE_ACCELERATOR_MANUFACTURER,
    INSTANCE_ACCELERATOR_COUNT,
    INSTANCE_HYPERVISOR,
    INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
];

/// The values every EC2 instance type offers for `karpenter.k8s.aws/instance-tenancy` (a
/// two-valued requirement, so it is not in the single-valued label map).
pub const INSTANCE_TENANCY_VALUES: [&str; 2] = ["default", "dedicated"];

/// The labels of `info` in `region` for nodes of `family`; `None` when the family cannot run
/// the type (Windows AMIs exist for amd64 only, upstream gives such types no OS value).
pub fn instance_type_labels(
    info: &InstanceTypeInfo,
    region: &str,
    family: AmiFamily,
) -> Option<BTreeMap<String, String>> {
    let arch = info.kubernetes_arch()?;
    let os = if family.is_windows() {
        if arch != "amd64" {
            return None;
        }
        "windows"
    } else {
        "linux"
    };
    let mut labels = BTreeMap::new();
    let mut set = |key: &str, value: String| {
        labels.insert(key.to_owned(), value);
    };
    set(INSTANCE_TYPE, info.name.clone());
    set(ARCH, arch.to_owned());
    set(OS, os.to_owned());
    set(REGION, region.to_owned());
    if let Some(build) = family.windows_build() {
        set(WINDOWS_BUILD, build.to_owned());
    }
    set(INSTANCE_CPU, info.vcpus.to_string());
    set(INSTANCE_MEMORY, info.memory_mib.to_string());
    set(INSTANCE_HYPERVISOR, info.hypervisor.clone());
    set(
        INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
        info.encryption_in_transit_supported.to_string(),
    );
    set(
        INSTANCE_CPU_MANUFACTURER,
        lower_kebab(info.cpu_manufacturer.as_deref().unwrap_or("")),
    );
    set(
        INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ,
        clock_speed_mhz(info).to_string(),
    );
    if info.ebs_optimized_support.as_deref() == Some("default")
        && let Some(mbps) = info.ebs_maximum_bandwidth_mbps
    {
        set(INSTANCE_EBS_BANDWIDTH, mbps.to_string());
    }
    if let Some(mbps) = info.network_bandwidth_mbps {
        set(INSTANCE_NETWORK_BANDWIDTH, mbps.to_string());
    }
    if let Some((category, generation)) = category_and_generation(&info.name) {
        set(INSTANCE_CATEGORY, category.to_owned());
        set(INSTANCE_GENERATION, generation.to_owned());
    }
    let family_part = info.name.split('.').next().unwrap_or_default();
    if let Some((family_name, size)) = family_and_size(&info.name) {
        set(INSTANCE_FAMILY, family_name.to_owned());
        set(INSTANCE_SIZE, size.to_owned());
    }
    set(
        INSTANCE_CAPABILITY_FLEX,
        family_part.contains("-flex").to_string(),
    );
    if let Some(storage) = &info.instance_storage
        && let (true, Some(total)) = (storage.nvme_support != "unsupported", storage.total_size_gb)
    {
        set(INSTANCE_LOCAL_NVME, total.to_string());
    }
    if let [gpu] = info.gpus.as_slice() {
        set(INSTANCE_GPU_NAME, lower_kebab(&gpu.name));
        set(INSTANCE_GPU_MANUFACTURER, lower_kebab(&gpu.manufacturer));
        set(INSTANCE_GPU_COUNT, gpu.count.to_string());
        set(INSTANCE_GPU_MEMORY, gpu.memory_mib.to_string());
    }
    if let ([accelerator], true) = (
        info.inference_accelerators.as_slice(),
        info.neuron_devices.is_empty(),
    ) {
        set(INSTANCE_ACCELERATOR_NAME, lower_kebab(&accelerator.name));
        set(
            INSTANCE_ACCELERATOR_MANUFACTURER,
            lower_kebab(&accelerator.manufacturer),
        );
        set(INSTANCE_ACCELERATOR_COUNT, accelerator.count.to_string());
    }
    if let [device] = info.neuron_devices.as_slice() {
        set(INSTANCE_ACCELERATOR_NAME, lower_kebab(&device.name));
        set(INSTANCE_ACCELERATOR_MANUFACTURER, "aws".to_owned());
        set(INSTANCE_ACCELERATOR_COUNT, device.count.to_string());
    }
    Some(labels)
}

/// GHz to MHz rounded half away from zero (Go `math.Round`); 0 when EC2 reports no speed.
fn clock_speed_mhz(info: &InstanceTypeInfo) -> i64 {
    (info.sustained_clock_speed_ghz.unwrap_or(0.0) * 1000.0).round() as i64
}

fn lower_kebab(text: &str) -> String {
    text.replace(' ', "-").to_lowercase()
}

/// Category and generation as upstream's `(^[a-z]+)(\-[0-9]+tb)?([0-9]+).*\.` captures
/// them: leading letters, an optional `-<n>tb`, then the generation digits, with a `.`
/// somewhere after them.
pub fn category_and_generation(name: &str) -> Option<(&str, &str)> {
    let letters = name.bytes().take_while(u8::is_ascii_lowercase).count();
    if letters == 0 {
        return None;
    }
    let mut rest = &name[letters..];
    if let Some(after) = strip_terabytes(rest) {
        rest = after;
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 || !rest[digits..].contains('.') {
        return None;
    }
    Some((&name[..letters], &rest[..digits]))
}

/// `rest` without a leading `-<digits>tb`, if it has one.
fn strip_terabytes(rest: &str) -> Option<&str> {
    let after_dash = rest.strip_prefix('-')?;
    let digits = after_dash.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return None;
    }
    after_dash[digits..].strip_prefix("tb")
}

/// Family and size when the name is exactly `<family>.<size>`.
pub fn family_and_size(name: &str) -> Option<(&str, &str)> {
    let (family, size) = name.split_once('.')?;
    if size.contains('.') {
        return None;
    }
    Some((family, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_names_like_upstreams_regular_expression() {
        for (name, expected) in [
            ("m5.large", Some(("m", "5"))),
            ("m7i-flex.large", Some(("m", "7"))),
            ("u-6tb1.metal", Some(("u", "1"))),
            ("u-12tb1.112xlarge", Some(("u", "1"))),
            ("u7i-12tb.224xlarge", Some(("u", "7"))),
            ("inf2.xlarge", Some(("inf", "2"))),
            ("x2iedn.32xlarge", Some(("x", "2"))),
            ("trn1n.32xlarge", Some(("trn", "1"))),
            ("c7gd.metal", Some(("c", "7"))),
            ("m5", None),
            ("u-tb1.metal", None),
            ("5x.large", None),
        ] {
            assert_eq!(category_and_generation(name), expected, "{name}");
        }
        assert_eq!(
            family_and_size("m7i-flex.large"),
            Some(("m7i-flex", "large"))
        );
        assert_eq!(
            family_and_size("c8gb.metal-48xl"),
            Some(("c8gb", "metal-48xl"))
        );
        assert_eq!(family_and_size("a.b.c"), None);
    }
}
