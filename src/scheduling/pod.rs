//! What the scheduler reads from a pod: its effective resource requests (containers, init
//! containers, sidecars, overhead, plus one `pods` slot) and its scheduling constraints, and
//! upstream's preference relaxation, which rewrites those constraints one step at a time.

use crate::pods::PodLike;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::{
    Affinity, Container, ResourceRequirements, Toleration, TopologySpreadConstraint,
};

use super::intern::FxHasher;
use super::resvec::{ResId, ResNames, parse_milli};

/// The PersistentVolumeClaims `pod` mounts, by name: those it names, and the one each
/// generic ephemeral volume creates (`<pod>-<volume>`).
pub fn claim_names(pod: &impl PodLike) -> Vec<String> {
    let Some(volumes) = pod.spec().and_then(|s| s.volumes.as_ref()) else {
        return Vec::new();
    };
    volumes
        .iter()
        .filter_map(|v| {
            v.persistent_volume_claim
                .as_ref()
                .map(|c| c.claim_name.clone())
                .or_else(|| {
                    v.ephemeral
                        .as_ref()
                        .map(|_| format!("{}-{}", pod.meta().name.unwrap_or(""), v.name))
                })
        })
        .collect()
}

/// A host port a pod binds.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub port: i32,
    pub protocol: String,
}

impl HostPort {
    /// Same protocol and port, and the same IP unless either listens on every address.
    pub fn conflicts(&self, other: &HostPort) -> bool {
        let any = |ip: &str| ip == "0.0.0.0" || ip == "::";
        self.protocol == other.protocol
            && self.port == other.port
            && (self.ip == other.ip || any(&self.ip) || any(&other.ip))
    }
}

/// The constraint-bearing parts of a pod spec. Pods with equal specs schedule identically, so
/// the solver computes everything derived from a spec once per distinct spec.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ConstraintSpec {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub node_selector: BTreeMap<String, String>,
    pub affinity: Option<Affinity>,
    pub tolerations: Vec<Toleration>,
    pub spread: Vec<TopologySpreadConstraint>,
    pub host_ports: Vec<HostPort>,
    /// Names of the PersistentVolumeClaims the pod mounts.
    pub claims: Vec<String>,
}

/// A borrowed view of a pod's constraint-bearing parts, so finding a pod's class needs no
/// cloning (only pods with host ports or volumes allocate their lists).
#[derive(PartialEq)]
pub struct SpecView<'a> {
    namespace: &'a str,
    labels: Option<&'a BTreeMap<String, String>>,
    node_selector: Option<&'a BTreeMap<String, String>>,
    affinity: Option<&'a Affinity>,
    tolerations: &'a [Toleration],
    spread: &'a [TopologySpreadConstraint],
    host_ports: Vec<HostPort>,
    claims: Vec<String>,
}

fn non_empty<K, V>(m: Option<&BTreeMap<K, V>>) -> Option<&BTreeMap<K, V>> {
    m.filter(|m| !m.is_empty())
}

impl<'a> SpecView<'a> {
    pub fn of(pod: &'a impl PodLike) -> SpecView<'a> {
        let spec = pod.spec();
        let mut host_ports: Vec<HostPort> = spec
            .map(|s| s.containers.iter().flat_map(container_host_ports).collect())
            .unwrap_or_default();
        host_ports.sort();
        SpecView {
            namespace: pod.meta().namespace.unwrap_or("default"),
            labels: non_empty(pod.meta().labels),
            node_selector: non_empty(spec.and_then(|s| s.node_selector.as_ref())),
            affinity: spec.and_then(|s| s.affinity.as_ref()),
            tolerations: spec
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
            spread: spec
                .and_then(|s| s.topology_spread_constraints.as_deref())
                .unwrap_or_default(),
            host_ports,
            claims: claim_names(pod),
        }
    }

    /// A cheap hash of the view used to find equal specs; collisions are resolved by `==`.
    pub fn fingerprint(&self) -> u64 {
        let mut h = FxHasher::default();
        self.namespace.hash(&mut h);
        self.labels.hash(&mut h);
        self.node_selector.hash(&mut h);
        self.tolerations.len().hash(&mut h);
        for t in self.tolerations {
            t.key.hash(&mut h);
            t.value.hash(&mut h);
        }
        for s in self.spread {
            s.topology_key.hash(&mut h);
            s.max_skew.hash(&mut h);
            if let Some(sel) = &s.label_selector {
                sel.match_labels.hash(&mut h);
            }
        }
        if let Some(a) = self.affinity {
            let terms = a
                .pod_affinity
                .iter()
                .flat_map(|p| {
                    p.required_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                })
                .chain(a.pod_anti_affinity.iter().flat_map(|p| {
                    p.required_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                }));
            for term in terms {
                term.topology_key.hash(&mut h);
                term.label_selector
                    .as_ref()
                    .map(|s| &s.match_labels)
                    .hash(&mut h);
            }
            a.node_affinity.is_some().hash(&mut h);
        }
        self.host_ports.hash(&mut h);
        self.claims.hash(&mut h);
        h.finish()
    }

    pub fn to_owned(&self) -> ConstraintSpec {
        ConstraintSpec {
            namespace: self.namespace.to_string(),
            labels: self.labels.cloned().unwrap_or_default(),
            node_selector: self.node_selector.cloned().unwrap_or_default(),
            affinity: self.affinity.cloned(),
            tolerations: self.tolerations.to_vec(),
            spread: self.spread.to_vec(),
            host_ports: self.host_ports.clone(),
            claims: self.claims.clone(),
        }
    }
}

impl ConstraintSpec {
    pub fn of(pod: &impl PodLike) -> ConstraintSpec {
        SpecView::of(pod).to_owned()
    }

