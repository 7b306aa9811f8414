//! Fixture builders for disruption tests and the benchmark: a cluster from defaults plus
//! overrides (`cluster().pool(node_pool("a").when_empty()).node(node("n1").pods(3))`), in
//! the style of upstream's `test.NodePool(...)`. Defaults: one NodePool `default` with four
//! instance types (2, 4, 8 and 16 vCPU, spot and on-demand in three zones), nodes created a
//! day before [`NOW`] with their last pod event an hour before it, initialized and Ready.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use k8s_openapi::jiff::Timestamp;

use super::cluster::{Cluster, ManagedNode, Options};
use super::pods::Pdb;
use crate::api::duration::NillableDuration;
use crate::api::{Budget, ConsolidationPolicy, NodePool, NodeSelectorRequirementWithMinValues};
use crate::catalog::InstanceType;
use crate::feature_gates::FeatureGates;
use crate::labels;
use crate::scheduling::testing as st;
use crate::scheduling::{ExistingNode, NodePoolInput, SchedulingOptions};

/// The fixed "now" of every fixture, as seconds since the epoch (2026-01-01T00:00:00Z).
pub const NOW: i64 = 1_767_225_600;

pub fn now() -> Timestamp {
    Timestamp::from_second(NOW).expect("fixture time is in range")
}

pub fn ago(seconds: i64) -> Timestamp {
    Timestamp::from_second(NOW - seconds).expect("fixture time is in range")
}

/// Options at [`NOW`] with upstream's default gates.
pub fn options() -> Options {
    Options {
        now: now(),
        feature_gates: FeatureGates::default(),
    }
}

thread_local! {
    static STARTED: std::time::Instant = std::time::Instant::now();
    static TICKS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// A clock for [`super::Timeouts`] that moves 25 s each time it is read (per thread, so each
/// test has its own): a search's deadline passes after a known number of looks.
pub fn ticking() -> std::time::Instant {
    let tick = TICKS.with(|t| {
        t.set(t.get() + 1);
        t.get()
    });
    STARTED.with(|s| *s + Duration::from_secs(25) * tick)
}

/// `small` (2 vCPU), `medium` (4), `large` (8), `xlarge` (16): 2 GiB per vCPU, 10 pods per
/// vCPU, priced by size; spot at 70% of on-demand.
pub fn instance_types() -> Vec<InstanceType> {
    [("small", 2), ("medium", 4), ("large", 8), ("xlarge", 16)]
        .into_iter()
        .map(|(name, cpu)| st::instance_type(name, cpu, cpu * 2, cpu * 10))
        .collect()
}

/// A NodePool from defaults (upstream's CRD defaults) plus overrides.
#[derive(Clone, Debug)]
pub struct PoolBuilder {
    pool: NodePool,
    instance_types: Vec<InstanceType>,
    node_limit: Option<i64>,
}

pub fn node_pool(name: &str) -> PoolBuilder {
    let pool: NodePool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "requirements": [],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }}}
    }))
    .expect("fixture NodePool is valid");
    PoolBuilder {
        pool,
        instance_types: instance_types(),
        node_limit: None,
    }
}

impl PoolBuilder {
    pub fn policy(mut self, policy: ConsolidationPolicy) -> Self {
        self.pool.spec.disruption.consolidation_policy = policy;
        self
    }

    /// `consolidateAfter` as written (`"30s"`, `"Never"`).
    pub fn consolidate_after(mut self, text: &str) -> Self {
        self.pool.spec.disruption.consolidate_after =
            NillableDuration::parse(text).expect("fixture duration is valid");
        self
    }

    pub fn budgets(mut self, budgets: serde_json::Value) -> Self {
        self.pool.spec.disruption.budgets =
            serde_json::from_value::<Vec<Budget>>(budgets).expect("fixture budgets are valid");
        self
    }

    pub fn expire_after(mut self, text: &str) -> Self {
        self.pool.spec.template.spec.expire_after =
            NillableDuration::parse(text).expect("fixture duration is valid");
        self
    }

