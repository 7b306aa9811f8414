//! The manifest reader alone (`kerf::manifest::stream::read`): a realistic 20,000-pod cluster
//! dump, the size issue 16's goals are set at (`kerf::plan::fixtures`, as `kerf-dump` writes
//! it), read from memory as a YAML `List`, a YAML multi-document stream and a JSON `List`,
//! every object handed to a sink that only counts it. This is what `kerf validate` costs
//! before validating, and (`-typed`, pods decoded straight into their typed form) what `kerf
//! plan` costs before building its inventory (`benches/plan.rs` measures those together).
//! Run with `cargo bench -p kerf --bench reader` (one format: `-- reader/yaml`).

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};

use kerf::manifest::{Limits, stream};
use kerf::plan::fixtures::{self, DumpFormat, DumpShape};

const PODS: usize = 20_000;

fn dump(format: DumpFormat) -> Vec<u8> {
    let mut out = Vec::new();
    let shape = DumpShape {
        pods: PODS,
        running_percent: 20,
    };
    fixtures::write(fixtures::objects(shape), format, &mut out).expect("writes to memory");
    out
}

fn read(text: &[u8], limits: Limits) -> usize {
    let mut objects = 0;
    stream::read(text, "dump", limits, &mut |object| {
        black_box(object.expect("the dump parses"));
        objects += 1;
    })
    .expect("the dump reads");
    objects
}

fn reader(c: &mut Criterion) {
    let mut group = c.benchmark_group("reader");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(20));
    for (name, format) in [
        ("yaml", DumpFormat::Yaml),
        ("yaml-stream", DumpFormat::YamlStream),
        ("json", DumpFormat::Json),
    ] {
        let text = dump(format);
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_function(format!("{name}/{PODS}"), |b| {
            b.iter(|| read(&text, Limits::default()))
        });
        // As `kerf plan` reads it: a List's pods straight into their typed form.
        let typed = Limits {
            typed_pods: true,
            ..Limits::default()
        };
        group.bench_function(format!("{name}-typed/{PODS}"), |b| {
            b.iter(|| read(&text, typed))
        });
    }
    group.finish();
}

criterion_group!(benches, reader);
criterion_main!(benches);
