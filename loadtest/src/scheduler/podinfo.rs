//! What the simulated kube-scheduler needs to know about a pod, extracted once per pod
//! version: its effective requests, host ports, node affinity, tolerations, topology spread
//! constraints and inter-pod (anti-)affinity terms, already compiled for matching.
//!
//! The scheduler's pod cache compiles each pod version as it arrives and keeps the result
//! beside the few other fields the cycle reads (see `cached`), not the pod.

use super::amounts::Amounts;
use super::selector::Selector;
use k8s_openapi::api::core::v1::{
    Container, NodeSelectorTerm, Pod, PodAffinityTerm, PodSpec, ResourceRequirements, Toleration,
    TopologySpreadConstraint, WeightedPodAffinityTerm,
};
use kerf::pods::Interner;
use kerf::requirements::Requirement;
use kerf::resources::{Quantity, Resources};
use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Deref;
use std::sync::Arc;

/// A host port a pod claims; conflicts with the same port and protocol on a shared address.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct HostPort {
    pub(crate) port: i32,
    pub(crate) protocol: String,
    pub(crate) ip: String,
}

impl HostPort {
    pub(crate) fn conflicts(&self, other: &HostPort) -> bool {
        let wildcard = |ip: &str| ip.is_empty() || ip == "0.0.0.0";
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip || wildcard(&self.ip) || wildcard(&other.ip))
    }
}

/// Which namespaces an affinity term's selector looks at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Namespaces {
    Listed(Vec<String>),
    All,
}

impl Namespaces {
    pub(crate) fn contains(&self, namespace: &str) -> bool {
        match self {
            Namespaces::Listed(names) => names.iter().any(|n| n == namespace),
            Namespaces::All => true,
        }
    }
}

/// Which pods count: namespaces plus label selector, or (for the system default spread)
/// the pods of one controller. The key of the per-node count cache.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct PodSelector {
    pub(crate) namespaces: Namespaces,
    pub(crate) selector: Selector,
    /// Only pods of this controller (uid). kube-scheduler's system default spread selects
    /// by the selectors of the pod's ReplicaSet/StatefulSet/ReplicationController; the
    /// simulation does not follow those objects, and their selectors select their own pods.
    pub(crate) owner: Option<String>,
}

impl PodSelector {
    pub(crate) fn selects(&self, pod: &PodInfo) -> bool {
        self.namespaces.contains(&pod.namespace)
            && self.selector.matches(&pod.labels)
            && self
                .owner
                .as_ref()
                .is_none_or(|uid| pod.owner.as_ref() == Some(uid))
    }
}

/// A required pod (anti-)affinity term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct AffinityTerm {
    pub(crate) pods: PodSelector,
    pub(crate) topology_key: String,
}

/// A topology spread constraint (`DoNotSchedule` ones filter, `ScheduleAnyway` ones score).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct SpreadConstraint {
    pub(crate) max_skew: u32,
    pub(crate) topology_key: String,
    pub(crate) pods: PodSelector,
    pub(crate) min_domains: u32,
    /// `nodeAffinityPolicy: Honor` (the default): only nodes the pod could use count.
    pub(crate) honor_node_affinity: bool,
    /// `nodeTaintsPolicy: Honor` (default Ignore): only nodes whose taints it tolerates count.
    pub(crate) honor_taints: bool,
}

/// One OR-ed term of required node affinity: label requirements plus node-name fields.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct NodeTerm {
    pub(crate) labels: Vec<Requirement>,
    /// `matchFields` on `metadata.name`.
    pub(crate) names: Vec<Requirement>,
    /// A term the API server would have rejected; it matches no node.
    pub(crate) invalid: bool,
}

/// A pod compiled for scheduling: its identity and priority, and its [`PodShape`] (shared
/// with the pods of its workload when made through [`Shapes`]), whose fields it reads as its
/// own.
#[derive(Clone, Debug)]
pub(crate) struct PodInfo {
    pub(crate) uid: String,
    /// `spec.priority` (0 when unset), which orders whose nomination counts against whom.
    pub(crate) priority: i32,
    shape: Arc<PodShape>,
}

impl Deref for PodInfo {
    type Target = PodShape;

    fn deref(&self) -> &PodShape {
        &self.shape
    }
}