    pub fn view(&self) -> SpecView<'_> {
        SpecView {
            namespace: &self.namespace,
            labels: non_empty(Some(&self.labels)),
            node_selector: non_empty(Some(&self.node_selector)),
            affinity: self.affinity.as_ref(),
            tolerations: &self.tolerations,
            spread: &self.spread,
            host_ports: self.host_ports.clone(),
            claims: self.claims.clone(),
        }
    }

    pub fn fingerprint(&self) -> u64 {
        self.view().fingerprint()
    }

    /// Applies the next preference relaxation, returning what was relaxed, or `None` when
    /// nothing is left to relax. The order is upstream's: extra required node-affinity terms,
    /// preferred pod affinity, preferred pod anti-affinity, preferred node affinity,
    /// ScheduleAnyway spreads, then (if a NodePool has such taints) tolerating PreferNoSchedule.
    pub fn relax(&mut self, tolerate_prefer_no_schedule: bool) -> Option<String> {
        self.remove_required_node_affinity_term()
            .or_else(|| self.remove_preferred_pod_affinity_term())
            .or_else(|| self.remove_preferred_pod_anti_affinity_term())
            .or_else(|| self.remove_preferred_node_affinity_term())
            .or_else(|| self.remove_schedule_anyway_spread())
            .or_else(|| {
                tolerate_prefer_no_schedule
                    .then(|| self.tolerate_prefer_no_schedule())
                    .flatten()
            })
    }

    fn remove_required_node_affinity_term(&mut self) -> Option<String> {
        let terms = &mut self
            .affinity
            .as_mut()?
            .node_affinity
            .as_mut()?
            .required_during_scheduling_ignored_during_execution
            .as_mut()?
            .node_selector_terms;
        (terms.len() > 1).then(|| {
            terms.remove(0);
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]".into()
        })
    }

    fn remove_preferred_pod_affinity_term(&mut self) -> Option<String> {
        let terms = self
            .affinity
            .as_mut()?
            .pod_affinity
            .as_mut()?
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()?;
        remove_heaviest(terms, |t| t.weight).then(|| {
            "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]".into()
        })
    }

    fn remove_preferred_pod_anti_affinity_term(&mut self) -> Option<String> {
        let terms = self
            .affinity
            .as_mut()?
            .pod_anti_affinity
            .as_mut()?
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()?;
        remove_heaviest(terms, |t| t.weight).then(|| {
            "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]"
                .into()
        })
    }

    fn remove_preferred_node_affinity_term(&mut self) -> Option<String> {
        let terms = self
            .affinity
            .as_mut()?
            .node_affinity
            .as_mut()?
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()?;
        remove_heaviest(terms, |t| t.weight).then(|| {
            "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]".into()
        })
    }

    fn remove_schedule_anyway_spread(&mut self) -> Option<String> {
        let i = self
            .spread
            .iter()
            .position(|s| s.when_unsatisfiable == "ScheduleAnyway")?;
        // Upstream swaps the last constraint into the removed slot.
        self.spread.swap_remove(i);
        Some("spec.topologySpreadConstraints (ScheduleAnyway)".into())
    }

    fn tolerate_prefer_no_schedule(&mut self) -> Option<String> {
        let toleration = Toleration {
            operator: Some("Exists".into()),
            effect: Some("PreferNoSchedule".into()),
            ..Toleration::default()
        };
        let already = self.tolerations.iter().any(|t| {
            t.key.as_deref().unwrap_or("").is_empty()
                && t.operator.as_deref() == Some("Exists")
                && matches!(
                    t.effect.as_deref(),
                    None | Some("") | Some("PreferNoSchedule")
                )
        });
        if already {
            return None;
        }
        self.tolerations.push(toleration);
        Some("toleration for PreferNoSchedule taints".into())
    }
}