    pub fn requirement(mut self, r: NodeSelectorRequirementWithMinValues) -> Self {
        self.pool.spec.template.spec.requirements.push(r);
        self
    }

    pub fn hash(mut self, hash: &str) -> Self {
        let annotations = self
            .pool
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new);
        annotations.insert(labels::NODEPOOL_HASH.into(), hash.into());
        annotations.insert(labels::NODEPOOL_HASH_VERSION.into(), "v3".into());
        self
    }

    pub fn instance_types(mut self, types: Vec<InstanceType>) -> Self {
        self.instance_types = types;
        self
    }

    /// A static pool of `replicas` nodes.
    pub fn replicas(mut self, replicas: i64) -> Self {
        self.pool.spec.replicas = Some(replicas);
        self
    }

    /// `limits.nodes`.
    pub fn node_limit(mut self, nodes: i64) -> Self {
        self.pool
            .spec
            .limits
            .get_or_insert_with(BTreeMap::new)
            .insert(
                crate::api::nodepool::NODES_LIMIT.into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(nodes.to_string()),
            );
        self.node_limit = Some(nodes);
        self
    }
}

/// A managed node from defaults plus overrides.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: ExistingNode,
    managed: ManagedNode,
    /// Kept in the scheduling input with its pods though deleting (see [`NodeBuilder::held`]).
    held: bool,
}

/// Node `special`, labelled `special=yes`, holding pod `default/picky`, which selects that
/// label: no other node can take the pod, so the node cannot be consolidated away.
pub fn special_node(size: &str) -> NodeBuilder {
    let picky = st::pod("picky")
        .cpu("100m")
        .node_selector(&[("special", "yes")])
        .build();
    node("special")
        .size(size)
        .label("special", "yes")
        .pod(picky)
}

