//! Fixture builders for the scheduler's tests and benchmark: pods, instance types and
//! NodePools from sensible defaults plus overrides, and the synthetic workloads of upstream's
//! scheduling benchmark (400 instance types shaped like its fake provider; the diverse and
//! the preference pod mixes), generated deterministically from a seed.

use crate::pods::LeanPod;
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, Container, ContainerPort, NodeAffinity, NodeSelector,
    NodeSelectorRequirement as K8sReq, NodeSelectorTerm, PersistentVolumeClaimVolumeSource, Pod,
    PodAffinity, PodAffinityTerm, PodAntiAffinity, PodSpec, PreferredSchedulingTerm,
    ResourceRequirements, Taint, Toleration, TopologySpreadConstraint, Volume,
    WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, Time};

use super::types::{
    CapacityType, InstanceType, NodePoolInput, NodeSelectorRequirementWithMinValues, Offering,
    Operator, Resources,
};
use crate::catalog::Overhead;
use crate::labels;
use crate::resources::Quantity as Q;

/// Pods as a [`super::SchedulingInput`] holds them: lean, equal specs shared.
pub fn shared(pods: Vec<Pod>) -> Vec<Arc<LeanPod>> {
    let mut interner = crate::pods::PodInterner::default();
    pods.into_iter()
        .map(|pod| Arc::new(LeanPod::new(pod, &mut interner)))
        .collect()
}

/// The three zones fixtures use.
pub const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

fn labels_of(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(labels_of(pairs)),
        match_expressions: None,
    }
}

/// Builds a pod from defaults (namespace `default`, 1 container, no requests) plus overrides.
#[derive(Clone, Debug)]
pub struct PodBuilder {
    pod: Pod,
}

/// Starts a pod named `name` (its UID is the name too, for stable ordering).
pub fn pod(name: &str) -> PodBuilder {
    PodBuilder {
        pod: Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                uid: Some(name.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "app".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: None,
        },
    }
}

impl PodBuilder {
    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    fn affinity(&mut self) -> &mut Affinity {
        self.spec().affinity.get_or_insert_with(Default::default)
    }

    fn request(mut self, resource: &str, q: &str) -> Self {
        let c = &mut self.spec().containers[0];
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.into(), Quantity(q.into()));
        self
    }

    pub fn cpu(self, q: &str) -> Self {
        self.request("cpu", q)
    }

    pub fn memory(self, q: &str) -> Self {
        self.request("memory", q)
    }

    pub fn resource(self, name: &str, q: &str) -> Self {
        self.request(name, q)
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }

    pub fn labels(mut self, pairs: &[(&str, &str)]) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .extend(labels_of(pairs));
        self
    }

    /// Seconds after the epoch, for queue ordering.
    pub fn created(mut self, seconds: i64) -> Self {
        let ts = k8s_openapi::jiff::Timestamp::from_second(seconds)
            .expect("fixture timestamps are in range");
        self.pod.metadata.creation_timestamp = Some(Time(ts));
        self
    }

    pub fn node_selector(mut self, pairs: &[(&str, &str)]) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .extend(labels_of(pairs));
        self
    }

    /// Adds a required node-affinity term (terms are ORed).
    pub fn required_term(mut self, exprs: &[(&str, &str, &[&str])]) -> Self {
        let term = node_term(exprs);
        let node = self
            .affinity()
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        node.required_during_scheduling_ignored_during_execution
            .get_or_insert_with(|| NodeSelector {
                node_selector_terms: Vec::new(),
            })
            .node_selector_terms
            .push(term);
        self
    }

    pub fn preferred_term(mut self, weight: i32, exprs: &[(&str, &str, &[&str])]) -> Self {
        let preference = node_term(exprs);
        let node = self
            .affinity()
            .node_affinity
            .get_or_insert_with(NodeAffinity::default);
        node.preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(PreferredSchedulingTerm { weight, preference });
        self
    }

    pub fn toleration(
        mut self,
        key: Option<&str>,
        op: &str,
        value: Option<&str>,
        effect: Option<&str>,
    ) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Vec::new)
            .push(Toleration {
                key: key.map(Into::into),
                operator: Some(op.into()),
                value: value.map(Into::into),
                effect: effect.map(Into::into),
                toleration_seconds: None,
            });
        self
    }

    /// Adds a topology spread constraint selecting `select`.
    pub fn spread(self, key: &str, max_skew: i32, when: &str, select: &[(&str, &str)]) -> Self {
        self.spread_with(TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew,
            when_unsatisfiable: when.into(),
            label_selector: Some(selector(select)),
            ..Default::default()
        })
    }

    pub fn spread_with(mut self, tsc: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(tsc);
        self
    }

    pub fn affinity_to(mut self, key: &str, select: &[(&str, &str)]) -> Self {
        let term = pod_term(key, select);
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    pub fn preferred_affinity_to(
        mut self,
        weight: i32,
        key: &str,
        select: &[(&str, &str)],
    ) -> Self {
        let term = WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: pod_term(key, select),
        };
        self.affinity()
            .pod_affinity
            .get_or_insert_with(PodAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    pub fn anti_affinity_to(mut self, key: &str, select: &[(&str, &str)]) -> Self {
        let term = pod_term(key, select);
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    pub fn preferred_anti_affinity_to(
        mut self,
        weight: i32,
        key: &str,
        select: &[(&str, &str)],
    ) -> Self {
        let term = WeightedPodAffinityTerm {
            weight,
            pod_affinity_term: pod_term(key, select),
        };
        self.affinity()
            .pod_anti_affinity
            .get_or_insert_with(PodAntiAffinity::default)
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(term);
        self
    }

    pub fn host_port(mut self, port: i32) -> Self {
        self.spec().containers[0]
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                ..Default::default()
            });
        self
    }

    pub fn pvc(mut self, claim: &str) -> Self {
        self.spec()
            .volumes
            .get_or_insert_with(Vec::new)
            .push(Volume {
                name: claim.into(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.into(),
                    read_only: None,
                }),
                ..Default::default()
            });
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    /// The pod as a [`super::SchedulingInput`] holds it.
    pub fn lean(self) -> Arc<LeanPod> {
        Arc::new(self.pod.into())
    }

    /// `n` copies named `<prefix>-<i>`.
    pub fn replicas(self, prefix: &str, n: usize) -> Vec<Pod> {
        (0..n)
            .map(|i| {
                let mut p = self.pod.clone();
                let name = format!("{prefix}-{i:05}");
                p.metadata.uid = Some(name.clone());
                p.metadata.name = Some(name);
                p
            })
            .collect()
    }
}