/// Sorts by weight (heaviest first, stable) and drops the heaviest; false when empty.
fn remove_heaviest<T>(terms: &mut Vec<T>, weight: impl Fn(&T) -> i32) -> bool {
    if terms.is_empty() {
        return false;
    }
    terms.sort_by_key(|t| std::cmp::Reverse(weight(t)));
    terms.remove(0);
    true
}

fn container_host_ports(c: &Container) -> Vec<HostPort> {
    c.ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp != 0)?;
            Some(HostPort {
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            })
        })
        .collect()
}

/// The pod's effective requests (upstream `RequestsForPods`): the larger of the regular
/// containers plus sidecars and each init container plus the sidecars started before it,
/// replaced by the pod-level requests where `spec.resources` sets them, plus pod overhead,
/// plus one `pods` slot. Limits stand in for missing requests.
pub fn pod_requests(pod: &impl PodLike, names: &mut ResNames) -> Result<Vec<(ResId, i64)>, String> {
    let mut total: Vec<(ResId, i64)> = Vec::with_capacity(4);
    if let Some(spec) = pod.spec() {
        for c in &spec.containers {
            container_requests(c.resources.as_ref(), names, &mut total, |a, b| a + b)?;
        }
        let mut sidecars: Vec<(ResId, i64)> = Vec::new();
        let mut init_max: Vec<(ResId, i64)> = Vec::new();
        for c in spec.init_containers.iter().flatten() {
            let mut req = Vec::new();
            container_requests(c.resources.as_ref(), names, &mut req, |a, b| a + b)?;
            if c.restart_policy.as_deref() == Some("Always") {
                merge(&mut sidecars, &req, |a, b| a + b);
                // A sidecar must also fit alongside the sidecars started before it.
                let started = sidecars.clone();
                merge(&mut init_max, &started, i64::max);
            } else {
                let mut with_sidecars = sidecars.clone();
                merge(&mut with_sidecars, &req, |a, b| a + b);
                merge(&mut init_max, &with_sidecars, i64::max);
            }
        }
        merge(&mut total, &sidecars, |a, b| a + b);
        merge(&mut total, &init_max, i64::max);
        if let Some(pod_level) = &spec.resources {
            pod_level_requests(pod_level, names, &mut total)?;
        }
        if let Some(overhead) = &spec.overhead {
            let ov = names.k8s_vector(overhead)?;
            merge(&mut total, &ov, |a, b| a + b);
        }
    }
    merge(&mut total, &[(super::resvec::PODS, 1000)], |a, b| a + b);
    Ok(total)
}

/// [`pod_requests`] as a resource list, for callers outside the scheduler (the
/// controller's node metrics); `Err` names the unparsable quantity.
pub fn resource_requests(pod: &impl PodLike) -> Result<crate::resources::Resources, String> {
    let mut names = ResNames::default();
    let sparse = pod_requests(pod, &mut names)?;
    Ok(names.to_resources(&super::resvec::dense(names.len(), &sparse)))
}

/// Whether pod-level resources (`PodLevelResources`, Kubernetes 1.32+) cover `name`: cpu,
/// memory and hugepages, as the kube-scheduler's resource helper has it.
pub fn is_pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Replaces the containers' `acc` with the pod-level requests for the resources they name.
/// A pod-level limit stands in for a missing pod-level request where no container asks for
/// the resource, as the API server defaults it.
fn pod_level_requests(
    res: &ResourceRequirements,
    names: &mut ResNames,
    acc: &mut Vec<(ResId, i64)>,
) -> Result<(), String> {
    let requests = res.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        if !is_pod_level_resource(name) {
            continue;
        }
        let milli = parse_milli(&q.0).ok_or_else(|| format!("{name}={}", q.0))?;
        merge(acc, &[(names.id(name), milli)], |_, pod| pod);
    }
    for (name, q) in res.limits.iter().flatten() {
        if !is_pod_level_resource(name) || requests.is_some_and(|r| r.contains_key(name)) {
            continue;
        }
        let id = names.id(name);
        if acc.iter().any(|(k, v)| *k == id && *v > 0) {
            continue;
        }
        let milli = parse_milli(&q.0).ok_or_else(|| format!("{name}={}", q.0))?;
        merge(acc, &[(id, milli)], |_, pod| pod);
    }
    Ok(())
}

/// Adds a container's requests (limits standing in for missing requests) into `acc`.
fn container_requests(
    res: Option<&ResourceRequirements>,
    names: &mut ResNames,
    acc: &mut Vec<(ResId, i64)>,
    f: impl Fn(i64, i64) -> i64 + Copy,
) -> Result<(), String> {
    let Some(res) = res else { return Ok(()) };
    let requests = res.requests.as_ref();
    for (name, q) in requests.into_iter().flatten() {
        let milli = parse_milli(&q.0).ok_or_else(|| format!("{name}={}", q.0))?;
        merge(acc, &[(names.id(name), milli)], f);
    }
    for (name, q) in res.limits.iter().flatten() {
        if requests.is_some_and(|r| r.contains_key(name)) {
            continue;
        }
        let milli = parse_milli(&q.0).ok_or_else(|| format!("{name}={}", q.0))?;
        merge(acc, &[(names.id(name), milli)], f);
    }
    Ok(())
}

