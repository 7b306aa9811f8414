//! `--interrupt-spot FRACTION`: once scale-out has settled (every pod that can fit is bound),
//! the simulated EC2 issues spot interruption warnings to that fraction of the running spot
//! instances at once and reclaims them when the two-minute notice runs out, as AWS does. The
//! warnings reach the controller as EventBridge JSON through the simulated region's queue,
//! so the real parser and Interruption actor handle them. The phase follows the cluster
//! until it has recovered — every interrupted instance reclaimed, every displaced pod gone,
//! as many workload pods Running as before, every replacement Ready or the notice over — or
//! the run's deadline, and reports: how many
//! nodes were interrupted, the replacement NodeClaims launched (none when the pods fit on
//! the nodes left) and how many were Ready before the deadline, the displaced pods (bound to an
//! interrupted node at the warning) still on their node when its instance was reclaimed,
//! and the time from the warning until the k-th new pod ran, for k up to the number
//! displaced (so its maximum is the time until the last displaced pod ran again).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::ec2::{CapacityType, InstanceState, SimulatedEc2};
use serde::Serialize;
use serde_json::Value;
use tokio::time::Instant;

use super::figures::{Latency, latency};

/// How often the phase looks at the cluster: the resolution of its timings.
const POLL: Duration = Duration::from_millis(250);

/// Why the fraction is refused.
pub fn parse_fraction(text: &str) -> Result<f64, String> {
    let fraction: f64 = text
        .parse()
        .map_err(|_| format!("{text:?} is not a number between 0 and 1"))?;
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(format!("{text} is not in (0, 1]"));
    }
    Ok(fraction)
}

/// What the interruption phase measured.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Interruptions {
    /// Running spot instances when the warnings went out.
    pub spot_nodes: usize,
    pub interrupted_nodes: usize,
    /// Workload pods bound to an interrupted node at the warning.
    pub displaced_pods: usize,
    /// NodeClaims created after the warning.
    pub replacements_launched: usize,
    /// Of those, Ready before the interrupted instances were reclaimed.
    pub replacements_ready_before_deadline: usize,
    /// Displaced pods still bound to their node when its instance was reclaimed.
    pub pods_lost_node_before_replacement: usize,
    /// From the warning until the k-th new pod ran, k = 1..=displaced.
    pub displaced_to_running_seconds: Latency,
    /// Whether as many workload pods ran again as before, within the run's deadline.
    pub recovered: bool,
}

impl Interruptions {
    pub fn to_table(&self) -> String {
        let l = &self.displaced_to_running_seconds;
        format!(
            "interrupted     {} of {} spot nodes; {} pods displaced\n\
             replacements    {} launched, {} Ready before the 2-minute deadline\n\
             lost node       {} displaced pods still on their node when it was reclaimed\n\
             warning→running p50 {:.2}s  p95 {:.2}s  max (last displaced pod) {:.2}s{}\n",
            self.interrupted_nodes,
            self.spot_nodes,
            self.displaced_pods,
            self.replacements_launched,
            self.replacements_ready_before_deadline,
            self.pods_lost_node_before_replacement,
            l.p50,
            l.p95,
            l.max,
            if self.recovered {
                ""
            } else {
                " (not recovered before --duration)"
            },
        )
    }
}

/// The interrupted nodes: instance id → node name.
pub(super) fn choose(
    ec2: &SimulatedEc2,
    nodes: &[Value],
    fraction: f64,
) -> (usize, BTreeMap<String, String>) {
    let node_of: HashMap<String, String> = nodes
        .iter()
        .filter_map(|n| {
            let id = n["spec"]["providerID"].as_str()?.rsplit('/').next()?;
            Some((id.to_owned(), n["metadata"]["name"].as_str()?.to_owned()))
        })
        .collect();
    let spot: Vec<String> = ec2
        .instances()
        .into_iter()
        .filter(|i| i.state == InstanceState::Running && i.capacity_type == CapacityType::Spot)
        .filter(|i| node_of.contains_key(&i.instance_id))
        .map(|i| i.instance_id)
        .collect();
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "a fraction in (0, 1] of a node count"
    )]
    let count = ((spot.len() as f64) * fraction).ceil() as usize;
    // Instances are listed by id, which EC2 draws at random: the head is a random sample.
    let chosen = spot
        .iter()
        .take(count)
        .filter_map(|id| Some((id.clone(), node_of.get(id)?.clone())))
        .collect();
    (spot.len(), chosen)
}

fn list(cluster: &Cluster, api_version: &str, plural: &str) -> Vec<Value> {
    cluster
        .list(api_version, plural, None, "")
        .unwrap_or_default()
}