/// What scheduling reads of a pod besides its identity: the same for every pod of a
/// workload (a ReplicaSet's pods differ only in name and uid).
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct PodShape {
    pub(crate) namespace: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) requests: Amounts,
    pub(crate) host_ports: Vec<HostPort>,
    pub(crate) node_selector: BTreeMap<String, String>,
    /// `None` when the pod has no required node affinity.
    pub(crate) required_terms: Option<Vec<NodeTerm>>,
    pub(crate) preferred_terms: Vec<(i32, NodeTerm)>,
    pub(crate) tolerations: Vec<Toleration>,
    pub(crate) spread: Vec<SpreadConstraint>,
    pub(crate) affinity: Vec<AffinityTerm>,
    pub(crate) anti_affinity: Vec<AffinityTerm>,
    /// Preferred pod affinity and anti-affinity terms with their weights.
    pub(crate) preferred_affinity: Vec<(i32, AffinityTerm)>,
    pub(crate) preferred_anti_affinity: Vec<(i32, AffinityTerm)>,
    /// The constraints PodTopologySpread scores with: the pod's `ScheduleAnyway` ones, or,
    /// when it has no constraint at all and a controller owns it, the system defaults.
    pub(crate) soft_spread: Vec<SpreadConstraint>,
    /// `soft_spread` are the system defaults (nodes lacking a key still score).
    pub(crate) default_spread: bool,
    /// The uid of the controller (ReplicaSet, StatefulSet, ...) owning the pod.
    pub(crate) owner: Option<String>,
    /// cpu (milli) and memory (milli-bytes) as NodeResourcesFit scores them: each container
    /// without a request counts kube-scheduler's defaults (100m, 200Mi).
    pub(crate) non_zero: (i64, i64),
    /// Hash of everything that decides which nodes pass the pod-independent filters
    /// (node affinity, tolerations), so pods of one workload share that work.
    pub(crate) static_fingerprint: u64,
}

impl PodShape {
    /// A hash of the fields that tell workloads apart, to find an equal shape by.
    fn key(&self) -> u64 {
        let mut hasher = DefaultHasher::new();
        self.namespace.hash(&mut hasher);
        self.labels.hash(&mut hasher);
        self.owner.hash(&mut hasher);
        self.non_zero.hash(&mut hasher);
        self.static_fingerprint.hash(&mut hasher);
        hasher.finish()
    }
}

/// The shapes of the pods in the scheduler's cache, so the pods of one workload share one
/// instead of each holding a copy, which would be most of the cache. It holds them weakly:
/// a shape goes with the last pod version that has it.
pub(crate) type Shapes = Interner<PodShape>;

impl PodInfo {
    /// Identifies the pod's shape: pods made through one [`Shapes`] share it when their
    /// workload and scheduling fields are equal.
    pub(crate) fn shape_id(&self) -> usize {
        Arc::as_ptr(&self.shape) as usize
    }

    /// The pod's shape: whoever keys a map by [`PodInfo::shape_id`] holds it, so the address
    /// cannot be reused by another shape while the key stands.
    pub(crate) fn shape(&self) -> Arc<PodShape> {
        Arc::clone(&self.shape)
    }

    /// Compiles `pod`; a malformed quantity is reported with the pod and field it is in.
    pub(crate) fn new(pod: &Pod) -> Result<PodInfo, String> {
        let shape = PodShape::of(pod)?;
        Ok(PodInfo::with_shape(pod, Arc::new(shape)))
    }

    /// Compiles `pod`, sharing its shape with the equal one in `shapes`.
    pub(crate) fn shared(pod: &Pod, shapes: &mut Shapes) -> Result<PodInfo, String> {
        let shape = PodShape::of(pod)?;
        Ok(PodInfo::with_shape(
            pod,
            shapes.intern_by(shape.key(), shape),
        ))
    }

    fn with_shape(pod: &Pod, shape: Arc<PodShape>) -> PodInfo {
        PodInfo {
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            priority: pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0),
            shape,
        }
    }
}

