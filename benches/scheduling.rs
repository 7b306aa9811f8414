//! The scheduling benchmark: upstream Karpenter's workload (400 synthetic instance types, the
//! diverse pod mix and the preference pods) at several sizes, against a first-fit-decreasing
//! lower bound that packs the same pods onto the same instance types with no constraints.
//! Also a round of a large scale-up in flight (`held/…`): 20 replicas of four workloads
//! held on each of 1,000 existing nodes, and the 1,000 pods still pending placed around
//! them; and a later round of a settled cluster (`round/…`): the same 20,000 placed pods and
//! 1 % new ones (or 100,000 on 5,000 nodes and 300 new ones), the round every few seconds of
//! a large cluster's steady state, solved as the controller solves it, through the forms kept
//! from the round before (`round-cold/…`: the same round solved from nothing); and a round
//! whose zone spread rules out the zone holding four in five of 5,000 nodes (`skewed/5000`).
//! Run with `cargo bench --bench scheduling`; a summary line per size follows criterion's
//! output (pods/s, NodeClaims, time relative to the lower bound).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};
use k8s_openapi::api::core::v1::Pod;
use kerf::pods::{LeanPod, PodLike};

use kerf::scheduling::testing::{
    benchmark_instance_types, diverse_pods, node_pool, pod, preference_pods, resources,
};
use kerf::scheduling::{
    ExistingNode, InstanceType, NodeForms, PodForms, SchedulingInput, SchedulingOptions, solve,
    solve_with,
};

const SIZES: [usize; 6] = [1, 100, 1000, 5000, 20000, 40000];

