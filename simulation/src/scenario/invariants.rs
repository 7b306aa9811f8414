//! What a scenario's expectations are judged on, watched every [`TICK`] through the run rather
//! than read at the end, so a spike that is gone by then still counts:
//! - pods: workload pods and how many are bound ([`Tally`]); the pending pods the controller
//!   reported it cannot place (latest event `FailedScheduling`), which nothing waits for
//!   unless a capacity fault may be why ([`CapacityFaults`]); the last moment the cluster went
//!   from some placeable pods pending to none;
//! - nodes and cost: the live instances of the simulated EC2 (paid for, registered or not) and
//!   their summed hourly price, as maxima;
//! - budgets: how often a PodDisruptionBudget that met its minimum fell below it
//!   ([`BudgetWatch`]).
//!
//! Leaks and double launches are read at the end from every instance EC2 ever launched.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kerf::cloudprovider::UNAVAILABLE_OFFERINGS_TTL;
use kerf_actors::events::COMPONENT;
use kerf_actors::events::upstream::{FAILED_SCHEDULING, NOMINATED};
use kerf_loadtest::apiserver::Cluster;
use kerf_loadtest::ec2::{Instance, SimulatedEc2};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::super::budgets::BudgetWatch;
use super::super::observe::{NotServed, Tally};
use super::faults::CapacityFaults;

/// How often the world is looked at: the resolution of every maximum and timing.
pub const TICK: Duration = Duration::from_millis(250);

/// The tag naming the NodeClaim an instance was launched for.
const NODECLAIM_TAG: &str = "karpenter.sh/nodeclaim";

/// What has been measured so far.
#[derive(Debug, Clone, Default)]
pub struct Measures {
    /// Workload pods that exist now.
    pub pods: usize,
    pub bound: usize,
    /// Live instances now, and the most at once.
    pub nodes: usize,
    pub max_nodes: usize,
    pub max_hourly_cost: f64,
    pub pdb_violations: u64,
    /// Pending workload pods (`namespace/name`, sorted) the controller reported it cannot
    /// place.
    pub unplaceable: Vec<String>,
    /// The last time every placeable workload pod became bound after some were pending.
    pub last_all_bound: Option<Instant>,
}

impl Measures {
    pub fn pending(&self) -> usize {
        self.pods - self.bound.min(self.pods)
    }

    /// Pending pods the controller has not given up on: what waits wait for.
    pub fn waiting(&self) -> usize {
        self.pending().saturating_sub(self.unplaceable.len())
    }

    /// `N pods excluded (kerf reported them unschedulable: a, b, …)`, or `None`.
    pub fn excluded(&self) -> Option<String> {
        /// Enough names to find them with kubectl; the count says how many more.
        const NAMED: usize = 3;
        let n = self.unplaceable.len();
        if n == 0 {
            return None;
        }
        let mut names = self.unplaceable[..n.min(NAMED)].join(", ");
        if n > NAMED {
            names.push_str(", …");
        }
        Some(format!(
            "{n} pod{} excluded (kerf reported {} unschedulable: {names})",
            if n == 1 { "" } else { "s" },
            if n == 1 { "it" } else { "them" },
        ))
    }
}

/// The background sampler.
pub struct Observer {
    pub measures: watch::Receiver<Measures>,
    stop: watch::Sender<bool>,
    task: JoinHandle<Measures>,
}

impl Observer {
    /// Starts watching; the pods already in the emulator count from their creation.
    pub fn start(
        cluster: Cluster,
        ec2: SimulatedEc2,
        capacity: CapacityFaults,
    ) -> Result<Self, NotServed> {
        let mut tally = Tally::new(&cluster)?;
        let (publish, measures) = watch::channel(Measures::default());
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let mut m = Measures::default();
            let mut budgets = BudgetWatch::default();
            loop {
                tally.update(std::time::Instant::now());
                sample(&mut m, &tally, &ec2, &cluster, &capacity, &mut budgets);
                publish.send_replace(m.clone());
                tokio::select! {
                    _ = stopped.changed() => break,
                    () = tokio::time::sleep(TICK) => {}
                }
            }
            m
        });
        Ok(Self {
            measures,
            stop,
            task,
        })
    }

    pub fn now(&self) -> Measures {
        self.measures.borrow().clone()
    }

    /// Takes a last sample and returns everything measured.
    pub async fn finish(self) -> Measures {
        self.stop.send_replace(true);
        let fallback = self.measures.borrow().clone();
        self.task.await.unwrap_or(fallback)
    }
}