impl PodShape {
    fn of(pod: &Pod) -> Result<PodShape, String> {
        let namespace = pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let name = pod.metadata.name.clone().unwrap_or_default();
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let empty = PodSpec::default();
        let spec = pod.spec.as_ref().unwrap_or(&empty);
        let requests = pod_requests(spec).map_err(|e| format!("pod {namespace}/{name}: {e}"))?;
        let requests = Amounts::of(&requests);
        let non_zero = non_zero_requests(spec, &requests);
        let node_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref());
        let required_terms = node_affinity
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|sel| {
                sel.node_selector_terms
                    .iter()
                    .map(compile_node_term)
                    .collect()
            });
        let preferred_terms = node_affinity
            .and_then(|na| {
                na.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(|prefs| {
                prefs
                    .iter()
                    .map(|p| (p.weight, compile_node_term(&p.preference)))
                    .collect()
            })
            .unwrap_or_default();
        let pod_affinity = spec.affinity.as_ref().and_then(|a| a.pod_affinity.as_ref());
        let pod_anti_affinity = spec
            .affinity
            .as_ref()
            .and_then(|a| a.pod_anti_affinity.as_ref());
        let compile_terms = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .map(|t| compile_affinity_term(t, &namespace, &labels))
                .collect()
        };
        let affinity = compile_terms(pod_affinity.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let anti_affinity = compile_terms(pod_anti_affinity.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let preferred = |terms: Option<&Vec<WeightedPodAffinityTerm>>| -> Vec<(i32, AffinityTerm)> {
            terms
                .into_iter()
                .flatten()
                .map(|t| {
                    let term = compile_affinity_term(&t.pod_affinity_term, &namespace, &labels);
                    (t.weight, term)
                })
                .collect()
        };
        let preferred_affinity = preferred(pod_affinity.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let preferred_anti_affinity = preferred(pod_anti_affinity.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let constraints = spec.topology_spread_constraints.as_deref().unwrap_or(&[]);
        let compiled = |when: &str| -> Vec<SpreadConstraint> {
            constraints
                .iter()
                .filter(|c| c.when_unsatisfiable == when)
                .map(|c| compile_spread(c, &namespace, &labels))
                .collect()
        };
        let spread = compiled("DoNotSchedule");
        let owner = controller_owner(pod);
        let default_spread = constraints.is_empty() && owner.is_some();
        let soft_spread = match &owner {
            Some(uid) if default_spread => system_default_spread(&namespace, uid),
            _ => compiled("ScheduleAnyway"),
        };
        let tolerations = spec.tolerations.clone().unwrap_or_default();
        let node_selector = spec.node_selector.clone().unwrap_or_default();
        let static_fingerprint = fingerprint(spec);
        Ok(PodShape {
            host_ports: host_ports(spec),
            namespace,
            labels,
            requests,
            node_selector,
            required_terms,
            preferred_terms,
            tolerations,
            spread,
            affinity,
            anti_affinity,
            preferred_affinity,
            preferred_anti_affinity,
            soft_spread,
            default_spread,
            owner,
            non_zero,
            static_fingerprint,
        })
    }
}

/// The pod's effective requests as the scheduler counts them: the larger of the regular
/// containers' sum (plus restartable init containers, which keep running) and any single
/// init container, replaced by the pod-level requests where `spec.resources` sets them,
/// plus pod overhead, plus one `pods` slot. A request omitted where a limit is set defaults
/// to the limit, as the API server defaults it. Pod-level resources count as with the
/// `PodLevelResources` gate on (beta and on by default from 1.34): the API server keeps
/// `spec.resources` only with the gate on, so a pod that has it runs where it is counted.
pub(crate) fn pod_requests(spec: &PodSpec) -> Result<Resources, String> {
    let mut containers = Resources::new();
    for container in &spec.containers {
        containers.add_assign(&container_requests(container)?);
    }
    // Sidecars (restartable init containers) start in order and keep running, so each later
    // init container runs beside the sidecars started before it.
    let mut sidecars = Resources::new();
    let mut init_peak = Resources::new();
    for init in spec.init_containers.iter().flatten() {
        let requests = container_requests(init)?;
        if init.restart_policy.as_deref() == Some("Always") {
            sidecars.add_assign(&requests);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&requests.merged(&sidecars));
        }
    }
    let mut total = containers.merged(&sidecars).max(&init_peak);
    if let Some(pod_level) = &spec.resources {
        total = with_pod_level(total, pod_level)?;
    }
    for (name, quantity) in spec.overhead.iter().flatten() {
        total.add_assign(&Resources::new().with(name, parse_quantity(name, &quantity.0)?));
    }
    let one_pod = Quantity::new(1, Default::default());
    total.add_assign(&Resources::new().with(kerf::labels::RESOURCE_PODS, one_pod));
    Ok(total)
}

/// `containers` with the pod-level requests in place of theirs (cpu, memory, hugepages); a
/// pod-level limit stands in for a request no container makes, as the API server defaults it.
fn with_pod_level(
    mut containers: Resources,
    pod_level: &ResourceRequirements,
) -> Result<Resources, String> {
    let covered = |name: &str| name == "cpu" || name == "memory" || name.starts_with("hugepages-");
    let requests = pod_level.requests.as_ref();
    let in_pod = |e: String| format!("pod-level resources: {e}");
    for (name, quantity) in requests.into_iter().flatten() {
        if covered(name) {
            containers.insert(name, parse_quantity(name, &quantity.0).map_err(in_pod)?);
        }
    }
    for (name, quantity) in pod_level.limits.iter().flatten() {
        let requested = requests.is_some_and(|r| r.contains_key(name));
        if covered(name) && !requested && containers.get_or_zero(name).is_zero() {
            containers.insert(name, parse_quantity(name, &quantity.0).map_err(in_pod)?);
        }
    }
    Ok(containers)
}

fn container_requests(container: &Container) -> Result<Resources, String> {
    let Some(resources) = container.resources.as_ref() else {
        return Ok(Resources::new());
    };
    let mut out = Resources::new();
    let requests = resources.requests.iter().flatten();
    for (name, quantity) in requests {
        out.insert(
            name,
            parse_quantity(name, &quantity.0).map_err(|e| in_container(container, e))?,
        );
    }
    for (name, quantity) in resources.limits.iter().flatten() {
        if !out.contains(name) {
            let limit =
                parse_quantity(name, &quantity.0).map_err(|e| in_container(container, e))?;
            out.insert(name, limit);
        }
    }
    Ok(out)
}

fn in_container(container: &Container, error: String) -> String {
    format!("container {}: {error}", container.name)
}

fn parse_quantity(name: &str, text: &str) -> Result<Quantity, String> {
    Quantity::parse(text).map_err(|e| format!("resource {name}: invalid quantity {text:?}: {e}"))
}

fn host_ports(spec: &PodSpec) -> Vec<HostPort> {
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    containers
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|port| *port > 0)?;
            Some(HostPort {
                port,
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                ip: p.host_ip.clone().unwrap_or_default(),
            })
        })
        .collect()
}