fn input(pods: Vec<Pod>, parallel: bool) -> SchedulingInput {
    SchedulingInput {
        pods: kerf::scheduling::testing::shared(pods),
        node_pools: vec![node_pool("default", benchmark_instance_types())],
        options: SchedulingOptions {
            parallel,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Milli-units of a quantity string (the benchmark's quantities are plain `m`/`Mi`/`Gi`).
fn milli(q: &str) -> i64 {
    let (num, mul) = if let Some(n) = q.strip_suffix('m') {
        (n, 1)
    } else if let Some(n) = q.strip_suffix("Mi") {
        (n, 1000 << 20)
    } else if let Some(n) = q.strip_suffix("Gi") {
        (n, 1000 << 30)
    } else {
        (q, 1000)
    };
    num.parse::<i64>().map_or(0, |n| n * mul)
}

fn requests(p: &LeanPod) -> [i64; 3] {
    let mut out = [0, 0, 1000];
    for c in p.spec().iter().flat_map(|s| &s.containers) {
        if let Some(r) = c.resources.as_ref().and_then(|r| r.requests.as_ref()) {
            out[0] += r.get("cpu").map_or(0, |q| milli(&q.0));
            out[1] += r.get("memory").map_or(0, |q| milli(&q.0));
        }
    }
    out
}

/// First-fit decreasing with no constraints: bins as large as the largest instance type,
/// each shrunk to the cheapest type that holds it. Returns the number of bins.
fn first_fit_decreasing(pods: &[Arc<LeanPod>], its: &[InstanceType]) -> usize {
    let caps: Vec<([i64; 3], f64)> = its
        .iter()
        .map(|it| {
            let alloc = it.allocatable();
            let get = |k: &str| alloc.get(k).map_or(0, |q| q.milli_value());
            let price = it
                .offerings
                .iter()
                .map(|o| o.price)
                .fold(f64::MAX, f64::min);
            ([get("cpu"), get("memory"), get("pods")], price)
        })
        .collect();
    let largest = caps
        .iter()
        .map(|(c, _)| *c)
        .max_by_key(|c| c[0])
        .unwrap_or([0; 3]);
    let mut items: Vec<[i64; 3]> = pods.iter().map(|p| requests(p)).collect();
    items.sort_unstable_by(|a, b| b.cmp(a));
    let mut bins: Vec<[i64; 3]> = Vec::new();
    for item in items {
        match bins
            .iter_mut()
            .find(|b| (0..3).all(|r| b[r] + item[r] <= largest[r]))
        {
            Some(b) => (0..3).for_each(|r| b[r] += item[r]),
            None => bins.push(item),
        }
    }
    let chosen: Vec<f64> = bins
        .iter()
        .map(|b| {
            caps.iter()
                .filter(|(c, _)| (0..3).all(|r| b[r] <= c[r]))
                .map(|(_, p)| *p)
                .fold(f64::MAX, f64::min)
        })
        .collect();
    black_box(chosen).len()
}

/// `nodes` existing nodes over three zones, each holding 20 of the replicas of four
/// workloads (as a round sees a scale-up whose pods wait on the nodes launched for them), and
/// `pending` replicas still pending. Every pod has a resourceVersion, as the controller's do,
/// so a round may keep its form.
fn held(nodes: usize, pending: usize) -> SchedulingInput {
    let workloads = [
        ("web", "250m"),
        ("api", "500m"),
        ("worker", "1"),
        ("cache", "500m"),
    ];
    let per_workload = nodes * 20 / workloads.len();
    let mut pods: Vec<Pod> = workloads
        .iter()
        .flat_map(|(name, cpu)| {
            pod(name)
                .cpu(cpu)
                .memory("512Mi")
                .labels(&[("app", name)])
                .replicas(name, per_workload)
        })
        .collect();
    pods.extend(
        pod("pending")
            .cpu("500m")
            .labels(&[("app", "pending")])
            .replicas("pending", pending),
    );
    for p in &mut pods {
        p.metadata.resource_version = Some("1".into());
    }
    let mut pods = kerf::scheduling::testing::shared(pods);
    let pending = pods.split_off(nodes * 20);
    around(pods.chunks(20), pending, |i| {
        (format!("node-{i}"), format!("test-zone-{}", i % 3 + 1))
    })
}

/// Initialized 16-CPU nodes, one per chunk of `placed` pods, named and zoned by index, and the
/// `pending` pods to place around them.
fn around<'a>(
    placed: impl Iterator<Item = &'a [Arc<LeanPod>]>,
    pending: Vec<Arc<LeanPod>>,
    name_and_zone: impl Fn(usize) -> (String, String),
) -> SchedulingInput {
    let existing_nodes = placed
        .enumerate()
        .map(|(i, held)| {
            let (name, zone) = name_and_zone(i);
            ExistingNode {
                labels: [
                    (kerf::labels::ZONE.to_owned(), zone),
                    (kerf::labels::HOSTNAME.to_owned(), name.clone()),
                ]
                .into(),
                name,
                allocatable: resources(&[("cpu", "16"), ("memory", "64Gi"), ("pods", "110")]),
                pods: held.to_vec(),
                initialized: true,
                ..Default::default()
            }
        })
        .collect();
    SchedulingInput {
        pods: pending,
        existing_nodes,
        ..input(Vec::new(), true)
    }
}

/// `nodes` existing nodes, four in five of them in one zone, each holding 10 replicas of a
/// workload whose zone spread is `DoNotSchedule`, and `pending` new replicas: the spread rules
/// out the crowded zone, whose nodes all still have room, so each new pod is placed in the
/// other two. The round of a large scale-out after one zone took most of the nodes.
fn skewed(nodes: usize, pending: usize) -> SchedulingInput {
    let zone = |i: usize| match i * 10 / nodes {
        0..8 => "test-zone-1",
        8 => "test-zone-2",
        _ => "test-zone-3",
    };
    let replicas = pod("web")
        .cpu("250m")
        .memory("256Mi")
        .labels(&[("app", "web")])
        .spread(kerf::labels::ZONE, 1, "DoNotSchedule", &[("app", "web")])
        .replicas("web", nodes * 10 + pending);
    let mut pods = kerf::scheduling::testing::shared(replicas);
    let pending = pods.split_off(nodes * 10);
    around(pods.chunks(10), pending, |i| {
        (format!("node-{i:05}"), zone(i).to_owned())
    })
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scheduling");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let inp = input(diverse_pods(n, 42), true);
        group.bench_function(format!("diverse/{n}"), |b| {
            b.iter(|| solve(black_box(&inp)))
        });
        group.bench_function(format!("ffd/{n}"), |b| {
            b.iter(|| first_fit_decreasing(black_box(&inp.pods), &inp.node_pools[0].instance_types))
        });
    }
    let pref = input(preference_pods(4000, 42), true);
    group.bench_function("preferences/4000", |b| b.iter(|| solve(black_box(&pref))));
    for (name, nodes, pending) in [
        ("held/20000", 1000, 1000),
        ("round/20000", 1000, 200),
        ("round/100000", 5000, 300),
    ] {
        let round = held(nodes, pending);
        let placed = solve(&round).expect("benchmark input is valid");
        assert!(placed.errors.is_empty(), "{:?}", placed.errors);
        let on_nodes: usize = placed.existing_nodes.iter().map(|n| n.pods.len()).sum();
        assert_eq!(on_nodes, pending, "the new pods fit around the placed ones");
        let Some(size) = name.strip_prefix("round/") else {
            group.bench_function(name, |b| b.iter(|| solve(black_box(&round))));
            continue;
        };
        group.bench_function(format!("round-cold/{size}"), |b| {
            b.iter(|| solve(black_box(&round)))
        });
        // The steady state: the previous round's forms kept, as the controller keeps them.
        let (mut pods, mut kept) = (PodForms::default(), NodeForms::default());
        let warm = solve_with(&round, &mut pods, &mut kept).expect("benchmark input is valid");
        assert_eq!(warm, placed, "the kept forms give the fresh result");
        group.bench_function(name, |b| {
            b.iter(|| solve_with(black_box(&round), &mut pods, &mut kept))
        });
        assert_eq!(kept.len(), nodes, "every node's form kept");
    }
    let round = skewed(5000, 300);
    let placed = solve(&round).expect("benchmark input is valid");
    assert!(placed.errors.is_empty(), "{:?}", placed.errors);
    let crowded = |name: &str| name < "node-04000";
    let on_nodes: Vec<&str> = placed
        .existing_nodes
        .iter()
        .flat_map(|n| n.pods.iter().map(|_| n.name.as_str()))
        .collect();
    assert_eq!(on_nodes.len(), 300, "the new pods fit on the nodes");
    assert!(
        !on_nodes.iter().any(|n| crowded(n)),
        "the spread keeps new pods out of the crowded zone"
    );
    group.bench_function("skewed/5000", |b| b.iter(|| solve(black_box(&round))));
    group.finish();
}

/// Median wall time of `runs` calls.
fn median(runs: usize, mut f: impl FnMut()) -> Duration {
    let mut times: Vec<Duration> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed()
        })
        .collect();
    times.sort();
    times[times.len() / 2]
}

