//! Allocatable, capacity and labels of real catalog types, with the expected values worked
//! out by hand from upstream's formulas (pkg/providers/instancetype/types.go, v1.14):
//!
//! * memory capacity = (MiB − 64 on arm64) − ceil(MiB × 0.075) MiB
//! * ENI-limited pods = (ENIs − reserved − EFA-only) × (IPv4 per ENI − 1) + 2
//! * kube-reserved CPU = 6 % of the first 1000m + 1 % of the next 1000m + 0.5 % of the next
//!   2000m + 0.25 % of the rest; memory = 11 × pods + 255 MiB; ephemeral-storage = 1Gi
//! * eviction = memory 100Mi, ephemeral-storage ceil(10 % of the volume)
//! * allocatable = capacity − kube-reserved − system-reserved − eviction

use super::*;
use crate::api::{AmiFamily, InterfaceType, NetworkInterface};
use crate::labels::*;
use crate::resources::{Quantity, Resources};

fn q(text: &str) -> Quantity {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn resolve(name: &str, settings: &AllocatableSettings) -> InstanceType {
    Catalog::embedded("us-east-1")
        .expect("us-east-1 is embedded")
        .instance_type(name, settings)
        .unwrap_or_else(|| panic!("{name} resolves"))
}

fn with_family(family: AmiFamily) -> AllocatableSettings {
    AllocatableSettings {
        ami_family: family,
        ..AllocatableSettings::default()
    }
}

/// Asserts the printed allocatable of the four core resources.
fn assert_allocatable(it: &InstanceType, cpu: &str, memory: &str, storage: &str, pods: &str) {
    let allocatable = it.allocatable();
    let printed = |name: &str| {
        allocatable
            .get(name)
            .map(|q| q.to_string())
            .unwrap_or_else(|| panic!("{name} missing"))
    };
    assert_eq!(
        [
            printed(RESOURCE_CPU),
            printed(RESOURCE_MEMORY),
            printed(RESOURCE_EPHEMERAL_STORAGE),
            printed(RESOURCE_PODS)
        ],
        [cpu, memory, storage, pods],
        "{}: allocatable {allocatable}",
        it.name
    );
}

#[test]
fn m5_large_al2023_defaults() {
    let it = resolve("m5.large", &AllocatableSettings::default());
    // pods = 3 ENIs × (10 − 1) + 2 = 29
    // memory = 8192 − ceil(8192 × 0.075 = 614.4) = 7577Mi
    assert_eq!(
        it.capacity.to_string(),
        "{cpu: 2, ephemeral-storage: 20Gi, memory: 7577Mi, pods: 29, vpc.amazonaws.com/pod-eni: 9}"
    );
    // kube-reserved: cpu 60m + 10m = 70m, memory 11 × 29 + 255 = 574Mi, storage 1Gi
    assert_eq!(
        it.overhead.kube_reserved.to_string(),
        "{cpu: 70m, ephemeral-storage: 1Gi, memory: 574Mi}"
    );
    // eviction: ceil(21474836480 / 100 × 10) = 2147483648 bytes = 2Gi
    assert_eq!(it.overhead.eviction_threshold.memory(), q("100Mi"));
    assert_eq!(it.overhead.eviction_threshold.ephemeral_storage(), q("2Gi"));
    // cpu 2000m − 70m; memory 7577 − 574 − 100 = 6903Mi; storage 20Gi − 1Gi − 2Gi
    assert_allocatable(&it, "1930m", "6903Mi", "17Gi", "29");
}

#[test]
fn m5_large_max_pods_keeps_eni_limited_kube_reserved_memory() {
    let mut settings = AllocatableSettings::default();
    settings.kubelet.max_pods = Some(110);
    let it = resolve("m5.large", &settings);
    // AL2023 sizes kube-reserved memory from ENI-limited pods (29) even with maxPods 110:
    // 11 × 29 + 255 = 574Mi, so memory stays 7577 − 574 − 100 = 6903Mi.
    assert_allocatable(&it, "1930m", "6903Mi", "17Gi", "110");
}

#[test]
fn c6g_large_bottlerocket_max_pods_sizes_reserved_memory_from_pods() {
    let mut settings = with_family(AmiFamily::Bottlerocket);
    settings.kubelet.max_pods = Some(110);
    let it = resolve("c6g.large", &settings);
    // arm64: 4096 − 64 = 4032MiB; − ceil(4032 × 0.075 = 302.4) = 3729Mi
    assert_eq!(it.capacity.memory().to_string(), "3729Mi");
    // Bottlerocket: kube-reserved memory = 11 × 110 + 255 = 1465Mi
    // memory 3729 − 1465 − 100 = 2164Mi; storage is /dev/xvdb (20Gi) − 1Gi − 2Gi
    assert_allocatable(&it, "1930m", "2164Mi", "17Gi", "110");
}

#[test]
fn m5_xlarge_al2_reserved_enis() {
    let mut settings = with_family(AmiFamily::Al2);
    settings.reserved_enis = 1;
    let it = resolve("m5.xlarge", &settings);
    // pods = (4 − 1 reserved) × (15 − 1) + 2 = 44
    // kube-reserved memory ignores RESERVED_ENIS: 4 × 14 + 2 = 58 pods → 11 × 58 + 255 = 893Mi
    // memory = 16384 − ceil(1228.8) = 15155Mi → 15155 − 893 − 100 = 14162Mi
    // cpu = 4000m − (60 + 10 + 10)m = 3920m
    assert_eq!(it.overhead.kube_reserved.memory(), q("893Mi"));
    assert_allocatable(&it, "3920m", "14162Mi", "17Gi", "44");
}

#[test]
fn c5_2xlarge_pods_per_core_applies_except_on_bottlerocket() {
    let mut settings = AllocatableSettings::default();
    settings.kubelet.pods_per_core = Some(4);
    let it = resolve("c5.2xlarge", &settings);
    // pods = min(4 × 8 vCPUs = 32, 4 × 14 + 2 = 58) = 32; kube memory from 58 pods = 893Mi
    // memory 16384 − 1229 = 15155 → 15155 − 893 − 100 = 14162Mi
    // cpu = 8000m − (60 + 10 + 10 + 0.25 % × 4000 = 10)m = 7910m
    assert_allocatable(&it, "7910m", "14162Mi", "17Gi", "32");

    settings.ami_family = AmiFamily::Bottlerocket;
    let it = resolve("c5.2xlarge", &settings);
    // Bottlerocket ignores podsPerCore: pods = 58, kube memory 11 × 58 + 255 = 893Mi
    assert_allocatable(&it, "7910m", "14162Mi", "17Gi", "58");
}

#[test]
fn t3_micro_windows_reserves_for_110_pods() {
    let it = resolve("t3.micro", &with_family(AmiFamily::Windows2022));
    // Windows: pods = 110 (no ENI-limited density); kube memory = 11 × 110 + 255 = 1465Mi
    // memory = 1024 − ceil(76.8) = 947Mi → 947 − 1465 − 100 = −618Mi (fits nothing)
    // storage: Windows default /dev/sda1 50Gi − 1Gi − ceil(10 % = 5Gi) = 44Gi
    assert_allocatable(&it, "1930m", "-618Mi", "44Gi", "110");
    // PrivateIPv4Address = 2 IPv4 per ENI − 1
    assert_eq!(it.capacity.get(RESOURCE_PRIVATE_IPV4_ADDRESS), Some(q("1")));
    assert_eq!(it.label(OS), Some("windows"));
    assert_eq!(it.label(WINDOWS_BUILD), Some("10.0.20348"));
    assert!(
        !Resources::new()
            .with(RESOURCE_MEMORY, q("1"))
            .fits(&it.allocatable())
    );
    // No Windows AMI for arm64: the type is dropped.
    let catalog = Catalog::embedded("us-east-1").expect("us-east-1");
    assert!(
        catalog
            .instance_type("t4g.nano", &with_family(AmiFamily::Windows2022))
            .is_none()
    );
}

#[test]
fn m6i_32xlarge_kubelet_overrides_and_percent_eviction() {
    let mut settings = AllocatableSettings::default();
    settings.kubelet.kube_reserved = Resources::new()
        .with("cpu", q("1"))
        .with("memory", q("2Gi"));
    settings.kubelet.system_reserved = Resources::new()
        .with("cpu", q("500m"))
        .with("memory", q("1Gi"));
    settings.kubelet.eviction_hard = [
        (
            MEMORY_AVAILABLE.to_owned(),
            "5%".parse().expect("percentage"),
        ),
        (
            NODEFS_AVAILABLE.to_owned(),
            "15%".parse().expect("percentage"),
        ),
    ]
    .into();
    settings.kubelet.eviction_soft = [(
        MEMORY_AVAILABLE.to_owned(),
        "50%".parse().expect("percentage"),
    )]
    .into();
    settings.block_device_mappings = vec![
        BlockDeviceSize {
            device_name: Some("/dev/xvda".into()),
            volume_size: Some(q("30Gi")),
            root_volume: false,
        },
        BlockDeviceSize {
            device_name: Some("/dev/xvdb".into()),
            volume_size: Some(q("100Gi")),
            root_volume: true,
        },
    ];
    let it = resolve("m6i.32xlarge", &settings);
    // pods = 15 × 49 + 2 = 737; memory = 524288 − ceil(39321.6) = 484966Mi = 508523708416 bytes
    // memory.available 5 % = ceil(508523708416 / 100 × 5) = 25426185421 bytes (soft ignored)
    // memory = 508523708416 − 2Gi − 1Gi − 25426185421 = 479876297523
    // cpu = 128 − 1 − 0.5 = 126500m
    // storage = rootVolume 100Gi − 1Gi − 15 % (16106127360 = 15Gi) = 84Gi
    assert_eq!(it.overhead.eviction_threshold.memory(), q("25426185421"));
    assert_allocatable(&it, "126500m", "479876297523", "84Gi", "737");
    assert_eq!(it.capacity.get(RESOURCE_EFA), Some(q("1")));
    assert_eq!(it.capacity.get(RESOURCE_AWS_POD_ENI), Some(q("107")));
}

#[test]
fn p4d_24xlarge_raid0_uses_local_nvme() {
    let settings = AllocatableSettings {
        instance_store_raid0: true,
        ..AllocatableSettings::default()
    };
    let it = resolve("p4d.24xlarge", &settings);
    // storage = 8000G = 8e12 bytes; eviction ceil(8e12 / 100 × 10) = 8e11
    // allocatable storage = 8e12 − 1073741824 − 8e11 = 7198926258176
    // memory = 1179648 − ceil(88473.6) = 1091174Mi; kube 11 × 737 + 255 = 8362Mi
    //   → 1091174 − 8362 − 100 = 1082712Mi
    // cpu = 96000m − (80 + 0.25 % × 92000 = 230)m = 95690m
    assert_allocatable(&it, "95690m", "1082712Mi", "7198926258176", "737");
    assert_eq!(it.capacity.get(RESOURCE_NVIDIA_GPU), Some(q("8")));
    assert_eq!(it.capacity.get(RESOURCE_EFA), Some(q("4")));
    assert_eq!(it.label(INSTANCE_GPU_NAME), Some("a100"));
    assert_eq!(it.label(INSTANCE_GPU_MEMORY), Some("40960"));
    assert_eq!(it.label(INSTANCE_LOCAL_NVME), Some("8000"));
}

#[test]
fn g5_xlarge_custom_uses_last_block_device() {
    let mut settings = with_family(AmiFamily::Custom);
    settings.block_device_mappings = vec![
        BlockDeviceSize {
            device_name: Some("/dev/xvda".into()),
            volume_size: Some(q("30Gi")),
            root_volume: false,
        },
        BlockDeviceSize {
            device_name: Some("/dev/xvdb".into()),
            volume_size: Some(q("200Gi")),
            root_volume: false,
        },
    ];
    let it = resolve("g5.xlarge", &settings);
    // Custom: last mapping 200Gi − 1Gi − 20Gi = 179Gi; pods 4 × 14 + 2 = 58 → 893Mi reserved
    assert_allocatable(&it, "3920m", "14162Mi", "179Gi", "58");
    assert_eq!(it.capacity.get(RESOURCE_NVIDIA_GPU), Some(q("1")));
    for (key, value) in [
        (INSTANCE_GPU_NAME, "a10g"),
        (INSTANCE_GPU_MANUFACTURER, "nvidia"),
        (INSTANCE_GPU_COUNT, "1"),
        (INSTANCE_GPU_MEMORY, "22888"),
        (INSTANCE_CATEGORY, "g"),
        (INSTANCE_GENERATION, "5"),
    ] {
        assert_eq!(it.label(key), Some(value), "{key}");
    }
}

#[test]
fn g4dn_8xlarge_efa_only_interface_and_reserved_enis() {
    let mut settings = with_family(AmiFamily::Al2);
    settings.reserved_enis = 1;
    settings.network_interfaces = Some(vec![
        NetworkInterface {
            network_card_index: 0,
            device_index: 0,
            interface_type: InterfaceType::Interface,
        },
        NetworkInterface {
            network_card_index: 0,
            device_index: 1,
            interface_type: InterfaceType::EfaOnly,
        },
    ]);
    let it = resolve("g4dn.8xlarge", &settings);
    // pods = (4 − 1 reserved − 1 EFA-only) × 14 + 2 = 30
    // kube memory: (4 − 0 − 1) × 14 + 2 = 44 pods → 11 × 44 + 255 = 739Mi
    // memory = 131072 − ceil(9830.4) − 739 − 100 = 120402Mi
    // cpu = 32000m − (60 + 10 + 5 + 5 + 28 × 2.5 = 150)m = 31850m
    assert_allocatable(&it, "31850m", "120402Mi", "17Gi", "30");
    assert_eq!(
        it.capacity.get(RESOURCE_EFA),
        Some(q("1")),
        "EFA-only interfaces of the node class"
    );
    assert_eq!(it.capacity.get(RESOURCE_NVIDIA_GPU), Some(q("1")));
}

#[test]
fn types_that_cannot_take_the_listed_interfaces_are_not_offered() {
    let catalog = Catalog::embedded("us-east-1").expect("us-east-1 is embedded");
    let listing = |interfaces: &[(i32, i32, InterfaceType)]| AllocatableSettings {
        network_interfaces: Some(
            interfaces
                .iter()
                .map(|&(card, device, interface_type)| NetworkInterface {
                    network_card_index: card,
                    device_index: device,
                    interface_type,
                })
                .collect(),
        ),
        ..AllocatableSettings::default()
    };
    let primary = (0, 0, InterfaceType::Interface);
    let efa_only = listing(&[primary, (0, 1, InterfaceType::EfaOnly)]);
    // inf2.xlarge has no EFA; c5n.18xlarge has one; p4d.24xlarge four.
    assert!(catalog.instance_type("inf2.xlarge", &efa_only).is_none());
    assert!(catalog.instance_type("m5.large", &efa_only).is_none());
    assert!(catalog.instance_type("c5n.18xlarge", &efa_only).is_some());
    let two_efa_only = listing(&[
        primary,
        (0, 1, InterfaceType::EfaOnly),
        (1, 0, InterfaceType::EfaOnly),
    ]);
    assert!(
        catalog
            .instance_type("c5n.18xlarge", &two_efa_only)
            .is_none()
    );
    assert!(
        catalog
            .instance_type("p4d.24xlarge", &two_efa_only)
            .is_some()
    );
    // m5.large has 3 ENIs on its default card: device index 3 does not exist there.
    assert!(
        catalog
            .instance_type(
                "m5.large",
                &listing(&[primary, (0, 2, InterfaceType::Interface)])
            )
            .is_some()
    );
    assert!(
        catalog
            .instance_type(
                "m5.large",
                &listing(&[primary, (0, 3, InterfaceType::Interface)])
            )
            .is_none()
    );
    // Without a list every type is offered, EFA or not.
    assert!(
        catalog
            .instance_type("m5.large", &AllocatableSettings::default())
            .is_some()
    );
}

#[test]
fn r6gd_large_max_pods_pods_per_core_and_absolute_eviction() {
    let mut settings = AllocatableSettings::default();
    settings.kubelet.max_pods = Some(20);
    settings.kubelet.pods_per_core = Some(5);
    settings.kubelet.eviction_hard = [(
        MEMORY_AVAILABLE.to_owned(),
        "500Mi".parse().expect("quantity"),
    )]
    .into();
    settings.block_device_mappings = vec![BlockDeviceSize {
        device_name: Some("/dev/xvda".into()),
        volume_size: Some(q("50Gi")),
        root_volume: false,
    }];
    let it = resolve("r6gd.large", &settings);
    // pods = min(maxPods 20, 5 × 2 = 10) = 10; kube memory from ENI pods 3 × 9 + 2 = 29 → 574Mi
    // memory = 16384 − 64 = 16320 − ceil(1224.0) = 15096Mi → 15096 − 574 − 500 = 14022Mi
    // storage /dev/xvda 50Gi − 1Gi − 5Gi = 44Gi
    assert_allocatable(&it, "1930m", "14022Mi", "44Gi", "10");
}

#[test]
fn c5_large_bottlerocket_data_volume_and_no_vm_overhead() {
    let mut settings = with_family(AmiFamily::Bottlerocket);
    settings.vm_memory_overhead_percent = 0.0;
    settings.block_device_mappings = vec![
        BlockDeviceSize {
            device_name: Some("/dev/xvda".into()),
            volume_size: Some(q("4Gi")),
            root_volume: false,
        },
        BlockDeviceSize {
            device_name: Some("/dev/xvdb".into()),
            volume_size: Some(q("60Gi")),
            root_volume: false,
        },
    ];
    let it = resolve("c5.large", &settings);
    // Bottlerocket keeps pods on /dev/xvdb: 60Gi − 1Gi − 6Gi = 53Gi
    // memory 4096Mi (no overhead); pods 3 × 9 + 2 = 29 → 574Mi; 4096 − 574 − 100 = 3422Mi
    assert_allocatable(&it, "1930m", "3422Mi", "53Gi", "29");
}

#[test]
fn labels_follow_upstream_derivations() {
    let it = resolve("m7i-flex.large", &AllocatableSettings::default());
    let expected = [
        (INSTANCE_TYPE, "m7i-flex.large"),
        (ARCH, "amd64"),
        (OS, "linux"),
        (REGION, "us-east-1"),
        (INSTANCE_CATEGORY, "m"),
        (INSTANCE_FAMILY, "m7i-flex"),
        (INSTANCE_GENERATION, "7"),
        (INSTANCE_SIZE, "large"),
        (INSTANCE_CAPABILITY_FLEX, "true"),
        (INSTANCE_CPU, "2"),
        (INSTANCE_CPU_MANUFACTURER, "intel"),
        (INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, "3200"),
        (INSTANCE_MEMORY, "8192"),
        (INSTANCE_HYPERVISOR, "nitro"),
        (INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, "true"),
        (INSTANCE_EBS_BANDWIDTH, "10000"),
    ];
    for (key, value) in expected {
        assert_eq!(it.label(key), Some(value), "{key}");
    }
    assert!(
        it.labels
            .keys()
            .all(|key| INSTANCE_TYPE_LABEL_KEYS.contains(&key.as_str()))
    );
    assert_eq!(it.label(INSTANCE_GPU_NAME), None);
    let graviton = resolve("c6g.large", &AllocatableSettings::default());
    assert_eq!(graviton.label(ARCH), Some("arm64"));
    assert_eq!(graviton.label(INSTANCE_CPU_MANUFACTURER), Some("aws"));
    assert_eq!(graviton.label(INSTANCE_CAPABILITY_FLEX), Some("false"));
}

#[test]
fn us_east_1_lists_every_offered_type_with_offerings() {
    let catalog = Catalog::embedded("us-east-1").expect("us-east-1");
    let types = catalog.instance_types(&AllocatableSettings::default());
    assert!(types.len() > 1200, "{}", types.len());
    assert!(
        types.windows(2).all(|pair| pair[0].name < pair[1].name),
        "sorted by name"
    );
    assert!(types.iter().all(|it| !it.offerings.is_empty()));
    let available = types
        .iter()
        .filter(|it| it.available_offerings().next().is_some())
        .count();
    assert!(available > 1200, "{available}");
    // Every type fits a minimal pod once overheads are taken.
    let tiny = Resources::new()
        .with(RESOURCE_CPU, q("10m"))
        .with(RESOURCE_PODS, q("1"));
    assert!(
        types
            .iter()
            .filter(|it| tiny.fits(&it.allocatable()))
            .count()
            > 1200
    );
}

#[test]
fn eviction_values() {
    assert_eq!(
        "100%".parse::<EvictionValue>(),
        Ok(EvictionValue::Percentage(0.0))
    );
    assert_eq!(
        "7.5%".parse::<EvictionValue>(),
        Ok(EvictionValue::Percentage(7.5))
    );
    assert!("abc%".parse::<EvictionValue>().is_err());
}