fn compile_node_term(term: &NodeSelectorTerm) -> NodeTerm {
    let mut compiled = NodeTerm::default();
    for expr in term.match_expressions.iter().flatten() {
        match Requirement::try_from(expr) {
            Ok(req) => compiled.labels.push(req),
            Err(_) => compiled.invalid = true,
        }
    }
    for field in term.match_fields.iter().flatten() {
        match Requirement::try_from(field) {
            Ok(req) if field.key == "metadata.name" => compiled.names.push(req),
            _ => compiled.invalid = true,
        }
    }
    compiled
}

fn compile_affinity_term(
    term: &PodAffinityTerm,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> AffinityTerm {
    let namespaces = match (&term.namespaces, &term.namespace_selector) {
        (Some(list), _) if !list.is_empty() => Namespaces::Listed(list.clone()),
        (_, Some(_)) => Namespaces::All,
        _ => Namespaces::Listed(vec![namespace.to_owned()]),
    };
    let selector = Selector::compile(term.label_selector.as_ref())
        .with_label_keys(term.match_label_keys.as_deref().unwrap_or(&[]), labels);
    AffinityTerm {
        pods: PodSelector {
            namespaces,
            selector,
            owner: None,
        },
        topology_key: term.topology_key.clone(),
    }
}

fn compile_spread(
    constraint: &TopologySpreadConstraint,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> SpreadConstraint {
    let selector = Selector::compile(constraint.label_selector.as_ref()).with_label_keys(
        constraint.match_label_keys.as_deref().unwrap_or(&[]),
        labels,
    );
    SpreadConstraint {
        max_skew: u32::try_from(constraint.max_skew).unwrap_or(1).max(1),
        topology_key: constraint.topology_key.clone(),
        pods: PodSelector {
            namespaces: Namespaces::Listed(vec![namespace.to_owned()]),
            selector,
            owner: None,
        },
        min_domains: constraint
            .min_domains
            .and_then(|m| u32::try_from(m).ok())
            .unwrap_or(1),
        honor_node_affinity: constraint.node_affinity_policy.as_deref() != Some("Ignore"),
        honor_taints: constraint.node_taints_policy.as_deref() == Some("Honor"),
    }
}

/// Owner kinds whose pods kube-scheduler's system default spread applies to (Services too,
/// which the simulation does not model).
const SPREAD_OWNER_KINDS: [&str; 3] = ["ReplicaSet", "StatefulSet", "ReplicationController"];

/// kube-scheduler's system default constraints (`defaultingType: System`): spread over
/// hostnames with `maxSkew: 3` and over zones with `maxSkew: 5`, both `ScheduleAnyway`.
pub(crate) const SYSTEM_DEFAULT_SPREAD: [(&str, u32); 2] =
    [(kerf::labels::HOSTNAME, 3), (kerf::labels::ZONE, 5)];

fn controller_owner(pod: &Pod) -> Option<String> {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true) && SPREAD_OWNER_KINDS.contains(&o.kind.as_str()))
        .map(|o| o.uid.clone())
}