fn uid(object: &Value) -> String {
    object["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A workload pod (not a DaemonSet's) bound to a node, not finished or going.
fn is_bound_workload(pod: &Value) -> bool {
    let daemon = pod["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|r| r["kind"] == "DaemonSet"));
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    !daemon
        && !finished
        && pod["spec"]["nodeName"].is_string()
        && !pod["metadata"]["deletionTimestamp"].is_string()
}

/// A workload pod Running on a node.
fn is_running_workload(pod: &Value) -> bool {
    is_bound_workload(pod) && pod["status"]["phase"] == "Running"
}

fn is_ready(claim: &Value) -> bool {
    claim["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// Interrupts `fraction` of the running spot instances and follows the cluster until it has
/// recovered or `deadline`.
pub async fn run(
    cluster: &Cluster,
    ec2: &SimulatedEc2,
    fraction: f64,
    deadline: Instant,
) -> Interruptions {
    // Settled means started too: a pod bound a moment ago is not yet Running, and recovery
    // is judged against the pods Running at the warning.
    while Instant::now() < deadline
        && list(cluster, "v1", "pods")
            .iter()
            .any(|p| is_bound_workload(p) && !is_running_workload(p))
    {
        tokio::time::sleep(POLL).await;
    }
    let (spot_nodes, chosen) = choose(ec2, &list(cluster, "v1", "nodes"), fraction);
    let pods = list(cluster, "v1", "pods");
    let running_before = pods.iter().filter(|p| is_running_workload(p)).count();
    let seen_pods: HashSet<String> = pods.iter().map(uid).collect();
    let seen_claims: HashSet<String> = list(cluster, "karpenter.sh/v1", "nodeclaims")
        .iter()
        .map(uid)
        .collect();
    let node_names: HashSet<&str> = chosen.values().map(String::as_str).collect();
    // Bound, not only Running: a pod bound a moment before the warning (its kubelet has not
    // started it yet) is displaced all the same.
    let displaced: HashSet<String> = pods
        .iter()
        .filter(|p| is_bound_workload(p))
        .filter(|p| {
            p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| node_names.contains(n))
        })
        .map(uid)
        .collect();
    let warned = Instant::now();
    for id in chosen.keys() {
        if let Err(error) = ec2.interrupt_spot(id) {
            eprintln!("kerf simulate: interrupting {id}: {error}");
        }
    }
    let notice = ec2.config().interruption_notice;
    let mut reclaimed: HashSet<String> = HashSet::new();
    let mut lost = 0;
    let mut new_running: HashMap<String, Duration> = HashMap::new();
    let mut ready_claims: HashMap<String, Duration> = HashMap::new();
    let mut launched: HashSet<String> = HashSet::new();
    let recovered = loop {
        let pods = list(cluster, "v1", "pods");
        let elapsed = warned.elapsed();
        for pod in pods.iter().filter(|p| is_running_workload(p)) {
            let id = uid(pod);
            if !seen_pods.contains(&id) {
                new_running.entry(id).or_insert(elapsed);
            }
        }
        for claim in list(cluster, "karpenter.sh/v1", "nodeclaims") {
            let id = uid(&claim);
            if seen_claims.contains(&id) {
                continue;
            }
            launched.insert(id.clone());
            if is_ready(&claim) {
                ready_claims.entry(id).or_insert(elapsed);
            }
        }
        for (instance, node) in &chosen {
            let gone = ec2.instance(instance).is_none_or(|i| !i.state.is_live());
            if gone && reclaimed.insert(instance.clone()) {
                lost += pods
                    .iter()
                    .filter(|p| displaced.contains(&uid(p)))
                    .filter(|p| p["spec"]["nodeName"].as_str() == Some(node))
                    .filter(|p| !p["metadata"]["deletionTimestamp"].is_string())
                    .count();
            }
        }
        let running = pods.iter().filter(|p| is_running_workload(p)).count();
        let displaced_left = pods.iter().filter(|p| displaced.contains(&uid(p))).count();
        // The replacements are followed until Ready or the notice has run out, even when
        // the displaced pods found room on the nodes left sooner.
        let replacements_settled =
            elapsed >= notice || launched.iter().all(|id| ready_claims.contains_key(id));
        if reclaimed.len() == chosen.len()
            && displaced_left == 0
            && running >= running_before
            && replacements_settled
        {
            break true;
        }
        if Instant::now() >= deadline {
            break false;
        }
        tokio::time::sleep(POLL).await;
    };
    let mut times: Vec<Duration> = new_running.into_values().collect();
    times.sort();
    times.truncate(displaced.len());
    Interruptions {
        spot_nodes,
        interrupted_nodes: chosen.len(),
        displaced_pods: displaced.len(),
        replacements_launched: launched.len(),
        replacements_ready_before_deadline: ready_claims.values().filter(|t| **t < notice).count(),
        pods_lost_node_before_replacement: lost,
        displaced_to_running_seconds: latency(times),
        recovered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fraction_is_a_share_of_the_spot_nodes() {
        assert_eq!(parse_fraction("0.2"), Ok(0.2));
        assert_eq!(parse_fraction("1"), Ok(1.0));
        assert!(parse_fraction("0").is_err());
        assert!(parse_fraction("1.5").is_err());
        assert!(
            parse_fraction("a fifth")
                .expect_err("not a number")
                .contains("a fifth")
        );
    }
}
