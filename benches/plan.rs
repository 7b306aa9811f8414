//! The `kerf plan` benchmark: a realistic cluster dump (`kerf::plan::fixtures`, the one
//! `kerf-dump` writes: Deployments, StatefulSets and DaemonSets with `kubectl get -o`-shaped
//! pods, 10 % of them running on existing Nodes) of 2,000 and 20,000 pods, read from memory
//! as JSON and as YAML and planned as `kerf plan` plans it: the streaming reader, the
//! inventory, the snapshot, the solve and the report. `read` is the reader and the inventory
//! alone; `plan` is all of it, so their difference is the planning pipeline.
//! Run with `cargo bench -p kerf --bench plan` (one size: `-- plan/json/20000`).
//!
//! Peak memory is measured on the whole command instead (`kerf-dump --pods 10000 > d.json`,
//! then `/usr/bin/time -v kerf plan -f d.json`): criterion times, it does not weigh.

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

use kerf::cluster::inventory::{Builder, Inventory};
use kerf::manifest::{Limits, stream};
use kerf::plan::fixtures::{self, DumpFormat, DumpShape};
use kerf::plan::{PlanOptions, plan_inventory};

const SIZES: [usize; 2] = [2_000, 20_000];

fn dump(pods: usize, format: DumpFormat) -> Vec<u8> {
    let mut out = Vec::new();
    fixtures::write(
        fixtures::objects(DumpShape::pending(pods)),
        format,
        &mut out,
    )
    .expect("writes to memory");
    out
}

/// The dump read as `kerf plan -f` reads it: each object into the inventory as it is parsed,
/// pods typed.
fn read(text: &[u8]) -> Inventory {
    let mut builder = Builder::default();
    let limits = Limits {
        typed_pods: true,
        ..Limits::default()
    };
    stream::read(text, "dump", limits, &mut |object| {
        builder.add(object.expect("the dump parses"));
    })
    .expect("the dump reads");
    builder.finish().expect("the dump is valid")
}

fn plan(text: &[u8]) {
    let outcome = plan_inventory(read(text), &PlanOptions::default()).expect("plans");
    assert!(
        !outcome.report.node_claims.is_empty(),
        "pending pods get NodeClaims"
    );
    black_box(outcome);
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("plan");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(20));
    for pods in SIZES {
        for (name, format) in [("json", DumpFormat::Json), ("yaml", DumpFormat::Yaml)] {
            let text = dump(pods, format);
            group.bench_with_input(
                BenchmarkId::new(format!("read/{name}"), pods),
                &text,
                |b, t| b.iter(|| black_box(read(t))),
            );
            group.bench_with_input(
                BenchmarkId::new(format!("plan/{name}"), pods),
                &text,
                |b, t| b.iter(|| plan(t)),
            );
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