/// A node of pool `default`, type `medium`, on-demand in the first fixture zone, no pods.
pub fn node(name: &str) -> NodeBuilder {
    let labels: BTreeMap<String, String> = [
        (labels::NODEPOOL, "default"),
        (labels::INSTANCE_TYPE, "medium"),
        (labels::ZONE, st::ZONES[0]),
        (labels::CAPACITY_TYPE, labels::CAPACITY_TYPE_ON_DEMAND),
        (labels::HOSTNAME, name),
        (labels::INITIALIZED, "true"),
        (labels::ARCH, "amd64"),
        (labels::OS, "linux"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let mut builder = NodeBuilder {
        node: ExistingNode {
            name: name.into(),
            labels: labels.into(),
            initialized: true,
            node_pool: Some("default".into()),
            node_claim: Some(format!("{name}-claim")),
            ..Default::default()
        },
        managed: ManagedNode {
            name: name.into(),
            node_claim: format!("{name}-claim"),
            node_pool: "default".into(),
            created: Some(ago(86_400)),
            last_pod_event: Some(ago(3_600)),
            initialized: true,
            ready: true,
            expire_after: Some(Duration::from_secs(720 * 3600)),
            ..Default::default()
        },
        held: false,
    };
    builder = builder.size("medium");
    builder
}

impl NodeBuilder {
    /// Instance type (one of [`instance_types`]); sets allocatable and capacity.
    pub fn size(mut self, name: &str) -> Self {
        let it = instance_types()
            .into_iter()
            .find(|it| it.name == name)
            .expect("fixture instance type exists");
        self.node.allocatable = it.allocatable();
        self.node.capacity = it.capacity.clone();
        self.node
            .labels
            .insert(labels::INSTANCE_TYPE.into(), name.into());
        self
    }

    pub fn pool(mut self, pool: &str) -> Self {
        self.node
            .labels
            .insert(labels::NODEPOOL.into(), pool.into());
        self.node.node_pool = Some(pool.into());
        self.managed.node_pool = pool.into();
        self
    }

    pub fn zone(mut self, zone: &str) -> Self {
        self.node.labels.insert(labels::ZONE.into(), zone.into());
        self
    }

    pub fn spot(mut self) -> Self {
        self.node.labels.insert(
            labels::CAPACITY_TYPE.into(),
            labels::CAPACITY_TYPE_SPOT.into(),
        );
        self
    }

    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.node.labels.insert(key.into(), value.into());
        self
    }

    /// `n` pods of 100m CPU and 128Mi each, labelled `app: <node>`.
    pub fn pods(self, n: usize) -> Self {
        let name = self.node.name.clone();
        self.pods_of(n, |i| {
            st::pod(&format!("{name}-p{i}"))
                .cpu("100m")
                .memory("128Mi")
                .labels(&[("app", &name)])
                .build()
        })
    }

    /// `n` pods made by `make(i)`; they are bound to the node.
    pub fn pods_of(mut self, n: usize, make: impl Fn(usize) -> Pod) -> Self {
        for i in 0..n {
            self = self.pod(make(i));
        }
        self
    }

    pub fn pod(mut self, mut pod: Pod) -> Self {
        pod.spec.get_or_insert_with(Default::default).node_name = Some(self.node.name.clone());
        self.node.pods.push(Arc::new(pod.into()));
        self
    }

    pub fn created(mut self, t: Timestamp) -> Self {
        self.managed.created = Some(t);
        self
    }

    pub fn last_pod_event(mut self, t: Timestamp) -> Self {
        self.managed.last_pod_event = Some(t);
        self
    }

    pub fn uninitialized(mut self) -> Self {
        self.managed.initialized = false;
        self.node.initialized = false;
        self.node.labels.remove(labels::INITIALIZED);
        self
    }

    pub fn not_ready(mut self) -> Self {
        self.managed.ready = false;
        self
    }

    pub fn deleting(mut self) -> Self {
        self.managed.deleting = true;
        self
    }

    /// Held by a command in flight whose taint the store does not show yet: on its way out
    /// for the decision, but still in the scheduling input with its pods bound (a deleting
    /// node is otherwise left out of it and its pods are pending, as the controller's
    /// inventory has them).
    pub fn held(mut self) -> Self {
        self.managed.deleting = true;
        self.held = true;
        self
    }

    /// Planned onto by a recent provisioning round.
    pub fn nominated(mut self) -> Self {
        self.managed.nominated = true;
        self
    }

    pub fn do_not_disrupt(mut self) -> Self {
        self.managed.do_not_disrupt = true;
        self
    }

    pub fn drifted(mut self, reason: &str, since: Timestamp) -> Self {
        self.managed.drifted = Some((reason.into(), Some(since)));
        self
    }

    pub fn hash(mut self, hash: &str) -> Self {
        self.managed.nodepool_hash = Some((hash.into(), "v3".into()));
        self
    }

    pub fn expire_after(mut self, d: Option<Duration>) -> Self {
        self.managed.expire_after = d;
        self
    }

    pub fn termination_grace_period(mut self, d: Duration) -> Self {
        self.managed.termination_grace_period = Some(d);
        self
    }
}

/// A cluster from defaults plus overrides.
#[derive(Clone, Debug)]
pub struct ClusterBuilder {
    pools: Vec<PoolBuilder>,
    nodes: Vec<NodeBuilder>,
    pending: Vec<Pod>,
    pdbs: Vec<Pdb>,
}

/// A cluster with the `default` NodePool and nothing else.
pub fn cluster() -> ClusterBuilder {
    ClusterBuilder {
        pools: vec![node_pool("default")],
        nodes: Vec::new(),
        pending: Vec::new(),
        pdbs: Vec::new(),
    }
}

impl ClusterBuilder {
    /// Adds a NodePool, replacing one of the same name.
    pub fn pool(mut self, pool: PoolBuilder) -> Self {
        self.pools.retain(|p| p.pool.name() != pool.pool.name());
        self.pools.push(pool);
        self
    }

    pub fn node(mut self, node: NodeBuilder) -> Self {
        self.nodes.push(node);
        self
    }

    pub fn pending(mut self, pod: Pod) -> Self {
        self.pending.push(pod);
        self
    }

    /// A PDB in `default` selecting `app: <app>` that allows `allowed` disruptions.
    pub fn pdb(mut self, name: &str, app: &str, allowed: i32) -> Self {
        self.pdbs.push(Pdb {
            key: format!("default/{name}"),
            namespace: "default".into(),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), app.to_string())])),
                match_expressions: None,
            },
            disruptions_allowed: allowed,
        });
        self
    }

    pub fn build(self) -> Cluster {
        let node_pools: Vec<NodePoolInput> = self
            .pools
            .iter()
            .map(|p| NodePoolInput {
                name: p.pool.name().into(),
                requirements: p.pool.requirements().to_vec(),
                instance_types: p.instance_types.clone().into(),
                limits: p.node_limit.map(|n| {
                    crate::resources::Resources::new().with(
                        crate::api::nodepool::NODES_LIMIT,
                        crate::resources::Quantity::new(n, crate::resources::Format::DecimalSI),
                    )
                }),
                ..Default::default()
            })
            .collect();
        let mut cluster = Cluster {
            node_pools: self.pools.into_iter().map(|p| p.pool).collect(),
            pdbs: self.pdbs,
            ..Default::default()
        };
        cluster.scheduling.node_pools = node_pools;
        cluster.scheduling.pods = self
            .pending
            .into_iter()
            .map(|p| Arc::new(p.into()))
            .collect();
        cluster.scheduling.options = SchedulingOptions {
            parallel: false,
            ..Default::default()
        };
        for n in self.nodes {
            if !n.managed.deleting || n.held {
                cluster.scheduling.existing_nodes.push(n.node);
            }
            cluster.nodes.push(n.managed);
        }
        cluster
    }
}