fn summary() {
    println!("\nsummary (median of 5 runs each, one NodePool so one solver thread):");
    let mut at = std::collections::BTreeMap::new();
    for n in SIZES.into_iter().chain([2000]) {
        let inp = input(diverse_pods(n, 42), true);
        let result = solve(&inp).expect("benchmark input is valid");
        let t = median(5, || {
            black_box(solve(&inp).ok());
        });
        let lb = median(5, || {
            black_box(first_fit_decreasing(
                &inp.pods,
                &inp.node_pools[0].instance_types,
            ));
        });
        at.insert(n, t);
        println!(
            "diverse {n:>6} pods: {:>9.2} ms  {:>9.0} pods/s  {:>5} nodeclaims  {} unschedulable  lower bound {:>8.2} ms ({} bins)  ratio {:.1}x",
            t.as_secs_f64() * 1e3,
            n as f64 / t.as_secs_f64(),
            result.new_node_claims.len(),
            result.errors.len(),
            lb.as_secs_f64() * 1e3,
            first_fit_decreasing(&inp.pods, &inp.node_pools[0].instance_types),
            t.as_secs_f64() / lb.as_secs_f64(),
        );
    }
    if let (Some(t20), Some(t2)) = (at.get(&20000), at.get(&2000)) {
        println!(
            "time(20000)/time(2000) = {:.1}",
            t20.as_secs_f64() / t2.as_secs_f64()
        );
    }
    let pref = input(preference_pods(4000, 42), true);
    let result = solve(&pref).expect("benchmark input is valid");
    let t = median(5, || {
        black_box(solve(&pref).ok());
    });
    println!(
        "preferences  4000 pods: {:>9.2} ms  {:>9.0} pods/s  {:>5} nodeclaims  {} unschedulable",
        t.as_secs_f64() * 1e3,
        4000.0 / t.as_secs_f64(),
        result.new_node_claims.len(),
        result.errors.len()
    );
}

criterion_group!(benches, bench);

fn main() {
    // `--profile N`: solve N diverse pods repeatedly (for perf/callgrind), nothing else.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--profile") {
        let n = args
            .get(i + 1)
            .and_then(|n| n.parse().ok())
            .unwrap_or(20000);
        let inp = input(diverse_pods(n, 42), true);
        for _ in 0..(20000 / n.max(1)).clamp(3, 1000) {
            black_box(solve(&inp).ok());
        }
        return;
    }
    let summary_only = std::env::args().any(|a| a == "--summary");
    if !summary_only {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    summary();
}
