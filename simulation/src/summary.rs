//! The end-of-run report: pods bound and left over (with the controller's reason for each
//! pod it could not place), the capacity launched (nodes by instance type, zone and capacity
//! type, and what it costs per hour), how long pods waited from creation to binding, the
//! NodeClaims created (against the count `kerf plan` computes for the same objects), the
//! cloud API calls made, the provisioning rounds, and memory: the controller's own heap and the
//! whole process's peak. Serialised as is for `-o json`; [`Summary::to_table`] is the human
//! form.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use kerf_loadtest::ec2::{ApiCalls, Instance};
use serde::Serialize;

use super::figures::{HeapPart, Latency, hourly_cost, latency, mib, round3};
use super::interrupt::Interruptions;
use super::observe::Counts;
use super::scale_down::Disruption;

/// How the run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Outcome {
    /// Every pod that can fit is bound.
    Complete,
    /// `--duration` ran out with pods pending that the controller did not call unschedulable.
    TimedOut,
    /// Ctrl-C or SIGTERM stopped the run early: the summary is of what happened until then.
    Interrupted,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Summary {
    pub outcome: Outcome,
    pub elapsed_seconds: f64,
    pub pods: Pods,
    /// From creation to binding, over the bound pods.
    pub pod_latency_seconds: Latency,
    pub node_claims: NodeClaims,
    pub nodes: Nodes,
    /// Sum of the hourly prices of the live instances.
    pub hourly_cost: f64,
    pub cloud_api_calls: CloudApiCalls,
    /// The controller's API writes per NodeClaim created, from the emulator's request log.
    pub api_writes_per_node_claim: super::writes::WritesPerNodeClaim,
    pub provisioning: Provisioning,
    pub memory: Memory,
    /// Pools injected with insufficient capacity, as `capacity/type/zone`.
    pub insufficient_capacity_pools: usize,
    /// The AMI rollout of `--drift`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drift: Option<super::drift::Rollout>,
    /// The `--interrupt-spot` phase, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interruptions: Option<Interruptions>,
    /// What `--scale-down` gave back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disruption: Option<Disruption>,
    /// Where the controller serves its metrics and probes while the run (and, with
    /// `--kubeconfig-out`, the cluster after it) is up.
    pub controller_endpoints: Endpoints,
    /// The controller's requests the chart's RBAC refused, and its grants no request used.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rbac: Option<super::install::RbacUsage>,
}

/// The controller's HTTP endpoints, as URLs.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoints {
    pub metrics: String,
    pub liveness: String,
    pub readiness: String,
}

