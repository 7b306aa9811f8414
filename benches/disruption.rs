//! The consolidation benchmark: disruption decisions on clusters of 100, 1,000 and 5,000
//! under-used nodes (30 pods each: zone spread, hostname anti-affinity, PDBs, a few
//! do-not-disrupt pods; 400 instance types), single-threaded solves. Measured: one
//! multi-node consolidation decision, one single-node consolidation decision, the full
//! decision — the first command of a pass through every method in upstream's order — the
//! controller's pass as the disruption loop runs it (`kerf::disruption::controller::pass`:
//! emptiness, drift, multi-node and single-node consolidation until one finds a command,
//! plus eligibility, budgets and the next consolidatable time), that pass again with what
//! the pass before prepared of the nodes kept (`next-pass`, as the loop runs pass after
//! pass), and all four of those methods each evaluated to its end on the same snapshot (a
//! pass that has to run them all, each building its own decision state). Run with
//! `cargo bench -p kerf --bench disruption` (one benchmark: `-- four-methods/1000`);
//! `-- --summary` prints only the table, which a run given a filter leaves out.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group};

use kerf::disruption::controller::{self, VOLUNTARY_METHODS};
use kerf::disruption::testing::{benchmark_cluster, options};
use kerf::disruption::{Cluster, Forms, Method, Timeouts, first_command, first_pass};

/// The controller's allocator (mimalloc, through the accounting allocator the `kerf` binary
/// installs), so that a solve's many small allocations cost here what they cost there.
#[global_allocator]
static GLOBAL: kerf_heap::Accounting = kerf_heap::Accounting;

const SIZES: [usize; 3] = [100, 1000, 5000];

fn multi(cluster: &Cluster) {
    black_box(first_command(cluster, options(), Method::MultiNodeConsolidation).ok());
}

fn single(cluster: &Cluster) {
    black_box(first_command(cluster, options(), Method::SingleNodeConsolidation).ok());
}

fn pass(cluster: &Cluster) {
    black_box(first_pass(cluster, options()).ok());
}

fn controller_pass(cluster: &Cluster) {
    black_box(controller::pass(cluster, options(), Timeouts::NONE).ok());
}

fn next_pass(cluster: &Cluster, forms: &mut Forms) {
    black_box(controller::pass_owned(cluster.clone(), options(), Timeouts::NONE, forms).ok());
}

fn four_methods(cluster: &Cluster) {
    for method in VOLUNTARY_METHODS {
        black_box(first_command(cluster, options(), method).ok());
    }
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("disruption");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3));
    for n in SIZES {
        let cluster = benchmark_cluster(n, 42);
        group.bench_function(format!("multi-node/{n}"), |b| b.iter(|| multi(&cluster)));
        group.bench_function(format!("single-node/{n}"), |b| b.iter(|| single(&cluster)));
        group.bench_function(format!("pass/{n}"), |b| b.iter(|| pass(&cluster)));
        group.bench_function(format!("controller-pass/{n}"), |b| {
            b.iter(|| controller_pass(&cluster))
        });
        let mut forms = Forms::default();
        next_pass(&cluster, &mut forms);
        group.bench_function(format!("next-pass/{n}"), |b| {
            b.iter(|| next_pass(&cluster, &mut forms))
        });
        group.bench_function(format!("four-methods/{n}"), |b| {
            b.iter(|| four_methods(&cluster))
        });
    }
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

fn describe(command: Option<kerf::disruption::CommandReport>) -> String {
    match command {
        None => "no command".into(),
        Some(c) => format!(
            "{:?} {:?} {} nodes -> {} replacements, saves ${:.2}/h",
            c.method,
            c.decision,
            c.nodes.len(),
            c.replacements.len(),
            c.hourly_savings
        ),
    }
}

fn summary() {
    println!(
        "\nsummary (median of 3 runs each; one thread; times include building the decision state):"
    );
    println!(
        "{:>6}  {:>12}  {:>12}  {:>12}  {:>12}  {:>12}  first command of the full pass",
        "nodes", "multi-node", "single-node", "full pass", "next pass", "four methods"
    );
    let mut full = std::collections::BTreeMap::new();
    for n in SIZES {
        let cluster = benchmark_cluster(n, 42);
        let m = median(3, || multi(&cluster));
        let s = median(3, || single(&cluster));
        let p = median(3, || pass(&cluster));
        let mut forms = Forms::default();
        next_pass(&cluster, &mut forms);
        let again = median(3, || next_pass(&cluster, &mut forms));
        let f = median(3, || four_methods(&cluster));
        full.insert(n, p);
        println!(
            "{n:>6}  {:>9.1} ms  {:>9.1} ms  {:>9.1} ms  {:>9.1} ms  {:>9.1} ms  {}",
            m.as_secs_f64() * 1e3,
            s.as_secs_f64() * 1e3,
            p.as_secs_f64() * 1e3,
            again.as_secs_f64() * 1e3,
            f.as_secs_f64() * 1e3,
            describe(first_pass(&cluster, options()).ok().flatten())
        );
    }
    if let (Some(t5), Some(t1)) = (full.get(&5000), full.get(&1000)) {
        println!(
            "full pass time(5000)/time(1000) = {:.1}",
            t5.as_secs_f64() / t1.as_secs_f64()
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    let summary_only = std::env::args().any(|a| a == "--summary");
    // A filter (`-- four-methods/1000`) asks for those benchmarks alone.
    let filtered = std::env::args().skip(1).any(|a| !a.starts_with('-'));
    if !summary_only {
        benches();
        Criterion::default().configure_from_args().final_summary();
    }
    if summary_only || !filtered {
        summary();
    }
}