fn system_default_spread(namespace: &str, owner: &str) -> Vec<SpreadConstraint> {
    SYSTEM_DEFAULT_SPREAD
        .iter()
        .map(|(key, max_skew)| SpreadConstraint {
            max_skew: *max_skew,
            topology_key: (*key).to_owned(),
            pods: PodSelector {
                namespaces: Namespaces::Listed(vec![namespace.to_owned()]),
                selector: Selector::compile(Some(&Default::default())),
                owner: Some(owner.to_owned()),
            },
            min_domains: 1,
            honor_node_affinity: true,
            honor_taints: false,
        })
        .collect()
}

/// kube-scheduler's defaults for a container that requests no cpu or memory, used only by
/// the scoring (`schedutil.DefaultMilliCPURequest`, `DefaultMemoryRequest`).
const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// cpu and memory in milli-units with each request-less container counted at the defaults,
/// never below the pod's real requests (init containers can make those larger).
fn non_zero_requests(spec: &PodSpec, requests: &Amounts) -> (i64, i64) {
    let mut cpu = 0;
    let mut memory = 0;
    for container in &spec.containers {
        let own = container_requests(container)
            .map(|r| Amounts::of(&r))
            .unwrap_or_default();
        cpu += if own.cpu() > 0 {
            own.cpu()
        } else {
            DEFAULT_MILLI_CPU_REQUEST
        };
        memory += if own.memory() > 0 {
            own.memory()
        } else {
            DEFAULT_MEMORY_REQUEST * 1000
        };
    }
    (cpu.max(requests.cpu()), memory.max(requests.memory()))
}