impl Endpoints {
    pub fn new(metrics: std::net::SocketAddr, probes: std::net::SocketAddr) -> Self {
        Self {
            metrics: format!("http://{metrics}/metrics"),
            liveness: format!("http://{probes}/healthz"),
            readiness: format!("http://{probes}/readyz"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Pods {
    /// Workload pods (DaemonSet pods are not counted).
    pub total: usize,
    pub bound: usize,
    pub pending: usize,
    /// Pending pods the controller reported it cannot place, with its reason.
    pub unschedulable: Vec<UnschedulablePod>,
    /// Pending pods it did not report (only when the run timed out), at most 20.
    pub stuck: Vec<String>,
    /// The mean size of a stored pod as JSON (status, managedFields and all), in bytes: what
    /// each pod costs a client's watch cache and decoder.
    pub average_object_bytes: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UnschedulablePod {
    pub pod: String,
    pub reason: String,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaims {
    pub created: usize,
    /// What `kerf plan` computes for the same objects; `None` when it could not plan.
    pub plan: Option<usize>,
    /// `created / plan`, to three decimals.
    pub created_over_plan: Option<f64>,
    pub launched: usize,
    pub registered: usize,
    pub ready: usize,
    pub deleted: usize,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nodes {
    /// Live (pending or running) instances.
    pub total: usize,
    pub by_instance_type: BTreeMap<String, usize>,
    pub by_zone: BTreeMap<String, usize>,
    pub by_capacity_type: BTreeMap<String, usize>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudApiCalls {
    pub total: u64,
    pub throttled: u64,
    pub by_operation: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Provisioning {
    pub rounds: u64,
    /// Pods the rounds planned into the NodeClaims they created, summed over rounds: a pod
    /// a later round planned anew (its room taken by another pod, its nomination released)
    /// counts again, so beyond the pods bound on launched capacity it is room planned twice.
    pub planned_pods: u64,
    /// The round that created the most NodeClaims.
    pub largest_round: Option<RoundFigures>,
    /// What became of the nominations the controller wrote.
    pub nominations: Nominations,
}

/// The controller's nomination counters at the end of the run: how the room it launched for
/// was kept for the pods it planned there.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Nominations {
    /// Pods nominated to the Node of the NodeClaim created for them.
    pub written: u64,
    /// Withdrawn at the window's end, the pod still pending.
    pub expired: u64,
    /// Withdrawn because the kube-scheduler tried the pod there and it did not fit.
    pub unusable: u64,
    /// Writes the API server refused for a reason other than the pod being gone.
    pub failed: u64,
    /// Pods still unnominated when registration stopped waiting and opened their Node.
    pub left_at_registration: u64,
    /// Nodes opened before every placement-constrained pod planned there was nominated.
    pub nodes_opened_before_constrained_nominated: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RoundFigures {
    pub number: u64,
    pub pending_pods: usize,
    pub node_claims: usize,
    /// Pods planned into those NodeClaims.
    pub planned_pods: usize,
    /// Snapshot and scheduling.
    pub solve_seconds: f64,
    /// From the batch window closing to the last of the round's NodeClaims being created.
    pub batch_close_to_created_seconds: f64,
    /// The least the client budget allows for the round's creates:
    /// max(0, creates − KUBE_CLIENT_BURST) / KUBE_CLIENT_QPS, with the settings in effect.
    pub client_budget_bound_seconds: f64,
}

/// What the summary is made of.
pub struct Facts<'a> {
    pub outcome: Outcome,
    pub elapsed: Duration,
    pub counts: Counts,
    pub pending: &'a [String],
    pub unschedulable: &'a BTreeMap<String, String>,
    pub latencies: Vec<Duration>,
    pub instances: &'a [Instance],
    pub api_calls: &'a ApiCalls,
    pub api_writes: super::writes::WritesPerNodeClaim,
    pub provisioning: Provisioning,
    pub memory: Memory,
    pub ice_pools: usize,
    /// NodeClaims `kerf plan` computes for the same objects.
    pub plan: Option<usize>,
    pub disruption: Option<Disruption>,
    pub endpoints: Endpoints,
}

/// The controller's memory, the simulated cluster's parts' and the whole process's, in bytes
/// (see the `memory` module).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// The most heap the controller's threads held at once: bytes they allocated and had not
    /// yet freed (allocator overhead not included).
    pub controller_heap_peak_bytes: u64,
    /// The controller's heap at the end of the run.
    pub controller_heap_live_bytes: u64,
    /// Each part of the simulated cluster's heap, counted as the controller's is.
    pub simulated_heap: Vec<HeapPart>,
    /// Peak resident memory of the whole `kerf simulate` process (controller and simulated
    /// cluster together), read before the plan count is computed.
    pub process_peak_rss_bytes: Option<u64>,
}

/// Stuck pods listed by name at most.
const STUCK_LISTED: usize = 20;

impl Summary {
    pub fn new(facts: Facts<'_>) -> Self {
        let unschedulable: Vec<UnschedulablePod> = facts
            .pending
            .iter()
            .filter_map(|pod| {
                facts.unschedulable.get(pod).map(|reason| UnschedulablePod {
                    pod: pod.clone(),
                    reason: reason.clone(),
                })
            })
            .collect();
        let stuck = facts
            .pending
            .iter()
            .filter(|pod| !facts.unschedulable.contains_key(*pod))
            .take(STUCK_LISTED)
            .cloned()
            .collect();
        let live: Vec<&Instance> = facts
            .instances
            .iter()
            .filter(|i| i.state.is_live())
            .collect();
        Self {
            outcome: facts.outcome,
            elapsed_seconds: round3(facts.elapsed.as_secs_f64()),
            pods: Pods {
                total: facts.counts.pods,
                bound: facts.counts.bound,
                pending: facts.pending.len(),
                unschedulable,
                stuck,
                average_object_bytes: None,
            },
            pod_latency_seconds: latency(facts.latencies),
            node_claims: NodeClaims {
                created: facts.counts.claims_created,
                plan: facts.plan,
                created_over_plan: facts
                    .plan
                    .filter(|p| *p > 0)
                    .map(|p| round3(facts.counts.claims_created as f64 / p as f64)),
                launched: facts.counts.claims_launched,
                registered: facts.counts.claims_registered,
                ready: facts.counts.claims_ready,
                deleted: facts.counts.claims_deleted,
            },
            nodes: Nodes {
                total: live.len(),
                by_instance_type: tally(live.iter().map(|i| i.instance_type.clone())),
                by_zone: tally(live.iter().map(|i| i.zone.clone())),
                by_capacity_type: tally(live.iter().map(|i| i.capacity_type.to_string())),
            },
            hourly_cost: hourly_cost(facts.instances),
            cloud_api_calls: CloudApiCalls {
                total: facts.api_calls.total_calls(),
                throttled: facts.api_calls.total_throttled(),
                by_operation: facts
                    .api_calls
                    .by_operation
                    .iter()
                    .map(|(op, count)| ((*op).to_owned(), count.calls))
                    .collect(),
            },
            api_writes_per_node_claim: facts.api_writes,
            provisioning: facts.provisioning,
            memory: facts.memory,
            insufficient_capacity_pools: facts.ice_pools,
            drift: None,
            interruptions: None,
            disruption: facts.disruption,
            controller_endpoints: facts.endpoints,
            rbac: None,
        }
    }

    /// The report for people.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let outcome = match self.outcome {
            Outcome::Complete => "every pod that can fit is bound",
            Outcome::TimedOut => "timed out with pods still pending",
            Outcome::Interrupted => "stopped by a signal; what happened until then",
        };
        let _ = writeln!(out, "{outcome} after {:.1}s", self.elapsed_seconds);
        let _ = writeln!(
            out,
            "pods            {} bound of {} ({} pending, {} unschedulable)",
            self.pods.bound,
            self.pods.total,
            self.pods.pending,
            self.pods.unschedulable.len()
        );
        let l = &self.pod_latency_seconds;
        let _ = writeln!(
            out,
            "pending→bound   p50 {:.2}s  p95 {:.2}s  max {:.2}s",
            l.p50, l.p95, l.max
        );
        let c = &self.node_claims;
        let _ = writeln!(
            out,
            "NodeClaims      {} created, {} launched, {} registered, {} ready, {} deleted",
            c.created, c.launched, c.registered, c.ready, c.deleted
        );
        if let (Some(plan), Some(ratio)) = (c.plan, c.created_over_plan) {
            let _ = writeln!(
                out,
                "  vs kerf plan  {plan} for the same objects: created ×{ratio:.3}"
            );
        }
        let _ = writeln!(
            out,
            "nodes           {} (${:.4}/hour)",
            self.nodes.total, self.hourly_cost
        );
        for (title, counts) in [
            ("  by type", &self.nodes.by_instance_type),
            ("  by zone", &self.nodes.by_zone),
            ("  by capacity", &self.nodes.by_capacity_type),
        ] {
            let _ = writeln!(out, "{title:<16}{}", joined(counts));
        }
        let _ = writeln!(
            out,
            "cloud API calls {} ({} throttled): {}",
            self.cloud_api_calls.total,
            self.cloud_api_calls.throttled,
            joined(&self.cloud_api_calls.by_operation)
        );
        let _ = write!(
            out,
            "provisioning    {} rounds, {} pods planned into NodeClaims",
            self.provisioning.rounds, self.provisioning.planned_pods
        );
        if let Some(r) = &self.provisioning.largest_round {
            let _ = write!(
                out,
                "; largest: {} pending pods → {} NodeClaims for {} pods, solve {:.3}s, batch close → all created {:.3}s (client budget's bound {:.3}s)",
                r.pending_pods,
                r.node_claims,
                r.planned_pods,
                r.solve_seconds,
                r.batch_close_to_created_seconds,
                r.client_budget_bound_seconds
            );
        }
        out.push('\n');
        let w = &self.api_writes_per_node_claim;
        if let Some(nc) = w.by_kind.get("nodeclaims") {
            let _ = write!(
                out,
                "API writes      per NodeClaim: nodeclaims {} creates, {} patches, {} status writes",
                nc.creates, nc.patches, nc.status_writes
            );
            if let Some(to_launched) = w.node_claim_writes_to_launched {
                let _ = write!(
                    out,
                    "; {to_launched} up to Launched (upstream {})",
                    w.upstream_node_claim_writes_to_launched
                );
            }
            out.push('\n');
        }
        let others: Vec<String> = w
            .by_kind
            .iter()
            .filter(|(kind, _)| *kind != "nodeclaims")
            .map(|(kind, k)| format!("{kind} {}/{}/{}", k.creates, k.patches, k.status_writes))
            .collect();
        if !others.is_empty() {
            let _ = writeln!(
                out,
                "                creates/patches/status writes: {}",
                others.join(", ")
            );
        }
        let n = &self.provisioning.nominations;
        let _ = writeln!(
            out,
            "nominations     {} written, {} expired, {} unusable, {} failed; {} pods left unnominated as their Node opened ({} Nodes before their constrained pods)",
            n.written,
            n.expired,
            n.unusable,
            n.failed,
            n.left_at_registration,
            n.nodes_opened_before_constrained_nominated
        );
        if let Some(bytes) = self.pods.average_object_bytes {
            let _ = writeln!(
                out,
                "pod objects     {bytes} bytes of JSON on average (as stored: status and managedFields included)"
            );
        }
        let _ = writeln!(
            out,
            "controller heap peak {:.1} MiB (bytes allocated by the controller's threads and not yet freed; allocator overhead not included)",
            mib(self.memory.controller_heap_peak_bytes)
        );
        if !self.memory.simulated_heap.is_empty() {
            let parts: Vec<String> = self
                .memory
                .simulated_heap
                .iter()
                .map(|p| format!("{} {:.1}", p.part, mib(p.peak_bytes)))
                .collect();
            let _ = writeln!(
                out,
                "simulated heap  peaks in MiB: {} (each part's own threads and tasks, counted as the controller's)",
                parts.join(", ")
            );
        }
        if let Some(bytes) = self.memory.process_peak_rss_bytes {
            let _ = writeln!(
                out,
                "process memory  peak {:.1} MiB resident (whole process: controller + simulated cluster, before the plan count)",
                mib(bytes)
            );
        }
        let e = &self.controller_endpoints;
        let _ = writeln!(
            out,
            "controller      metrics {}  probes {} {}",
            e.metrics, e.liveness, e.readiness
        );
        if self.insufficient_capacity_pools > 0 {
            let _ = writeln!(
                out,
                "injected ICE    {} pools",
                self.insufficient_capacity_pools
            );
        }
        for (reason, pods) in by_reason(&self.pods.unschedulable) {
            let _ = writeln!(
                out,
                "unschedulable   {} pod(s), e.g. {}: {reason}",
                pods.len(),
                pods[0]
            );
        }
        for pod in &self.pods.stuck {
            let _ = writeln!(out, "still pending   {pod}");
        }
        if let Some(rbac) = &self.rbac {
            let _ = writeln!(
                out,
                "chart RBAC      {} request(s) refused, {} granted rule(s) unused",
                rbac.refused.len(),
                rbac.unused.len()
            );
            for refused in &rbac.refused {
                let _ = writeln!(out, "  refused       {refused}");
            }
        }
        if let Some(drift) = &self.drift {
            out.push_str(&drift.to_table());
        }
        if let Some(interruptions) = &self.interruptions {
            out.push_str(&interruptions.to_table());
        }
        if let Some(disruption) = &self.disruption {
            out.push_str(&disruption.to_table());
        }
        out
    }
}

/// Unschedulable pods grouped by reason, most common first.
fn by_reason(pods: &[UnschedulablePod]) -> Vec<(&str, Vec<&str>)> {
    let mut groups: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for pod in pods {
        groups.entry(&pod.reason).or_default().push(&pod.pod);
    }
    let mut groups: Vec<(&str, Vec<&str>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, pods)| std::cmp::Reverse(pods.len()));
    groups
}

fn joined<V: std::fmt::Display>(counts: &BTreeMap<String, V>) -> String {
    counts
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn tally(items: impl Iterator<Item = String>) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for item in items {
        *counts.entry(item).or_default() += 1;
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf_loadtest::ec2::{CapacityType, InstanceState};
    use std::time::SystemTime;

    fn instance(instance_type: &str, zone: &str, state: InstanceState, price: f64) -> Instance {
        Instance {
            instance_id: "i-0123456789abcdef0".into(),
            instance_type: instance_type.into(),
            zone: zone.into(),
            capacity_type: CapacityType::Spot,
            state,
            image_id: None,
            subnet_id: None,
            launch_template_name: "lt".into(),
            private_ip_address: "10.0.0.1".into(),
            private_dns_name: "ip-10-0-0-1.ec2.internal".into(),
            launch_time: SystemTime::now(),
            price,
            tags: BTreeMap::new(),
            interruption: None,
            capacity_reservation_id: None,
        }
    }

    #[test]
    fn counts_live_nodes_and_their_cost_and_splits_pending_pods() {
        let instances = [
            instance("m5.large", "us-east-1a", InstanceState::Running, 0.05),
            instance("m5.large", "us-east-1b", InstanceState::Pending, 0.05),
            instance("c5.xlarge", "us-east-1a", InstanceState::Terminated, 0.1),
        ];
        let pending = ["default/big".to_owned(), "default/web-1".to_owned()];
        let unschedulable = BTreeMap::from([("default/big".to_owned(), "too big".to_owned())]);
        let summary = Summary::new(Facts {
            outcome: Outcome::TimedOut,
            elapsed: Duration::from_millis(1500),
            counts: Counts {
                pods: 3,
                bound: 1,
                claims_created: 3,
                ..Counts::default()
            },
            pending: &pending,
            unschedulable: &unschedulable,
            latencies: vec![Duration::from_secs(1)],
            instances: &instances,
            api_calls: &ApiCalls::default(),
            api_writes: super::super::writes::WritesPerNodeClaim::default(),
            provisioning: Provisioning::default(),
            memory: Memory {
                controller_heap_peak_bytes: 3 << 20,
                controller_heap_live_bytes: 1 << 20,
                simulated_heap: vec![HeapPart {
                    part: "emulator",
                    peak_bytes: 12 << 20,
                    live_bytes: 5 << 20,
                }],
                process_peak_rss_bytes: Some(40 << 20),
            },
            ice_pools: 0,
            plan: Some(2),
            disruption: None,
            endpoints: Endpoints::new(
                "127.0.0.1:8080".parse().expect("address"),
                "127.0.0.1:8081".parse().expect("address"),
            ),
        });
        assert!(
            summary
                .to_table()
                .contains("controller      metrics http://127.0.0.1:8080/metrics  probes http://127.0.0.1:8081/healthz http://127.0.0.1:8081/readyz"),
            "{}",
            summary.to_table()
        );
        assert_eq!(summary.nodes.total, 2);
        assert_eq!(summary.nodes.by_instance_type["m5.large"], 2);
        assert_eq!(summary.nodes.by_zone.len(), 2);
        assert_eq!(summary.hourly_cost, 0.1);
        assert_eq!(
            summary.pods.unschedulable,
            [UnschedulablePod {
                pod: "default/big".into(),
                reason: "too big".into()
            }]
        );
        assert_eq!(summary.pods.stuck, ["default/web-1"]);
        let json = serde_json::to_value(&summary).expect("serialises");
        assert_eq!(json["outcome"], "timedOut");
        assert_eq!(json["nodes"]["byCapacityType"]["spot"], 2);
        assert_eq!(json["nodeClaims"]["plan"], 2);
        assert_eq!(json["nodeClaims"]["createdOverPlan"], 1.5);
        let table = summary.to_table();
        assert!(
            table.contains("vs kerf plan  2 for the same objects: created ×1.500"),
            "{table}"
        );
        assert!(table.contains("1 bound of 3"), "{table}");
        assert!(
            table.contains(
                "controller heap peak 3.0 MiB (bytes allocated by the controller's threads"
            ),
            "{table}"
        );
        assert!(
            table.contains("process memory  peak 40.0 MiB resident (whole process"),
            "{table}"
        );
        assert!(
            table.contains("simulated heap  peaks in MiB: emulator 12.0 ("),
            "{table}"
        );
        assert_eq!(json["memory"]["controllerHeapPeakBytes"], 3 << 20);
        assert_eq!(json["memory"]["processPeakRssBytes"], 40 << 20);
        assert_eq!(json["memory"]["simulatedHeap"][0]["part"], "emulator");
        assert_eq!(json["memory"]["simulatedHeap"][0]["peakBytes"], 12 << 20);
        assert!(table.contains("still pending   default/web-1"), "{table}");
        assert!(
            table.contains("unschedulable   1 pod(s), e.g. default/big: too big"),
            "{table}"
        );
    }
}