fn node_term(exprs: &[(&str, &str, &[&str])]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(
            exprs
                .iter()
                .map(|(k, op, values)| K8sReq {
                    key: k.to_string(),
                    operator: op.to_string(),
                    values: Some(values.iter().map(|v| v.to_string()).collect()),
                })
                .collect(),
        ),
        match_fields: None,
    }
}

fn pod_term(key: &str, select: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: key.into(),
        label_selector: Some(selector(select)),
        ..Default::default()
    }
}

/// A taint.
pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        value: value.map(Into::into),
        effect: effect.into(),
        time_added: None,
    }
}

/// A requirement for NodePool templates.
pub fn requirement(
    key: &str,
    op: Operator,
    values: &[&str],
) -> NodeSelectorRequirementWithMinValues {
    NodeSelectorRequirementWithMinValues {
        key: key.into(),
        operator: op,
        values: values.iter().map(|v| v.to_string()).collect(),
        min_values: None,
    }
}

/// A resource list from `(name, quantity)` pairs; panics on a malformed fixture quantity.
pub fn resources(pairs: &[(&str, &str)]) -> Resources {
    let mut out = Resources::new();
    for (name, q) in pairs {
        out.insert(name, Q::parse(q).expect("fixture quantities are valid"));
    }
    out
}

/// Upstream's fake price: 0.1 per vCPU plus 0.1 per GB of memory.
pub fn price_of(cpu: f64, mem_gib: f64) -> f64 {
    0.1 * cpu + 0.1 * mem_gib * (1u64 << 30) as f64 / 1e9
}

/// An instance type with `cpu` vCPUs, `mem_gib` GiB and `pods` pods, amd64/linux, offered
/// spot and on-demand in every fixture zone (spot at 70% of the on-demand price).
pub fn instance_type(name: &str, cpu: u32, mem_gib: u32, pods: u32) -> InstanceType {
    let price = price_of(f64::from(cpu), f64::from(mem_gib));
    let mut offerings = Vec::new();
    for (i, zone) in ZONES.iter().enumerate() {
        let zone_id = format!("tz{}", i + 1);
        offerings.push(Offering {
            zone: zone.to_string(),
            zone_id: zone_id.clone(),
            capacity_type: CapacityType::Spot,
            price: price * 0.7,
            available: true,
            reservation: None,
        });
        offerings.push(Offering {
            zone: zone.to_string(),
            zone_id,
            capacity_type: CapacityType::OnDemand,
            price,
            available: true,
            reservation: None,
        });
    }
    InstanceType {
        name: name.into(),
        labels: labels_of(&[
            (labels::ARCH, "amd64"),
            (labels::OS, "linux"),
            (labels::INSTANCE_CPU, &cpu.to_string()),
            (
                labels::INSTANCE_MEMORY,
                &(u64::from(mem_gib) * 1024).to_string(),
            ),
        ]),
        capacity: resources(&[
            ("cpu", &cpu.to_string()),
            ("memory", &format!("{mem_gib}Gi")),
            ("pods", &pods.to_string()),
        ]),
        overhead: Overhead {
            kube_reserved: resources(&[("cpu", "100m"), ("memory", "10Mi")]),
            ..Overhead::default()
        },
        offerings,
    }
}