/// A pod with `karpenter.sh/do-not-disrupt: value`.
pub fn annotated(mut pod: Pod, key: &str, value: &str) -> Pod {
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(key.into(), value.into());
    pod
}

/// Sets a pod's start time.
pub fn started(mut pod: Pod, t: Timestamp) -> Pod {
    pod.status.get_or_insert_with(Default::default).start_time = Some(Time(t));
    pod
}

/// The instance type every benchmark node runs: 16 vCPU, 64 GiB of the 400 benchmark types.
pub const BENCHMARK_NODE_TYPE: &str = "m0.16x";

/// The labels of a [`BENCHMARK_NODE_TYPE`] node in `zone` besides those [`node`] sets, as a
/// node kerf launched carries them (its instance type's, its region and zone id, registered)
/// and its kubelet adds (the deprecated aliases): a real node has two dozen and more, which
/// each simulation of a pass reads.
pub fn launched_node_labels(zone: &str) -> Vec<(&'static str, String)> {
    let zone_id = format!("use1-az{}", zone.chars().last().map_or(0, |c| c as u32 % 8));
    vec![
        (labels::INSTANCE_TYPE, BENCHMARK_NODE_TYPE.into()),
        (labels::INSTANCE_CATEGORY, "m".into()),
        (labels::INSTANCE_FAMILY, "m0".into()),
        (labels::INSTANCE_GENERATION, "0".into()),
        (labels::INSTANCE_SIZE, "16x".into()),
        (labels::INSTANCE_CPU, "16".into()),
        (labels::INSTANCE_CPU_MANUFACTURER, "amd".into()),
        (labels::INSTANCE_MEMORY, "65536".into()),
        (labels::INSTANCE_EBS_BANDWIDTH, "10000".into()),
        (labels::INSTANCE_NETWORK_BANDWIDTH, "12500".into()),
        (labels::INSTANCE_HYPERVISOR, "nitro".into()),
        (
            labels::INSTANCE_ENCRYPTION_IN_TRANSIT_SUPPORTED,
            "true".into(),
        ),
        (labels::EC2NODECLASS, "default".into()),
        (labels::REGISTERED, "true".into()),
        (labels::REGION, "us-east-1".into()),
        (labels::ZONE_ID, zone_id),
        ("beta.kubernetes.io/arch", "amd64".into()),
        ("beta.kubernetes.io/os", "linux".into()),
        (
            "beta.kubernetes.io/instance-type",
            BENCHMARK_NODE_TYPE.into(),
        ),
        ("failure-domain.beta.kubernetes.io/zone", zone.into()),
        (
            "failure-domain.beta.kubernetes.io/region",
            "us-east-1".into(),
        ),
    ]
}

