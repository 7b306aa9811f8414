//! Micro-benchmarks of the scheduler's hottest questions: does a pod fit a NodeClaim, does
//! an instance type fit a NodeClaim, and what is the intersection of two requirements.
//! Shapes mirror a real solve: a NodeClaim narrowed to hundreds of instance types, instance
//! types with ~30 single-valued well-known labels, pods with a handful of keys.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kerf::labels;
use kerf::requirements::{AllowUndefined, Operator, Requirement, Requirements};

fn instance_type_names() -> Vec<String> {
    let families = [
        "m5", "m6i", "m7g", "c5", "c6i", "c7g", "r5", "r6i", "t3", "t4g",
    ];
    let sizes = [
        "large", "xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge",
    ];
    let mut names: Vec<String> = families
        .iter()
        .flat_map(|f| sizes.iter().map(move |s| format!("{f}.{s}")))
        .collect();
    for gen_ in 0..5 {
        names.extend(names.clone().iter().take(80).map(|n| format!("x{gen_}{n}")));
    }
    names
}

fn node_claim(names: &[String]) -> Requirements {
    Requirements::from_iter([
        Requirement::in_values(labels::NODEPOOL, ["default"]),
        Requirement::in_values(labels::CAPACITY_TYPE, ["spot", "on-demand"]),
        Requirement::in_values(labels::ARCH, ["amd64", "arm64"]),
        Requirement::in_values(labels::OS, ["linux"]),
        Requirement::in_values(labels::ZONE, ["us-east-1a", "us-east-1b", "us-east-1c"]),
        Requirement::in_values(labels::INSTANCE_TYPE, names),
        Requirement::not_in(labels::INSTANCE_CATEGORY, ["g", "p", "inf"]),
        Requirement::new(labels::INSTANCE_GENERATION, Operator::Gt, ["4"], None).expect("valid"),
        Requirement::in_values(labels::EC2NODECLASS, ["default"]),
        Requirement::in_values("team", ["payments"]),
        Requirement::in_values(labels::REGISTERED, ["true"]),
        Requirement::in_values(labels::INITIALIZED, ["true"]),
    ])
}

fn instance_type(name: &str) -> Requirements {
    let single = [
        (labels::INSTANCE_TYPE, name),
        (labels::ARCH, "amd64"),
        (labels::OS, "linux"),
        (labels::INSTANCE_CATEGORY, "m"),
        (labels::INSTANCE_FAMILY, "m5"),
        (labels::INSTANCE_GENERATION, "5"),
        (labels::INSTANCE_SIZE, "xlarge"),
        (labels::INSTANCE_CPU, "4"),
        (labels::INSTANCE_CPU_MANUFACTURER, "intel"),
        (labels::INSTANCE_CPU_SUSTAINED_CLOCK_SPEED_MHZ, "3100"),
        (labels::INSTANCE_MEMORY, "16384"),
        (labels::INSTANCE_EBS_BANDWIDTH, "4750"),
        (labels::INSTANCE_NETWORK_BANDWIDTH, "1250"),
        (labels::INSTANCE_HYPERVISOR, "nitro"),
        (labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED, "false"),
        (labels::INSTANCE_CAPABILITY_FLEX, "false"),
        (labels::REGION, "us-east-1"),
        (labels::WINDOWS_BUILD, ""),
    ];
    let mut r: Requirements = single
        .iter()
        .map(|(k, v)| Requirement::in_values(k, [*v]))
        .collect();
    r.add(Requirement::in_values(
        labels::ZONE,
        ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"],
    ));
    r.add(Requirement::in_values(
        labels::ZONE_ID,
        ["use1-az1", "use1-az2", "use1-az4", "use1-az6"],
    ));
    r.add(Requirement::in_values(
        labels::CAPACITY_TYPE,
        ["spot", "on-demand"],
    ));
    for absent in [
        labels::INSTANCE_GPU_NAME,
        labels::INSTANCE_GPU_COUNT,
        labels::INSTANCE_LOCAL_NVME,
    ] {
        r.add(Requirement::does_not_exist(absent));
    }
    r
}

fn pod() -> Requirements {
    Requirements::from_iter([
        Requirement::in_values(labels::ZONE, ["us-east-1a", "us-east-1b"]),
        Requirement::in_values(labels::ARCH, ["amd64"]),
        Requirement::in_values("team", ["payments"]),
    ])
}

fn compatibility(c: &mut Criterion) {
    let names = instance_type_names();
    let claim = node_claim(&names);
    let it = instance_type("m5.xlarge");
    let pod = pod();
    let conflicting_pod =
        Requirements::from_iter([Requirement::in_values(labels::ZONE, ["us-west-2a"])]);

    let foreign = instance_type("z9.metal");

    c.bench_function("is_compatible pod vs node claim", |b| {
        b.iter(|| black_box(&claim).is_compatible(black_box(&pod), AllowUndefined::WellKnownLabels))
    });
    c.bench_function("is_compatible conflicting pod", |b| {
        b.iter(|| {
            black_box(&claim)
                .is_compatible(black_box(&conflicting_pod), AllowUndefined::WellKnownLabels)
        })
    });
    c.bench_function("compatible conflicting pod with error", |b| {
        b.iter(|| {
            black_box(&claim)
                .compatible(black_box(&conflicting_pod), AllowUndefined::WellKnownLabels)
        })
    });
    c.bench_function("has_intersection node claim vs instance type", |b| {
        b.iter(|| black_box(&claim).has_intersection(black_box(&it)))
    });
    c.bench_function(
        "has_intersection node claim vs excluded instance type",
        |b| b.iter(|| black_box(&claim).has_intersection(black_box(&foreign))),
    );
}

fn intersection(c: &mut Criterion) {
    let names = instance_type_names();
    let many = Requirement::in_values(labels::INSTANCE_TYPE, &names);
    let one = Requirement::in_values(labels::INSTANCE_TYPE, ["m5.xlarge"]);
    let excluded = Requirement::not_in(labels::INSTANCE_TYPE, ["t3.large", "t3.xlarge"]);
    let claim = node_claim(&names);
    let pod = pod();

    c.bench_function("intersection In[480] ∩ In[1]", |b| {
        b.iter(|| black_box(&many).intersection(black_box(&one)))
    });
    c.bench_function("intersection In[480] ∩ NotIn[2]", |b| {
        b.iter(|| black_box(&many).intersection(black_box(&excluded)))
    });
    let half: Vec<&String> = names.iter().step_by(2).collect();
    c.bench_function("build In[240] and intersect with In[480]", |b| {
        b.iter(|| {
            let remaining = Requirement::in_values(labels::INSTANCE_TYPE, black_box(&half));
            black_box(&many).intersection(&remaining)
        })
    });
    c.bench_function("add pod into node claim copy", |b| {
        b.iter(|| {
            let mut next = black_box(&claim).clone();
            next.add_all(black_box(&pod));
            next
        })
    });
}

criterion_group!(benches, compatibility, intersection);
criterion_main!(benches);