fn fingerprint(spec: &PodSpec) -> u64 {
    let mut hasher = DefaultHasher::new();
    serde_json::to_string(&spec.node_selector)
        .unwrap_or_default()
        .hash(&mut hasher);
    let node_affinity = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref());
    serde_json::to_string(&node_affinity)
        .unwrap_or_default()
        .hash(&mut hasher);
    serde_json::to_string(&spec.tolerations)
        .unwrap_or_default()
        .hash(&mut hasher);
    hasher.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ContainerPort;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

    fn container(name: &str, cpu: &str, memory: &str) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: Some(
                    [
                        ("cpu".to_string(), K8sQuantity(cpu.into())),
                        ("memory".to_string(), K8sQuantity(memory.into())),
                    ]
                    .into(),
                ),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        }
    }

    fn q(text: &str) -> Quantity {
        Quantity::parse(text).expect("valid quantity")
    }

    fn replica(name: &str, app: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "default", "name": name, "uid": format!("uid-{name}"),
                "labels": {"app": app},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                    "name": app, "uid": format!("rs-{app}"), "controller": true}]},
            "spec": {"priority": 5, "containers": [{"name": "c",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
        }))
        .expect("a pod")
    }

    #[test]
    fn the_pods_of_a_workload_share_one_shape_while_any_of_them_has_it() {
        let mut shapes = Shapes::default();
        let a = PodInfo::shared(&replica("web-a", "web"), &mut shapes).expect("compiles");
        let b = PodInfo::shared(&replica("web-b", "web"), &mut shapes).expect("compiles");
        let other = PodInfo::shared(&replica("api-a", "api"), &mut shapes).expect("compiles");
        assert!(Arc::ptr_eq(&a.shape, &b.shape));
        assert!(!Arc::ptr_eq(&a.shape, &other.shape));
        assert_eq!((a.uid.as_str(), b.uid.as_str()), ("uid-web-a", "uid-web-b"));
        assert_eq!(b.priority, 5);
        assert_eq!(b.labels.get("app").map(String::as_str), Some("web"));

        let weak = Arc::downgrade(&a.shape);
        drop((a, b));
        assert!(
            weak.upgrade().is_none(),
            "the cache does not keep a shape alive"
        );
        let again = PodInfo::shared(&replica("web-c", "web"), &mut shapes).expect("compiles");
        assert_eq!(again.labels.get("app").map(String::as_str), Some("web"));
    }

    #[test]
    fn requests_take_the_larger_of_containers_and_init_containers() {
        let spec = PodSpec {
            containers: vec![container("a", "500m", "1Gi"), container("b", "250m", "1Gi")],
            init_containers: Some(vec![container("init", "2", "512Mi")]),
            ..PodSpec::default()
        };
        let requests = pod_requests(&spec).expect("valid");
        assert_eq!(requests.cpu(), q("2"));
        assert_eq!(requests.memory(), q("2Gi"));
        assert_eq!(requests.pods(), q("1"));
    }

    #[test]
    fn pod_level_requests_replace_the_containers_as_kerf_counts_them() {
        let spec = PodSpec {
            containers: vec![container("a", "500m", "1Gi"), container("b", "250m", "1Gi")],
            resources: Some(ResourceRequirements {
                requests: Some([("cpu".to_string(), K8sQuantity("3".into()))].into()),
                limits: Some([("memory".to_string(), K8sQuantity("8Gi".into()))].into()),
                ..ResourceRequirements::default()
            }),
            ..PodSpec::default()
        };
        let requests = pod_requests(&spec).expect("valid");
        assert_eq!(requests.cpu(), q("3"));
        // The containers ask for memory: the pod-level limit is no request.
        assert_eq!(requests.memory(), q("2Gi"));
        // The controller's core counts the same pod the same way.
        let pod = Pod {
            spec: Some(spec),
            ..Pod::default()
        };
        let core = kerf::scheduling::resource_requests(&pod).expect("valid");
        assert_eq!(
            (core.cpu(), core.memory()),
            (requests.cpu(), requests.memory())
        );
    }

    #[test]
    fn limits_stand_in_for_missing_requests() {
        let spec = PodSpec {
            containers: vec![Container {
                name: "a".into(),
                resources: Some(ResourceRequirements {
                    limits: Some([("cpu".to_string(), K8sQuantity("1".into()))].into()),
                    ..ResourceRequirements::default()
                }),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        assert_eq!(pod_requests(&spec).expect("valid").cpu(), q("1"));
    }

    #[test]
    fn malformed_quantities_name_the_container_and_resource() {
        let spec = PodSpec {
            containers: vec![container("app", "lots", "1Gi")],
            ..PodSpec::default()
        };
        let err = pod_requests(&spec).expect_err("invalid cpu");
        assert!(
            err.contains("container app") && err.contains("cpu") && err.contains("lots"),
            "{err}"
        );
    }

    #[test]
    fn host_ports_conflict_on_shared_addresses_only() {
        let spec = PodSpec {
            containers: vec![Container {
                name: "a".into(),
                ports: Some(vec![ContainerPort {
                    container_port: 80,
                    host_port: Some(8080),
                    ..ContainerPort::default()
                }]),
                ..Container::default()
            }],
            ..PodSpec::default()
        };
        let ports = host_ports(&spec);
        assert_eq!(ports.len(), 1);
        let other_ip = HostPort {
            port: 8080,
            protocol: "TCP".into(),
            ip: "10.0.0.1".into(),
        };
        assert!(
            ports[0].conflicts(&other_ip),
            "wildcard address conflicts with any"
        );
        let udp = HostPort {
            protocol: "UDP".into(),
            ..other_ip.clone()
        };
        assert!(!ports[0].conflicts(&udp));
        let ip2 = HostPort {
            ip: "10.0.0.2".into(),
            ..other_ip.clone()
        };
        assert!(!other_ip.conflicts(&ip2));
    }
}