/// The consolidation benchmark's cluster: `nodes` under-used on-demand nodes of
/// [`BENCHMARK_NODE_TYPE`] across three zones, 30 pods each (about a third of each node's
/// CPU), in 20-replica apps whose replicas sit on different nodes: most apps plain, one in
/// ten spread across zones, one in ten with hostname anti-affinity, one in ten guarded by a
/// PDB allowing one disruption, and one pod in 3,000 pinned with `karpenter.sh/do-not-disrupt`.
/// One NodePool with the 400 benchmark instance types and the default 10% budget. Each node
/// carries the labels a node kerf launched does ([`launched_node_labels`]).
pub fn benchmark_cluster(nodes: usize, seed: u64) -> Cluster {
    const PODS_PER_NODE: usize = 30;
    const REPLICAS: usize = 20;
    let mut rng = st::Rng::new(seed);
    let types = st::benchmark_instance_types();
    let node_type = types
        .iter()
        .find(|it| it.name == BENCHMARK_NODE_TYPE)
        .expect("benchmark node type exists")
        .clone();
    let mut builder = cluster().pool(node_pool("default").instance_types(types));
    let node_builders: Vec<NodeBuilder> = (0..nodes)
        .map(|n| {
            let zone = st::ZONES[n % st::ZONES.len()];
            let mut b = node(&format!("node-{n:05}")).zone(zone);
            for (key, value) in launched_node_labels(zone) {
                b = b.label(key, &value);
            }
            b.node.allocatable = node_type.allocatable();
            b.node.capacity = node_type.capacity.clone();
            b
        })
        .collect();
    let mut pods: Vec<Vec<Pod>> = vec![Vec::new(); nodes];
    for k in 0..nodes * PODS_PER_NODE {
        let app = format!("app-{:05}", k / REPLICAS);
        let kind = (k / REPLICAS) % 10;
        let cpu = *rng.pick(&[100, 150, 200, 250]);
        let memory = *rng.pick(&[128, 256, 512]);
        let mut pod = st::pod(&format!("pod-{k:06}"))
            .cpu(&format!("{cpu}m"))
            .memory(&format!("{memory}Mi"))
            .labels(&[("app", &app)]);
        pod = match kind {
            6 => pod.spread(labels::ZONE, 1, "DoNotSchedule", &[("app", &app)]),
            7 => pod.anti_affinity_to(labels::HOSTNAME, &[("app", &app)]),
            _ => pod,
        };
        let mut pod = pod.build();
        if k % 3000 == 1500 {
            pod = annotated(pod, labels::DO_NOT_DISRUPT, "true");
        }
        if kind == 8 && k % REPLICAS == 0 {
            builder = builder.pdb(&format!("{app}-pdb"), &app, 1);
        }
        pods[k % nodes].push(pod);
    }
    let mut node_builders = node_builders;
    for (node, pods) in node_builders.iter_mut().zip(pods) {
        for mut pod in pods {
            pod.spec.get_or_insert_with(Default::default).node_name = Some(node.node.name.clone());
            node.node.pods.push(Arc::new(pod.into()));
        }
    }
    node_builders
        .into_iter()
        .fold(builder, ClusterBuilder::node)
        .build()
}
