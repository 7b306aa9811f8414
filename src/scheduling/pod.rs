//! What the scheduler reads from a pod: its effective resource requests (containers, init
//! containers, sidecars, overhead, plus one `pods` slot) and its scheduling constraints, and
//! upstream's preference relaxation, which rewrites those constraints one step at a time.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use k8s_openapi::api::core::v1::{
    Affinity, Container, Pod, ResourceRequirements, Toleration, TopologySpreadConstraint,
};

use super::intern::FxHasher;
use super::resvec::{ResId, ResNames, parse_milli};

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

impl ConstraintSpec {
    pub fn of(pod: &Pod) -> ConstraintSpec {
        let spec = pod.spec.as_ref();
        let mut host_ports: Vec<HostPort> = spec
            .map(|s| s.containers.iter().flat_map(container_host_ports).collect())
            .unwrap_or_default();
        host_ports.sort();
        ConstraintSpec {
            namespace: pod.metadata.namespace.clone().unwrap_or_else(|| "default".into()),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            node_selector: spec.and_then(|s| s.node_selector.clone()).unwrap_or_default(),
            affinity: spec.and_then(|s| s.affinity.clone()),
            tolerations: spec.and_then(|s| s.tolerations.clone()).unwrap_or_default(),
            spread: spec.and_then(|s| s.topology_spread_constraints.clone()).unwrap_or_default(),
            host_ports,
            claims: spec
                .and_then(|s| s.volumes.as_ref())
                .map(|vs| {
                    vs.iter()
                        .filter_map(|v| {
                            v.persistent_volume_claim.as_ref().map(|c| c.claim_name.clone()).or_else(|| {
                                // Generic ephemeral volumes create a PVC named <pod>-<volume>.
                                v.ephemeral.as_ref().map(|_| {
                                    format!("{}-{}", pod.metadata.name.as_deref().unwrap_or(""), v.name)
                                })
                            })
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// A cheap hash of the spec used to find equal specs; collisions are resolved by `==`.
    pub fn fingerprint(&self) -> u64 {
        let mut h = FxHasher::default();
        self.namespace.hash(&mut h);
        self.labels.hash(&mut h);
        self.node_selector.hash(&mut h);
        self.tolerations.len().hash(&mut h);
        for t in &self.tolerations {
            t.key.hash(&mut h);
            t.value.hash(&mut h);
        }
        for s in &self.spread {
            s.topology_key.hash(&mut h);
            s.max_skew.hash(&mut h);
            if let Some(sel) = &s.label_selector {
                sel.match_labels.hash(&mut h);
            }
        }
        if let Some(a) = &self.affinity {
            for term in a.pod_affinity.iter().flat_map(|p| p.required_during_scheduling_ignored_during_execution.iter().flatten()) {
                term.topology_key.hash(&mut h);
                term.label_selector.as_ref().map(|s| &s.match_labels).hash(&mut h);
            }
            for term in a.pod_anti_affinity.iter().flat_map(|p| p.required_during_scheduling_ignored_during_execution.iter().flatten()) {
                term.topology_key.hash(&mut h);
                term.label_selector.as_ref().map(|s| &s.match_labels).hash(&mut h);
            }
            a.node_affinity.is_some().hash(&mut h);
        }
        self.host_ports.hash(&mut h);
        self.claims.hash(&mut h);
        h.finish()
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
            .or_else(|| tolerate_prefer_no_schedule.then(|| self.tolerate_prefer_no_schedule()).flatten())
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
        remove_heaviest(terms, |t| t.weight)
            .then(|| "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]".into())
    }

    fn remove_preferred_pod_anti_affinity_term(&mut self) -> Option<String> {
        let terms = self
            .affinity
            .as_mut()?
            .pod_anti_affinity
            .as_mut()?
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()?;
        remove_heaviest(terms, |t| t.weight)
            .then(|| "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]".into())
    }

    fn remove_preferred_node_affinity_term(&mut self) -> Option<String> {
        let terms = self
            .affinity
            .as_mut()?
            .node_affinity
            .as_mut()?
            .preferred_during_scheduling_ignored_during_execution
            .as_mut()?;
        remove_heaviest(terms, |t| t.weight)
            .then(|| "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution[0]".into())
    }

    fn remove_schedule_anyway_spread(&mut self) -> Option<String> {
        let i = self.spread.iter().position(|s| s.when_unsatisfiable == "ScheduleAnyway")?;
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
                && matches!(t.effect.as_deref(), None | Some("") | Some("PreferNoSchedule"))
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
                ip: p.host_ip.clone().filter(|ip| !ip.is_empty()).unwrap_or_else(|| "0.0.0.0".into()),
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            })
        })
        .collect()
}

/// The pod's effective requests (upstream `RequestsForPods`): the larger of the regular
/// containers plus sidecars and each init container plus the sidecars started before it,
/// plus pod overhead, plus one `pods` slot. Limits stand in for missing requests.
pub fn pod_requests(pod: &Pod, names: &mut ResNames) -> Result<Vec<(ResId, i64)>, String> {
    let mut total: BTreeMap<ResId, i64> = BTreeMap::new();
    if let Some(spec) = pod.spec.as_ref() {
        let mut main: BTreeMap<ResId, i64> = BTreeMap::new();
        for c in &spec.containers {
            merge(&mut main, &container_requests(c.resources.as_ref(), names)?, |a, b| a + b);
        }
        let mut sidecars: BTreeMap<ResId, i64> = BTreeMap::new();
        let mut init_max: BTreeMap<ResId, i64> = BTreeMap::new();
        for c in spec.init_containers.iter().flatten() {
            let req = container_requests(c.resources.as_ref(), names)?;
            if c.restart_policy.as_deref() == Some("Always") {
                merge(&mut sidecars, &req, |a, b| a + b);
                // A sidecar must also fit alongside the sidecars started before it.
                merge(&mut init_max, &sidecars.clone(), i64::max);
            } else {
                let mut with_sidecars = sidecars.clone();
                merge(&mut with_sidecars, &req, |a, b| a + b);
                merge(&mut init_max, &with_sidecars, i64::max);
            }
        }
        merge(&mut main, &sidecars, |a, b| a + b);
        merge(&mut main, &init_max, i64::max);
        total = main;
        if let Some(overhead) = &spec.overhead {
            let ov = names.vector(overhead)?;
            merge(&mut total, &ov.into_iter().collect(), |a, b| a + b);
        }
    }
    *total.entry(super::resvec::PODS).or_insert(0) += 1000;
    Ok(total.into_iter().collect())
}

fn container_requests(res: Option<&ResourceRequirements>, names: &mut ResNames) -> Result<BTreeMap<ResId, i64>, String> {
    let mut out = BTreeMap::new();
    let Some(res) = res else { return Ok(out) };
    if let Some(limits) = &res.limits {
        out.extend(names.vector(limits)?);
    }
    if let Some(requests) = &res.requests {
        out.extend(names.vector(requests)?);
    }
    Ok(out)
}

fn merge(acc: &mut BTreeMap<ResId, i64>, other: &BTreeMap<ResId, i64>, f: impl Fn(i64, i64) -> i64) {
    for (k, v) in other {
        let e = acc.entry(*k).or_insert(0);
        *e = f(*e, *v);
    }
}

/// Parses a quantity string to milli-units (re-exported for callers building inputs).
pub fn milli(q: &str) -> Option<i64> {
    parse_milli(q)
}

#[cfg(test)]
mod tests {
    use super::*;
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
                init_containers: Some(vec![container("100m", Some("Always")), container("2", None)]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut names = ResNames::default();
        let req: BTreeMap<_, _> = pod_requests(&pod, &mut names).expect("valid").into_iter().collect();
        // main = 1.5 + sidecar 0.1 = 1.6; init = 2 + 0.1 = 2.1
        assert_eq!(req[&super::super::resvec::CPU], 2100);
        assert_eq!(req[&super::super::resvec::PODS], 1000);
    }

    #[test]
    fn relaxation_follows_upstream_order() {
        let mut spec = ConstraintSpec {
            affinity: Some(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm::default(), NodeSelectorTerm::default()],
                    }),
                    preferred_during_scheduling_ignored_during_execution: Some(vec![
                        PreferredSchedulingTerm { weight: 1, preference: NodeSelectorTerm::default() },
                        PreferredSchedulingTerm { weight: 9, preference: NodeSelectorTerm::default() },
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
