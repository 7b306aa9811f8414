//! The figures a run's parts measure and the summary and report print: pod latency
//! percentiles, one part of the simulated heap, the controller's client budget, the cost of
//! the live instances, and the rounding they share. Below the summary and the phases that
//! fill it ([`crate::interrupt`], [`crate::scale_down`], `memory`, [`crate::world`]),
//! so each depends on these small types rather than on the summary that gathers them.

use std::time::Duration;

use kerf_loadtest::ec2::Instance;
use serde::Serialize;

/// Nearest-rank percentiles of a latency, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Latency {
    pub p50: f64,
    pub p95: f64,
    pub max: f64,
}

/// One part of the simulated cluster's heap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeapPart {
    /// `emulator`, `kubelets`, `scheduler`, `ec2`, `observers` or `simulate` (the rest of the
    /// process's own threads).
    pub part: &'static str,
    /// The most heap the part held at once (its own moment; peaks do not add up).
    pub peak_bytes: u64,
    /// The part's heap at the end of the run.
    pub live_bytes: u64,
}

/// The controller's client budget in effect (`KUBE_CLIENT_QPS`, `KUBE_CLIENT_BURST`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientBudget {
    pub qps: u32,
    pub burst: u32,
}

impl Default for ClientBudget {
    /// The settings' defaults.
    fn default() -> Self {
        Self {
            qps: 200,
            burst: 300,
        }
    }
}

impl ClientBudget {
    /// The least time `creates` requests of one kind take through a full bucket.
    pub fn bound_seconds(&self, creates: usize) -> f64 {
        let over = (creates as f64 - f64::from(self.burst)).max(0.0);
        round3(over / f64::from(self.qps.max(1)))
    }
}

/// Bytes in MiB.
pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Seconds to milliseconds.
pub fn round3(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// What the live (pending or running) instances cost per hour, to four decimals.
pub fn hourly_cost(instances: &[Instance]) -> f64 {
    let sum: f64 = instances
        .iter()
        .filter(|i| i.state.is_live())
        .map(|i| i.price)
        .sum();
    // An empty sum of floats is -0.0, which prints as "-0": adding 0.0 makes it 0.0.
    (sum * 10_000.0).round() / 10_000.0 + 0.0
}

/// Nearest-rank percentiles of `samples`; zeros when there are none.
pub fn latency(mut samples: Vec<Duration>) -> Latency {
    if samples.is_empty() {
        return Latency::default();
    }
    samples.sort();
    let seconds: Vec<f64> = samples.iter().map(Duration::as_secs_f64).collect();
    Latency {
        p50: nearest_rank(&seconds, 0.50),
        p95: nearest_rank(&seconds, 0.95),
        max: round3(seconds[seconds.len() - 1]),
    }
}

/// The nearest-rank `p` percentile (0 < p ≤ 1) of `sorted`, to milliseconds; 0 when empty.
pub fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let index = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    round3(sorted[index])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_instances_cost_a_positive_zero() {
        let cost = hourly_cost(&[]);
        assert!(cost == 0.0 && cost.is_sign_positive(), "{cost}");
        assert_eq!(format!("{cost:.3}"), "0.000");
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(
            latency(samples),
            Latency {
                p50: 0.05,
                p95: 0.095,
                max: 0.1
            }
        );
        assert_eq!(latency(Vec::new()), Latency::default());
        assert_eq!(latency(vec![Duration::from_secs(2)]).p50, 2.0);
    }

    #[test]
    fn the_client_budget_bounds_a_rounds_creates_past_its_burst() {
        let budget = ClientBudget {
            qps: 200,
            burst: 300,
        };
        assert_eq!(budget.bound_seconds(250), 0.0);
        assert_eq!(budget.bound_seconds(1300), 5.0);
        assert_eq!(ClientBudget { qps: 20, burst: 30 }.bound_seconds(31), 0.05);
    }
}