fn merge(acc: &mut Vec<(ResId, i64)>, other: &[(ResId, i64)], f: impl Fn(i64, i64) -> i64) {
    for (k, v) in other {
        match acc.iter_mut().find(|(ak, _)| ak == k) {
            Some((_, a)) => *a = f(*a, *v),
            None => acc.push((*k, f(0, *v))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::core::v1::{
        Container, NodeAffinity, NodeSelector, NodeSelectorTerm, PodSpec, PreferredSchedulingTerm,
    };
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn container(cpu: &str, restart: Option<&str>) -> Container {
        Container {
            name: "c".into(),
            restart_policy: restart.map(Into::into),
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_containers() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container("1", None), container("500m", None)],
                init_containers: Some(vec![
                    container("100m", Some("Always")),
                    container("2", None),
                ]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut names = ResNames::default();
        let req: BTreeMap<_, _> = pod_requests(&pod, &mut names)
            .expect("valid")
            .into_iter()
            .collect();
        assert_eq!(req.len(), 2);
        // main = 1.5 + sidecar 0.1 = 1.6; init = 2 + 0.1 = 2.1
        assert_eq!(req[&super::super::resvec::CPU], 2100);
        assert_eq!(req[&super::super::resvec::PODS], 1000);
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_cpu_and_memory() {
        let list = |pairs: &[(&str, &str)]| {
            Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                    .collect(),
            )
        };
        let pod = |resources: ResourceRequirements| Pod {
            spec: Some(PodSpec {
                containers: vec![container("500m", None), container("500m", None)],
                resources: Some(resources),
                overhead: list(&[("cpu", "100m")]),
                ..Default::default()
            }),
            ..Default::default()
        };
        // Requests win where set; a resource pod-level resources do not cover stays the
        // containers' sum.
        let requests = resource_requests(&pod(ResourceRequirements {
            requests: list(&[("cpu", "3"), ("memory", "2Gi"), ("example.com/dongle", "9")]),
            ..Default::default()
        }))
        .expect("valid");
        assert_eq!(
            requests.cpu().milli_value(),
            3100,
            "pod level plus overhead"
        );
        assert_eq!(requests.memory().value(), 2 << 30);
        assert_eq!(requests.get_or_zero("example.com/dongle").value(), 0);
        // A limit stands in for a missing request only where no container asks for it.
        let requests = resource_requests(&pod(ResourceRequirements {
            limits: list(&[("cpu", "4"), ("memory", "1Gi")]),
            ..Default::default()
        }))
        .expect("valid");
        assert_eq!(
            requests.cpu().milli_value(),
            1100,
            "the containers ask for cpu"
        );
        assert_eq!(requests.memory().value(), 1 << 30);
    }

    #[test]
    fn resource_requests_name_each_resource() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container("1", None), container("500m", None)],
                ..Default::default()
            }),
            ..Default::default()
        };
        let requests = resource_requests(&pod).expect("valid");
        assert_eq!(requests.cpu().milli_value(), 1500);
        assert_eq!(requests.pods().value(), 1);
        let bad = Pod {
            spec: Some(PodSpec {
                containers: vec![container("lots", None)],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(resource_requests(&bad), Err("cpu=lots".to_owned()));
    }

    #[test]
    fn relaxation_follows_upstream_order() {
        let mut spec = ConstraintSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![
                            NodeSelectorTerm::default(),
                            NodeSelectorTerm::default(),
                        ],
                    }),
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        PreferredSchedulingTerm {
                            weight: 1,
                            preference: NodeSelectorTerm::default(),
                        },
                        PreferredSchedulingTerm {
                            weight: 9,
                            preference: NodeSelectorTerm::default(),
                        },
                    ]),
                }),
                ..Default::default()
            }),
            spread: vec![TopologySpreadConstraint {
                when_unsatisfiable: "ScheduleAnyway".into(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut steps = Vec::new();
        while let Some(step) = spec.relax(true) {
            steps.push(step);
        }
        assert_eq!(steps.len(), 5);
        assert!(steps[0].contains("requiredDuringScheduling"));
        assert!(steps[1].contains("nodeAffinity.preferred"));
        assert!(steps[2].contains("nodeAffinity.preferred"));
        assert!(steps[3].contains("ScheduleAnyway"));
        assert!(steps[4].contains("PreferNoSchedule"));
        assert!(spec.spread.is_empty());
    }
}