fn sample(
    m: &mut Measures,
    tally: &Tally,
    ec2: &SimulatedEc2,
    cluster: &Cluster,
    capacity: &CapacityFaults,
    budgets: &mut BudgetWatch,
) {
    let counts = tally.counts();
    let was_waiting = m.waiting() > 0;
    m.pods = counts.pods;
    m.bound = counts.bound;
    m.unplaceable = if m.pending() == 0 || capacity.recent(UNAVAILABLE_OFFERINGS_TTL) {
        Vec::new()
    } else {
        unplaceable(cluster, &tally.pending())
    };
    if was_waiting && m.waiting() == 0 {
        m.last_all_bound = Some(Instant::now());
    }
    let instances = ec2.instances();
    let live = instances.iter().filter(|i| i.state.is_live());
    m.nodes = live.clone().count();
    m.max_nodes = m.max_nodes.max(m.nodes);
    let cost: f64 = live.map(|i| i.price).sum();
    m.max_hourly_cost = m.max_hourly_cost.max(cost);
    m.pdb_violations += budgets.observe(cluster);
}

/// Those of the `pending` pods (`namespace/name`, sorted) whose latest event from the
/// controller is `FailedScheduling`. Events are ordered by resourceVersion (a repeated
/// event is the same object counted up, so its version moves with its last occurrence).
fn unplaceable(cluster: &Cluster, pending: &[String]) -> Vec<String> {
    let Ok(events) = cluster.list("v1", "events", None, "") else {
        return Vec::new();
    };
    let mut latest: HashMap<String, (u64, bool)> = HashMap::new();
    for event in &events {
        let reason = event["reason"].as_str().unwrap_or_default();
        let about = &event["involvedObject"];
        if event["source"]["component"] != COMPONENT
            || about["kind"] != "Pod"
            || ![FAILED_SCHEDULING, NOMINATED].contains(&reason)
        {
            continue;
        }
        let key = format!(
            "{}/{}",
            about["namespace"].as_str().unwrap_or_default(),
            about["name"].as_str().unwrap_or_default()
        );
        let version = event["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let entry = latest.entry(key).or_insert((0, false));
        if version >= entry.0 {
            *entry = (version, reason == FAILED_SCHEDULING);
        }
    }
    pending
        .iter()
        .filter(|key| latest.get(*key).is_some_and(|&(_, failed)| failed))
        .cloned()
        .collect()
}

/// NodeClaims that ever had more than one instance launched for them.
pub fn double_launches(instances: &[Instance]) -> Vec<String> {
    let mut per_claim: BTreeMap<&str, usize> = BTreeMap::new();
    for instance in instances {
        if let Some(claim) = instance.tags.get(NODECLAIM_TAG) {
            *per_claim.entry(claim).or_default() += 1;
        }
    }
    per_claim
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(claim, _)| claim.to_owned())
        .collect()
}

/// Live instances no NodeClaim accounts for: neither by its providerID nor by the name in
/// the instance's tag (a NodeClaim whose launch is not recorded yet still owns it).
/// The Nodes not being deleted, counted by their `karpenter.sh/nodepool` label.
pub fn pool_nodes(cluster: &Cluster) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    let nodes = cluster.list("v1", "nodes", None, "").unwrap_or_default();
    for node in nodes
        .iter()
        .filter(|n| n["metadata"]["deletionTimestamp"].is_null())
    {
        if let Some(pool) = node["metadata"]["labels"][kerf::labels::NODEPOOL].as_str() {
            *counts.entry(pool.to_owned()).or_default() += 1;
        }
    }
    counts
}

pub fn leaked_instances(instances: &[Instance], cluster: &Cluster) -> Vec<String> {
    let claims = cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .unwrap_or_default();
    let names: Vec<&str> = claims
        .iter()
        .filter_map(|c| c["metadata"]["name"].as_str())
        .collect();
    let provider_ids: Vec<&str> = claims
        .iter()
        .filter_map(|c| c["status"]["providerID"].as_str())
        .collect();
    instances
        .iter()
        .filter(|i| i.state.is_live())
        .filter(|i| {
            let tagged = i
                .tags
                .get(NODECLAIM_TAG)
                .is_some_and(|n| names.contains(&n.as_str()));
            !tagged && !provider_ids.contains(&i.provider_id().as_str())
        })
        .map(|i| i.instance_id.clone())
        .collect()
}