/// Upstream's `fake.InstanceTypes(n)`: i+1 vCPU, 2(i+1) GiB, 10(i+1) pods.
pub fn fake_instance_types(n: u32) -> Vec<InstanceType> {
    (0..n)
        .map(|i| instance_type(&format!("fake-it-{i}"), i + 1, (i + 1) * 2, (i + 1) * 10))
        .collect()
}

/// A NodePool named `name` with the given instance types and no constraints.
pub fn node_pool(name: &str, instance_types: Vec<InstanceType>) -> NodePoolInput {
    NodePoolInput {
        name: name.into(),
        instance_types: instance_types.into(),
        ..Default::default()
    }
}

/// A small deterministic generator (SplitMix64), so workloads need no RNG dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

/// 400 instance types shaped like upstream's fake provider: families with 2, 4 and 8 GiB per
/// vCPU, sizes from 1 to 192 vCPUs, amd64 and arm64, spot and on-demand in three zones,
/// priced by resources.
pub fn benchmark_instance_types() -> Vec<InstanceType> {
    let sizes: [u32; 14] = [1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192];
    let mut out = Vec::new();
    let mut generation = 0;
    while out.len() < 400 {
        for (family, ratio) in [("c", 2u32), ("m", 4), ("r", 8)] {
            for arch in ["amd64", "arm64"] {
                for cpu in sizes {
                    if out.len() == 400 {
                        return out;
                    }
                    let name = format!(
                        "{family}{generation}{}.{cpu}x",
                        if arch == "arm64" { "g" } else { "" }
                    );
                    let mut it = instance_type(&name, cpu, cpu * ratio, (cpu * 16).clamp(8, 737));
                    it.labels.insert(labels::ARCH.into(), arch.into());
                    it.labels.insert(
                        labels::INSTANCE_FAMILY.into(),
                        format!("{family}{generation}"),
                    );
                    // Later generations are a little cheaper, as on EC2.
                    let discount = 1.0 - f64::from(generation) * 0.01;
                    for o in &mut it.offerings {
                        o.price *= discount;
                    }
                    out.push(it);
                }
            }
        }
        generation += 1;
    }
    out
}

const LABEL_VALUES: [&str; 7] = ["a", "b", "c", "d", "e", "f", "g"];

fn random_requests(b: PodBuilder, rng: &mut Rng) -> PodBuilder {
    let cpu = rng.pick(&[100, 250, 500, 1000, 1500]);
    let mem = rng.pick(&[100, 256, 512, 1024, 2048, 4096]);
    b.cpu(&format!("{cpu}m")).memory(&format!("{mem}Mi"))
}

/// Upstream's diverse benchmark mix: one fifth each generic, zonal spread, hostname spread,
/// zonal self-affinity and hostname anti-affinity pods, with random requests and labels.
pub fn diverse_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    let fifth = count / 5;
    let mut pods = Vec::with_capacity(count);
    let mut n = 0;
    let mut next = |rng: &mut Rng, kind: usize| {
        n += 1;
        let name = format!("pod-{n:06}");
        let label = *rng.pick(&LABEL_VALUES);
        let b = pod(&name).created(0);
        let b = match kind {
            1 | 2 => {
                let sel = *rng.pick(&LABEL_VALUES);
                let key = if kind == 1 {
                    labels::ZONE
                } else {
                    labels::HOSTNAME
                };
                b.labels(&[("my-label", label)]).spread(
                    key,
                    1,
                    "DoNotSchedule",
                    &[("my-label", sel)],
                )
            }
            3 => b
                .labels(&[("my-affinity", label)])
                .affinity_to(labels::ZONE, &[("my-affinity", label)]),
            4 => b
                .labels(&[("app", "nginx")])
                .anti_affinity_to(labels::HOSTNAME, &[("app", "nginx")]),
            _ => b.labels(&[("my-label", label)]),
        };
        random_requests(b, rng).build()
    };
    for kind in [0, 1, 2, 3, 4] {
        for _ in 0..fifth {
            pods.push(next(&mut rng, kind));
        }
    }
    while pods.len() < count {
        pods.push(next(&mut rng, 0));
    }
    pods
}

/// Upstream's preference benchmark: pods preferring zone 1, with an unsatisfiable preferred
/// zonal anti-affinity and a satisfiable preferred hostname anti-affinity.
pub fn preference_pods(count: usize, seed: u64) -> Vec<Pod> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|i| {
            let b = pod(&format!("pref-{i:06}"))
                .created(0)
                .labels(&[("app", "nginx")])
                .preferred_term(1, &[(labels::ZONE, "In", &["test-zone-1"])])
                .preferred_anti_affinity_to(10, labels::ZONE, &[("app", "nginx")])
                .preferred_anti_affinity_to(1, labels::HOSTNAME, &[("app", "nginx")]);
            random_requests(b, &mut rng).build()
        })
        .collect()
}
