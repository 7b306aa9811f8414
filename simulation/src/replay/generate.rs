//! A generated replay log in kubereplay's format: a diurnal day. Deployments are created at
//! the start with the night's replicas and scaled every half hour along a daily curve (low
//! at night, highest in the early afternoon); Jobs arrive through the day, more of them in
//! working hours, each with a duration (kerf's `durationSeconds`). Deterministic for a seed,
//! so a test and the figures it backs see the same day.

use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{Value, json};

/// The shape of the generated day.
#[derive(Debug, Clone)]
pub struct Diurnal {
    pub seed: u64,
    pub deployments: usize,
    pub jobs: usize,
    /// Replicas of each Deployment at the quietest and the busiest moment.
    pub night_replicas: u32,
    pub peak_replicas: u32,
    /// The length of the day.
    pub span: Duration,
    /// How often each Deployment is scaled.
    pub scale_every: Duration,
}

impl Default for Diurnal {
    fn default() -> Self {
        Self {
            seed: 44,
            deployments: 30,
            jobs: 300,
            night_replicas: 1,
            peak_replicas: 10,
            span: Duration::from_secs(24 * 3600),
            scale_every: Duration::from_secs(30 * 60),
        }
    }
}

/// The load at `fraction` of the day, 0 at midnight and 1 at its peak (about 14:00).
pub fn load(fraction: f64) -> f64 {
    let shifted = (fraction - 14.0 / 24.0) * std::f64::consts::TAU;
    f64::midpoint(1.0, shifted.cos())
}

/// A small xorshift generator: no dependency, same sequence for a seed everywhere.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The CPU and memory requests the generated workloads pick from.
const SHAPES: [(&str, &str); 5] = [
    ("250m", "256Mi"),
    ("500m", "512Mi"),
    ("1", "1Gi"),
    ("1", "2Gi"),
    ("2", "4Gi"),
];

fn pod_spec(cpu: &str, memory: &str, job: bool) -> Value {
    let mut spec = json!({"containers": [{"name": "container-0",
        "image": "registry.k8s.io/pause:3.9",
        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]});
    if job {
        spec["restartPolicy"] = json!("Never");
    }
    spec
}

/// The day as a kubereplay log (JSON), starting at `start`.
pub fn day(shape: &Diurnal, start: Timestamp) -> Value {
    let mut random = Random(shape.seed.max(1));
    let mut events = Vec::new();
    let at = |seconds: f64| {
        let nanos = (seconds * 1e9) as i64;
        (start + SignedDuration::from_nanos(nanos)).to_string()
    };
    let span = shape.span.as_secs_f64();
    let replicas_at = |fraction: f64| {
        let range = f64::from(shape.peak_replicas - shape.night_replicas);
        shape.night_replicas + (range * load(fraction)).round() as u32
    };
    for d in 0..shape.deployments {
        let key = format!("kubereplay/deployment-{d}");
        let (cpu, memory) = SHAPES[random.below(SHAPES.len() as u64) as usize];
        let app = format!("app-{d}");
        // Spread the creates over the first minute, as a cluster's objects appear at start.
        let created = random.unit() * 60.0;
        events.push(json!({"type": "create", "kind": "Deployment", "key": key,
            "timestamp": at(created),
            "deployment": {"metadata": {"name": format!("deployment-{d}"), "namespace": "kubereplay",
                    "labels": {"kubereplay.karpenter.sh/managed": "true"}},
                "spec": {"replicas": replicas_at(created / span),
                    "selector": {"matchLabels": {"app": app}},
                    "template": {"metadata": {"labels": {"app": app,
                            "kubereplay.karpenter.sh/managed": "true"}},
                        "spec": pod_spec(cpu, memory, false)}}}}));
        let mut t = shape.scale_every.as_secs_f64() + random.unit() * 60.0;
        let mut last = replicas_at(created / span);
        while t < span {
            let wanted = replicas_at(t / span);
            if wanted != last {
                events.push(json!({"type": "scale", "kind": "Deployment", "key": key,
                    "replicas": wanted, "timestamp": at(t)}));
                last = wanted;
            }
            t += shape.scale_every.as_secs_f64();
        }
    }
    let mut placed = 0;
    while placed < shape.jobs {
        // Arrivals follow the load: draw a time, keep it with the load's probability.
        let t = random.unit() * span;
        if random.unit() > 0.15 + 0.85 * load(t / span) {
            continue;
        }
        let (cpu, memory) = SHAPES[random.below(SHAPES.len() as u64) as usize];
        let parallelism = 1 + random.below(3);
        let completions = parallelism * (1 + random.below(2));
        let minutes = 5 + random.below(26);
        events.push(json!({"type": "create", "kind": "Job",
            "key": format!("kubereplay/job-{placed}"),
            "timestamp": at(t), "durationSeconds": minutes * 60,
            "job": {"metadata": {"name": format!("job-{placed}"), "namespace": "kubereplay"},
                "spec": {"parallelism": parallelism, "completions": completions,
                    "template": {"metadata": {"labels": {"app": format!("job-{placed}")}},
                        "spec": pod_spec(cpu, memory, true)}}}}));
        placed += 1;
    }
    events.sort_by(|a, b| a["timestamp"].as_str().cmp(&b["timestamp"].as_str()));
    json!({"cluster": "diurnal", "captured": at(span), "events": events})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_day_rises_to_an_afternoon_peak_and_reads_back_whole() {
        assert!(load(0.0) < 0.1);
        assert!((load(14.0 / 24.0) - 1.0).abs() < 1e-9);
        let start: Timestamp = "2026-03-02T00:00:00Z".parse().expect("a time");
        let value = day(&Diurnal::default(), start);
        let log = super::super::log::parse(&value).expect("a log");
        assert!(log.skipped.is_empty(), "{:?}", log.skipped);
        let creates = |kind: &str| {
            value["events"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|e| e["type"] == "create" && e["kind"] == kind)
                .count()
        };
        assert_eq!(creates("Deployment"), 30);
        assert_eq!(creates("Job"), 300);
        assert!(log.span() > Duration::from_secs(23 * 3600));
        assert_eq!(day(&Diurnal::default(), start), value, "deterministic");
    }
}
