//! Turns a [`SchedulingInput`] into the solver's working state: interned requirements, dense
//! resource vectors, NodePools with their instance types and daemonset groups, existing nodes
//! with their remaining room, pod classes with relaxation chains, and topology groups counted
//! from the pods already running. Bad NodePool or instance-type data is an error naming the
//! object and field; a bad pod only fails that pod.

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, PodAffinityTerm, Taint, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use super::SchedulingError;
use super::class::{Class, ClassId, required_term_alternatives, respects, spec_requirements};
use super::forms::{PodForm, PodForms, pod_ref};
use super::intern::{Bits, FxHashMap, Sym};
use super::pod::{ConstraintSpec, HostPort, SpecView, pod_requests};
use super::pool::{DaemonGroup, ItInfo, Offer, Pool};
use super::req::{Req, ReqSet, Vocab};
use super::resvec::{self, CPU, MEMORY, ResId, ResNames};
use super::topology::{
    DomainUniverse, Group, GroupId, GroupSpec, Kind, Namespaces, NodeFilter, Selector,
    TolerationKey, Topology,
};
use super::types::InstanceType;
use super::types::{SchedulingInput, SchedulingOptions};
use super::volumes::VolumeIndex;
use crate::labels;
use crate::pods::{LeanPod, PodLike};
use crate::taints::{self, PreferNoSchedule};

/// A pending pod: its identity, requests and first class.
#[derive(Clone, Debug)]
pub struct PodInfo {
    /// Shared with the [`PodForms`] the round was prepared with.
    pub form: Arc<PodForm>,
    pub class: ClassId,
    pub requests: Vec<i64>,
    pub error: Option<String>,
}

/// An existing node (or in-flight NodeClaim) and its room left.
#[derive(Clone, Debug)]
pub struct NodeState {
    pub name: String,
    pub reqs: ReqSet,
    pub taints: Vec<Taint>,
    pub avail: Vec<i64>,
    pub ports: Vec<HostPort>,
    pub initialized: bool,
    pub placed: Vec<u32>,
}

/// Everything a solve works on.
#[derive(Clone, Debug)]
pub struct Prepared {
    pub vocab: Vocab,
    pub names: ResNames,
    pub pools: Vec<Pool>,
    pub nodes: Vec<NodeState>,
    pub classes: Vec<Class>,
    /// Pending pods in queue order (CPU desc, memory desc, creation, UID).
    pub pods: Vec<PodInfo>,
    pub topology: Topology,
    pub options: SchedulingOptions,
}

struct SparseIt {
    name: String,
    reqs: ReqSet,
    offers: Vec<Offer>,
    capacity: Vec<(ResId, i64)>,
    overhead: Vec<(ResId, i64)>,
    exotic: bool,
}

struct SparsePool {
    name: String,
    reqs: ReqSet,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    startup_taints: Vec<Taint>,
    its: Vec<SparseIt>,
    limits: Option<Vec<(ResId, i64)>>,
    node_limit: Option<i64>,
    usage: Option<Vec<(ResId, i64)>>,
}

struct Daemon {
    name: String,
    namespace: String,
    tolerations: Vec<Toleration>,
    /// Tolerations plus a PreferNoSchedule toleration, for NodePool templates.
    tolerations_pns: Vec<Toleration>,
    alternatives: Vec<ReqSet>,
    strict: ReqSet,
    requests: Vec<(ResId, i64)>,
    ports: Vec<HostPort>,
}

/// A pod already on a node (or held on an in-flight NodeClaim), as placement counts it.
struct ExistingPod {
    shape: Rc<ExistingShape>,
    /// Neither deleting nor finished: its requests and ports take room, and topology counts it.
    counted: bool,
}

/// What placement reads of an existing pod, alike for every pod whose spec and template
/// metadata are the same shared values (a workload's replicas, see
/// [`crate::pods::LeanPod`]): a round builds it once per workload instead of once per pod
/// (each a clone of the pod's labels, affinity and tolerations).
struct ExistingShape {
    ns: Sym,
    labels: Vec<(Sym, Sym)>,
    /// Or the quantity that does not parse, an error only for a pod that counts.
    requests: Result<Vec<(ResId, i64)>, String>,
    ports: Vec<HostPort>,
    anti_terms: Vec<PodAffinityTerm>,
    namespace: String,
    daemonset: Option<(String, String)>,
}

impl ExistingShape {
    fn requests(&self) -> &[(ResId, i64)] {
        self.requests.as_deref().unwrap_or_default()
    }
}

/// The shapes built so far this round, by the addresses of the shared spec and template
/// metadata they were built from (the input holds those alive, so no address is reused).
type Shapes = FxHashMap<(usize, usize), Rc<ExistingShape>>;

struct SparseNode {
    name: String,
    host: Sym,
    label_values: FxHashMap<Sym, Sym>,
    reqs: ReqSet,
    taints: Vec<Taint>,
    allocatable: Vec<(ResId, i64)>,
    pods: Vec<ExistingPod>,
    initialized: bool,
}

/// Builds the prepared state.
pub fn prepare(input: &SchedulingInput) -> Result<Prepared, SchedulingError> {
    prepare_with(input, None)
}

/// [`prepare`], taking the pending pods' forms from `forms` (and keeping the ones it builds)
/// when given: a controller prepares round after round for the same pods.
pub fn prepare_with(
    input: &SchedulingInput,
    mut forms: Option<&mut PodForms>,
) -> Result<Prepared, SchedulingError> {
    let mut vocab = Vocab::new();
    let mut names = ResNames::default();
    let mut sparse_pools = Vec::new();
    let mut order: Vec<&super::types::NodePoolInput> = input.node_pools.iter().collect();
    order.sort_by(|a, b| b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name)));
    for np in order {
        sparse_pools.push(sparse_pool(np, &mut vocab, &mut names)?);
    }
    let mut daemons = Vec::with_capacity(input.daemonsets.len());
    for ds in &input.daemonsets {
        let d = daemon(ds, &mut vocab, &mut names).map_err(|reason| {
            let r = pod_ref(ds);
            SchedulingError::InvalidDaemonSet {
                daemonset: format!("{}/{}", r.namespace, r.name),
                reason,
            }
        })?;
        daemons.push(d);
    }
    let mut sparse_nodes = Vec::new();
    let mut shapes = Shapes::default();
    for n in &input.existing_nodes {
        sparse_nodes.push(sparse_node(n, &mut vocab, &mut names, &mut shapes)?);
    }
    let mut pending = Vec::new();
    for p in &input.pods {
        let form = match forms.as_deref_mut() {
            Some(forms) => forms.form(p),
            None => Arc::new(PodForm::of(p)),
        };
        let requests = form.requests(&mut names);
        pending.push((p, form, requests));
    }
    let stride = names.len();
    let pools: Vec<Pool> = sparse_pools
        .into_iter()
        .map(|sp| {
            build_pool(
                sp,
                &daemons,
                stride,
                &input.existing_nodes,
                &vocab,
                &mut names,
            )
        })
        .collect();
    let tolerate_pns = pools
        .iter()
        .any(|p| p.taints.iter().any(|t| t.effect == "PreferNoSchedule"));
    let universe = DomainUniverse {
        // One taint set per pool, then an empty one for domains no pool reaches.
        taint_sets: pools
            .iter()
            .map(|p| p.taints.clone())
            .chain([Vec::new()])
            .collect(),
        ..Default::default()
    };
    let nodes: Vec<NodeState> = sparse_nodes
        .iter()
        .map(|n| node_state(n, &daemons, stride, &vocab))
        .collect();

    let mut builder = ClassBuilder {
        vocab: &mut vocab,
        universe,
        nodes: &sparse_nodes,
        pools: &pools,
        volumes: VolumeIndex::new(&input.volumes),
        namespaces: &input.namespaces,
        topology: Topology::default(),
        classes: Vec::new(),
        memo: FxHashMap::default(),
        options: input.options,
        tolerate_pns,
    };
    builder.existing_inverse_groups();
    let mut pods = Vec::with_capacity(pending.len());
    for (p, form, requests) in pending {
        let class = builder.class_of(p, form.fingerprint);
        let (requests, error) = match requests {
            Ok(r) => (resvec::dense(stride, &r), None),
            Err(q) => (
                vec![0; stride],
                Some(format!("invalid resource quantity {q}")),
            ),
        };
        pods.push((
            p,
            PodInfo {
                form,
                class,
                requests,
                error,
            },
        ));
    }
    builder.link_selections();
    let ClassBuilder {
        topology, classes, ..
    } = builder;
    pods.sort_by(|(pa, a), (pb, b)| {
        b.requests[CPU]
            .cmp(&a.requests[CPU])
            .then_with(|| b.requests[MEMORY].cmp(&a.requests[MEMORY]))
            .then_with(|| creation(pa).cmp(&creation(pb)))
            .then_with(|| a.form.pod_ref.uid.cmp(&b.form.pod_ref.uid))
    });
    Ok(Prepared {
        vocab,
        names,
        pools,
        nodes,
        classes,
        pods: pods.into_iter().map(|(_, p)| p).collect(),
        topology,
        options: input.options,
    })
}

fn creation(p: &impl PodLike) -> Option<k8s_openapi::jiff::Timestamp> {
    p.meta().creation_timestamp.map(|t| t.0)
}

fn sparse_pool(
    np: &super::types::NodePoolInput,
    vocab: &mut Vocab,
    names: &mut ResNames,
) -> Result<SparsePool, SchedulingError> {
    let mut reqs = ReqSet::default();
    for r in &np.requirements {
        let (k, req) = vocab
            .requirement(r)
            .ok_or_else(|| SchedulingError::InvalidNodePool {
                node_pool: np.name.clone(),
                field: format!("spec.template.spec.requirements[{}]", r.key),
                reason: format!(
                    "operator {} needs a single integer value",
                    r.operator.as_str()
                ),
            })?;
        reqs.add(k, req, &vocab.interner);
    }
    let labels_set = vocab.label_set(np.labels.iter());
    reqs.add_all(&labels_set, &vocab.interner);
    let pool_sym = vocab.intern(&np.name);
    reqs.add(vocab.nodepool, Req::single(pool_sym), &vocab.interner);
    let its = np
        .instance_types
        .iter()
        .map(|it| sparse_it(it, vocab, names))
        .collect();
    let (limits, node_limit) = match &np.limits {
        None => (None, None),
        Some(l) => {
            let mut l = l.clone();
            let nodes = l.remove("nodes").map(|q| q.value());
            (Some(names.vector(&l)), nodes)
        }
    };
    let usage = np.usage.as_ref().map(|u| names.vector(u));
    Ok(SparsePool {
        name: np.name.clone(),
        reqs,
        labels: np.labels.clone(),
        taints: np.taints.clone(),
        startup_taints: np.startup_taints.clone(),
        its,
        limits,
        node_limit,
        usage,
    })
}

fn sparse_it(it: &InstanceType, vocab: &mut Vocab, names: &mut ResNames) -> SparseIt {
    let mut reqs = vocab.label_set(it.labels.iter());
    let name = vocab.intern(&it.name);
    reqs.add(vocab.instance_type, Req::single(name), &vocab.interner);
    let offers: Vec<Offer> = it
        .offerings
        .iter()
        .map(|o| Offer {
            zone: vocab.intern(&o.zone),
            zone_id: (!o.zone_id.is_empty()).then(|| vocab.intern(&o.zone_id)),
            capacity_type: vocab.intern(o.capacity_type.as_str()),
            price: o.price,
            available: o.available,
        })
        .collect();
    let zones = offers
        .iter()
        .filter(|o| o.available)
        .map(|o| o.zone)
        .collect();
    let cts = offers
        .iter()
        .filter(|o| o.available)
        .map(|o| o.capacity_type)
        .collect();
    let zone_ids: Vec<Sym> = offers
        .iter()
        .filter(|o| o.available)
        .filter_map(|o| o.zone_id)
        .collect();
    reqs.0
        .retain(|(k, _)| *k != vocab.zone && *k != vocab.capacity_type && *k != vocab.zone_id);
    reqs.add(vocab.zone, Req::is_in(zones), &vocab.interner);
    if !zone_ids.is_empty() {
        reqs.add(vocab.zone_id, Req::is_in(zone_ids), &vocab.interner);
    }
    reqs.add(vocab.capacity_type, Req::is_in(cts), &vocab.interner);
    let capacity = names.vector(&it.capacity);
    let overhead = names.vector(&it.overhead.total());
    let positive = |key: &str| {
        it.labels
            .get(key)
            .and_then(|v| v.parse::<i64>().ok())
            .is_some_and(|n| n > 0)
    };
    let exotic = positive(labels::INSTANCE_GPU_COUNT)
        || positive(labels::INSTANCE_ACCELERATOR_COUNT)
        || it
            .labels
            .get(labels::INSTANCE_SIZE)
            .is_some_and(|s| s.contains("metal"))
        || [
            labels::RESOURCE_NVIDIA_GPU,
            labels::RESOURCE_AMD_GPU,
            labels::RESOURCE_AWS_NEURON,
            labels::RESOURCE_HABANA_GAUDI,
        ]
        .iter()
        .any(|r| it.capacity.get(r).is_some_and(|q| q.signum() > 0));
    SparseIt {
        name: it.name.clone(),
        reqs,
        offers,
        capacity,
        overhead,
        exotic,
    }
}

fn daemon(ds: &Pod, vocab: &mut Vocab, names: &mut ResNames) -> Result<Daemon, String> {
    let spec = ConstraintSpec::of(ds);
    let mut tolerations_pns = spec.tolerations.clone();
    tolerations_pns.push(Toleration {
        operator: Some("Exists".into()),
        effect: Some("PreferNoSchedule".into()),
        ..Toleration::default()
    });
    Ok(Daemon {
        name: ds.metadata.name.clone().unwrap_or_default(),
        namespace: spec.namespace.clone(),
        tolerations: spec.tolerations.clone(),
        tolerations_pns,
        alternatives: required_term_alternatives(&spec, vocab)?,
        strict: spec_requirements(&spec, false, vocab)?,
        requests: pod_requests(ds, names)?,
        ports: spec.host_ports.clone(),
    })
}

fn sparse_node(
    n: &super::types::ExistingNode,
    vocab: &mut Vocab,
    names: &mut ResNames,
    shapes: &mut Shapes,
) -> Result<SparseNode, SchedulingError> {
    let bad = |field: &str| {
        let field = field.to_string();
        let node = n.name.clone();
        move |q: String| SchedulingError::InvalidNode {
            node: node.clone(),
            field: field.clone(),
            reason: format!("invalid quantity {q}"),
        }
    };
    let mut reqs = vocab.label_set(n.labels.iter());
    let host_name = n
        .labels
        .get(labels::HOSTNAME)
        .cloned()
        .unwrap_or_else(|| n.name.clone());
    let host = vocab.intern(&host_name);
    reqs.0.retain(|(k, _)| *k != vocab.hostname);
    reqs.add(vocab.hostname, Req::single(host), &vocab.interner);
    let mut label_values = FxHashMap::default();
    for (k, v) in &n.labels {
        label_values.insert(vocab.intern(k), vocab.intern(v));
    }
    let taints = if n.initialized {
        n.taints.clone()
    } else {
        n.taints
            .iter()
            .filter(|t| !taints::is_known_ephemeral_taint(t))
            .cloned()
            .collect()
    };
    let mut pods = Vec::with_capacity(n.pods.len());
    for p in &n.pods {
        let key = (
            Arc::as_ptr(p.shared_meta()) as usize,
            p.shared_spec().map_or(0, |spec| Arc::as_ptr(spec) as usize),
        );
        let shape = match shapes.get(&key) {
            Some(shape) => Rc::clone(shape),
            None => {
                let shape = Rc::new(existing_shape(p, vocab, names));
                shapes.insert(key, Rc::clone(&shape));
                shape
            }
        };
        let counted = crate::pods::is_active(&**p);
        if counted && let Err(quantity) = &shape.requests {
            return Err(bad("pods")(quantity.clone()));
        }
        pods.push(ExistingPod { shape, counted });
    }
    Ok(SparseNode {
        name: n.name.clone(),
        host,
        label_values,
        reqs,
        taints,
        allocatable: names.vector(&n.allocatable),
        pods,
        initialized: n.initialized,
    })
}

fn existing_shape(p: &LeanPod, vocab: &mut Vocab, names: &mut ResNames) -> ExistingShape {
    let spec = ConstraintSpec::of(p);
    let mut labels: Vec<(Sym, Sym)> = spec
        .labels
        .iter()
        .map(|(k, v)| (vocab.intern(k), vocab.intern(v)))
        .collect();
    labels.sort_unstable();
    let daemonset = p
        .meta()
        .owner_references
        .iter()
        .find(|o| o.kind == "DaemonSet")
        .map(|o| (spec.namespace.clone(), o.name.clone()));
    ExistingShape {
        ns: vocab.intern(&spec.namespace),
        labels,
        requests: pod_requests(p, names),
        ports: spec.host_ports.clone(),
        anti_terms: crate::pods::required_anti_affinity_terms(spec.affinity.as_ref()).to_vec(),
        namespace: spec.namespace,
        daemonset,
    }
}

fn build_pool(
    sp: SparsePool,
    daemons: &[Daemon],
    stride: usize,
    nodes: &[super::types::ExistingNode],
    vocab: &Vocab,
    names: &mut ResNames,
) -> Pool {
    let its: Vec<ItInfo> = sp
        .its
        .into_iter()
        .map(|it| {
            let capacity = resvec::dense(stride, &it.capacity);
            let mut allocatable = capacity.clone();
            resvec::sub_assign(&mut allocatable, &resvec::dense(stride, &it.overhead));
            ItInfo {
                name: it.name,
                reqs: it.reqs,
                offers: it.offers,
                capacity,
                allocatable,
                exotic: it.exotic,
            }
        })
        .collect();
    // Group instance types by the exact set of daemonsets that would run on them.
    let mut group_of: BTreeMap<Vec<usize>, usize> = BTreeMap::new();
    let mut groups: Vec<DaemonGroup> = Vec::new();
    let mut it_group = Vec::with_capacity(its.len());
    for (i, it) in its.iter().enumerate() {
        let compatible: Vec<usize> = daemons
            .iter()
            .enumerate()
            .filter(|(_, d)| daemon_fits_template(d, &sp.reqs, &sp.taints, &it.reqs, vocab))
            .map(|(di, _)| di)
            .collect();
        let gi = *group_of.entry(compatible.clone()).or_insert_with(|| {
            let mut overhead = vec![0; stride];
            let mut ports = Vec::new();
            for di in &compatible {
                resvec::add_assign(
                    &mut overhead,
                    &resvec::dense(stride, &daemons[*di].requests),
                );
                ports.extend(daemons[*di].ports.iter().cloned());
            }
            groups.push(DaemonGroup {
                overhead,
                ports,
                members: Bits::empty(its.len()),
            });
            groups.len() - 1
        });
        groups[gi].members.set(i);
        it_group.push(gi);
    }
    if groups.is_empty() {
        groups.push(DaemonGroup {
            overhead: vec![0; stride],
            ports: Vec::new(),
            members: Bits::empty(0),
        });
    }
    let mut remaining: Vec<Option<i64>> = vec![None; stride];
    if let Some(limits) = &sp.limits {
        for (r, q) in limits {
            remaining[*r] = Some(*q);
        }
        let usage = match &sp.usage {
            Some(u) => resvec::dense(stride, u),
            None => {
                let mut total = vec![0; stride];
                for n in nodes
                    .iter()
                    .filter(|n| n.node_pool.as_deref() == Some(sp.name.as_str()))
                {
                    let cap = names.vector(&n.capacity);
                    resvec::add_assign(&mut total, &resvec::dense(stride, &cap));
                }
                total
            }
        };
        for (r, rem) in remaining.iter_mut().enumerate() {
            if let Some(rem) = rem.as_mut() {
                *rem -= usage.get(r).copied().unwrap_or(0);
            }
        }
    }
    let node_limit = sp.node_limit.map(|l| {
        let used = match &sp.usage {
            Some(_) => 0,
            None => nodes
                .iter()
                .filter(|n| n.node_pool.as_deref() == Some(sp.name.as_str()))
                .count() as i64,
        };
        l - used
    });
    Pool::new(
        sp.name,
        sp.reqs,
        sp.labels,
        sp.taints,
        sp.startup_taints,
        its,
        groups,
        it_group,
        stride,
        remaining,
        node_limit,
        vocab,
    )
}

/// Upstream `isDaemonPodCompatible`: tolerates the template taints (PreferNoSchedule always
/// tolerated), and some required node-affinity term is compatible with the template and
/// intersects the instance type.
fn daemon_fits_template(
    d: &Daemon,
    pool_reqs: &ReqSet,
    taints: &[Taint],
    it_reqs: &ReqSet,
    vocab: &Vocab,
) -> bool {
    if taints::tolerates_with(taints, &d.tolerations_pns, PreferNoSchedule::Consider).is_err() {
        return false;
    }
    d.alternatives.iter().any(|alt| {
        pool_reqs.compatible(alt, vocab).is_ok() && it_reqs.intersects(alt, &vocab.interner).is_ok()
    })
}

fn node_state(n: &SparseNode, daemons: &[Daemon], stride: usize, vocab: &Vocab) -> NodeState {
    let mut avail = resvec::dense(stride, &n.allocatable);
    let mut ports = Vec::new();
    for p in n.pods.iter().filter(|p| p.counted) {
        resvec::sub_assign(&mut avail, &resvec::dense(stride, p.shape.requests()));
        ports.extend(p.shape.ports.iter().cloned());
    }
    // Daemonsets that will run here but have no pod yet still need their room.
    for d in daemons {
        let running = n.pods.iter().any(|p| {
            p.shape
                .daemonset
                .as_ref()
                .is_some_and(|(namespace, name)| *namespace == d.namespace && *name == d.name)
        });
        if running {
            continue;
        }
        let tolerated =
            taints::tolerates_with(&n.taints, &d.tolerations, PreferNoSchedule::Consider).is_ok();
        if tolerated && n.reqs.compatible_strict(&d.strict, &vocab.interner).is_ok() {
            resvec::sub_assign(&mut avail, &resvec::dense(stride, &d.requests));
            ports.extend(d.ports.iter().cloned());
        }
    }
    NodeState {
        name: n.name.clone(),
        reqs: n.reqs.clone(),
        taints: n.taints.clone(),
        avail,
        ports,
        initialized: n.initialized,
        placed: Vec::new(),
    }
}

/// Domains `key` can take: every value the pools' instance types offer (for zones: every
/// zone of the region), plus values the pools' requirements list. A pod's eligible domains
/// come from the pod's requirements, not from the NodePools: a spread over zones counts the
/// zones no NodePool reaches, so a NodePool limited to two of three zones takes two
/// replicas of a `maxSkew: 1` spread, not three. A domain a pool reaches carries that
/// pool's taints (for nodeTaintsPolicy: Honor); one no pool reaches carries none.
fn universe_for(universe: &mut DomainUniverse, pools: &[Pool], key: Sym, vocab: &Vocab) {
    if universe.domains.contains_key(&key) {
        return;
    }
    universe.domains.insert(key, BTreeMap::new());
    let mut unreached = Vec::new();
    for (ts, pool) in pools.iter().enumerate() {
        let pool_req = pool.reqs.get(key);
        let mut seen: Option<&Req> = None;
        for it in &pool.its {
            let Some(offered) = it.reqs.get(key) else {
                continue;
            };
            // Identical requirements across types add nothing new.
            if seen == Some(offered) || offered.complement {
                continue;
            }
            seen = Some(offered);
            for v in &offered.values {
                if pool_req.is_none_or(|r| r.has(*v, &vocab.interner)) {
                    universe.insert(key, *v, ts);
                } else {
                    unreached.push(*v);
                }
            }
        }
        if let Some(r) = pool_req.filter(|r| !r.complement) {
            for v in &r.values {
                universe.insert(key, *v, ts);
            }
        }
    }
    // The last taint set is the empty one `prepare` appends for unreached domains.
    let Some(untainted) = universe.taint_sets.len().checked_sub(1) else {
        return;
    };
    for v in unreached {
        if !universe
            .domains
            .get(&key)
            .is_some_and(|d| d.contains_key(&v))
        {
            universe.insert(key, v, untainted);
        }
    }
}

struct ClassBuilder<'a> {
    vocab: &'a mut Vocab,
    universe: DomainUniverse,
    nodes: &'a [SparseNode],
    pools: &'a [Pool],
    volumes: VolumeIndex<'a>,
    namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    topology: Topology,
    classes: Vec<Class>,
    memo: FxHashMap<u64, Vec<ClassId>>,
    options: SchedulingOptions,
    tolerate_pns: bool,
}

impl ClassBuilder<'_> {
    /// The class of a pending pod whose view has the fingerprint `fp` (from its form), found
    /// without copying its spec when it already exists.
    fn class_of(&mut self, pod: &impl PodLike, fp: u64) -> ClassId {
        let view = SpecView::of(pod);
        if let Some(ids) = self.memo.get(&fp)
            && let Some(id) = ids
                .iter()
                .find(|id| self.classes[**id as usize].spec.view() == view)
        {
            return *id;
        }
        self.class_chain(view.to_owned())
    }

    /// The class of `spec`, building it and its relaxation chain when new.
    fn class_chain(&mut self, spec: ConstraintSpec) -> ClassId {
        let fp = spec.fingerprint();
        if let Some(ids) = self.memo.get(&fp)
            && let Some(id) = ids
                .iter()
                .find(|id| self.classes[**id as usize].spec == spec)
        {
            return *id;
        }
        let id = ClassId::try_from(self.classes.len()).expect("fewer than 2^32 classes");
        let class = self.build(spec.clone());
        self.classes.push(class);
        self.memo.entry(fp).or_default().push(id);
        let mut relaxed = spec;
        if respects(self.options.preference_policy) && relaxed.relax(self.tolerate_pns).is_some() {
            let next = self.class_chain(relaxed);
            self.classes[id as usize].next = Some(next);
        }
        id
    }

    fn build(&mut self, spec: ConstraintSpec) -> Class {
        let ns = self.vocab.intern(&spec.namespace);
        let mut labels: Vec<(Sym, Sym)> = spec
            .labels
            .iter()
            .map(|(k, v)| (self.vocab.intern(k), self.vocab.intern(v)))
            .collect();
        labels.sort_unstable();
        let mut error = None;
        let respect = respects(self.options.preference_policy);
        let reqs = spec_requirements(&spec, respect, self.vocab).unwrap_or_else(|e| {
            error = Some(e);
            ReqSet::default()
        });
        let strict = spec_requirements(&spec, false, self.vocab).unwrap_or_default();
        let volumes = self
            .volumes
            .alternatives(&spec.namespace, &spec.claims, self.vocab)
            .unwrap_or_else(|e| {
                error.get_or_insert(e);
                Vec::new()
            });
        let pool_taint = self
            .pools
            .iter()
            .map(|p| {
                taints::tolerates_with(&p.taints, &spec.tolerations, PreferNoSchedule::Consider)
                    .err()
                    .map(|u| u.to_string())
            })
            .collect();
        let mut class = Class {
            ns,
            labels,
            reqs,
            strict,
            tolerations: spec.tolerations.clone(),
            ports: spec.host_ports.clone(),
            volumes,
            owned: Vec::new(),
            inverse_owned: Vec::new(),
            selected_by: Vec::new(),
            inverse_selected_by: Vec::new(),
            next: None,
            error,
            pool_taint,
            spec,
        };
        self.own_groups(&mut class);
        class
    }

    fn own_groups(&mut self, class: &mut Class) {
        let respect = respects(self.options.preference_policy);
        let spec = class.spec.clone();
        for tsc in &spec.spread {
            if !respect && tsc.when_unsatisfiable != "DoNotSchedule" {
                continue;
            }
            let key = self.vocab.intern(&tsc.topology_key);
            let extra: Vec<(Sym, Sym)> = tsc
                .match_label_keys
                .iter()
                .flatten()
                .filter_map(|k| {
                    spec.labels
                        .get(k)
                        .map(|v| (self.vocab.intern(k), self.vocab.intern(v)))
                })
                .collect();
            let selector = tsc
                .label_selector
                .as_ref()
                .and_then(|s| Selector::compile(s, &extra, self.vocab));
            let mut terms = Vec::new();
            if let Ok(alts) = required_term_alternatives(&spec, self.vocab) {
                terms = alts;
            }
            let filter = NodeFilter {
                terms: terms.into_iter().filter(|t| !t.0.is_empty()).collect(),
                honor_affinity: tsc.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_taints: tsc.node_taints_policy.as_deref() == Some("Honor"),
                tolerations: spec.tolerations.iter().map(TolerationKey::of).collect(),
            };
            let gs = GroupSpec {
                kind: Kind::Spread,
                key,
                max_skew: u32::try_from(tsc.max_skew.max(0)).unwrap_or(0),
                min_domains: tsc
                    .min_domains
                    .map(|m| u32::try_from(m.max(0)).unwrap_or(0)),
                namespaces: Namespaces::Set(vec![class.ns]),
                selector,
                filter: Some(filter),
            };
            let id = self.group(gs, &spec.tolerations);
            class.owned.push(id);
        }
        let Some(affinity) = spec.affinity.as_ref() else {
            return;
        };
        let mut terms: Vec<(Kind, &PodAffinityTerm)> = Vec::new();
        if let Some(a) = &affinity.pod_affinity {
            terms.extend(
                a.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|t| (Kind::Affinity, t)),
            );
            if respect {
                terms.extend(
                    a.preferred_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                        .map(|t| (Kind::Affinity, &t.pod_affinity_term)),
                );
            }
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            terms.extend(
                a.required_during_scheduling_ignored_during_execution
                    .iter()
                    .flatten()
                    .map(|t| (Kind::AntiAffinity, t)),
            );
            if respect {
                terms.extend(
                    a.preferred_during_scheduling_ignored_during_execution
                        .iter()
                        .flatten()
                        .map(|t| (Kind::AntiAffinity, &t.pod_affinity_term)),
                );
            }
        }
        for (kind, term) in terms {
            let gs = self.term_spec(kind, &spec.namespace, term);
            let id = self.group(gs, &spec.tolerations);
            class.owned.push(id);
        }
        for term in affinity.pod_anti_affinity.iter().flat_map(|a| {
            a.required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
        }) {
            let gs = self.term_spec(Kind::AntiAffinity, &spec.namespace, term);
            let id = self.inverse_group(gs);
            class.inverse_owned.push(id);
        }
        class.owned.sort_unstable();
        class.owned.dedup();
    }

    fn term_spec(&mut self, kind: Kind, pod_ns: &str, term: &PodAffinityTerm) -> GroupSpec {
        let key = self.vocab.intern(&term.topology_key);
        let selector = term
            .label_selector
            .as_ref()
            .and_then(|s| Selector::compile(s, &[], self.vocab));
        GroupSpec {
            kind,
            key,
            max_skew: u32::MAX,
            min_domains: None,
            namespaces: self.term_namespaces(
                pod_ns,
                term.namespaces.as_deref(),
                term.namespace_selector.as_ref(),
            ),
            selector,
            filter: None,
        }
    }

    fn term_namespaces(
        &mut self,
        pod_ns: &str,
        names: Option<&[String]>,
        selector: Option<&LabelSelector>,
    ) -> Namespaces {
        let names = names.unwrap_or_default();
        let mut set: Vec<Sym> = names.iter().map(|n| self.vocab.intern(n)).collect();
        match selector {
            None if names.is_empty() => set.push(self.vocab.intern(pod_ns)),
            None => {}
            Some(sel) => {
                let empty = sel.match_labels.as_ref().is_none_or(|m| m.is_empty())
                    && sel.match_expressions.as_ref().is_none_or(|e| e.is_empty());
                if empty {
                    return Namespaces::All;
                }
                if let Some(compiled) = Selector::compile(sel, &[], self.vocab) {
                    for (ns, ns_labels) in self.namespaces {
                        let mut l: Vec<(Sym, Sym)> = ns_labels
                            .iter()
                            .map(|(k, v)| (self.vocab.intern(k), self.vocab.intern(v)))
                            .collect();
                        l.sort_unstable();
                        if compiled.matches(&l) {
                            set.push(self.vocab.intern(ns));
                        }
                    }
                }
            }
        }
        set.sort_unstable();
        set.dedup();
        Namespaces::Set(set)
    }

    /// The regular group for `spec`, counting pods already running when it is new.
    fn group(&mut self, spec: GroupSpec, owner_tolerations: &[Toleration]) -> GroupId {
        universe_for(&mut self.universe, self.pools, spec.key, self.vocab);
        let vocab = &*self.vocab;
        let universe = &self.universe;
        let nodes = self.nodes;
        let (id, _) = self.topology.get_or_create(spec, false, |spec| {
            let honor_taints = spec.filter.as_ref().is_some_and(|f| f.honor_taints);
            let mut g = Group::new(spec.clone(), spec.key == vocab.hostname);
            for d in universe.domains_for(spec.key, honor_taints.then_some(owner_tolerations)) {
                g.register(d, &vocab.interner);
            }
            for n in nodes {
                let counts_here = spec
                    .filter
                    .as_ref()
                    .is_none_or(|f| f.matches(&n.taints, &n.reqs, vocab, true));
                if !counts_here {
                    continue;
                }
                let domain = match n.label_values.get(&spec.key) {
                    Some(d) => *d,
                    None if spec.key == vocab.hostname => n.host,
                    None => continue,
                };
                if !g.is_hostname {
                    g.register(domain, &vocab.interner);
                }
                for p in n.pods.iter().filter(|p| p.counted) {
                    if g.selects(p.shape.ns, &p.shape.labels) {
                        g.record(domain, &vocab.interner);
                    }
                }
            }
            g
        });
        id
    }

    fn inverse_group(&mut self, spec: GroupSpec) -> GroupId {
        universe_for(&mut self.universe, self.pools, spec.key, self.vocab);
        let vocab = &*self.vocab;
        let universe = &self.universe;
        let (id, _) = self.topology.get_or_create(spec, true, |spec| {
            let mut g = Group::new(spec.clone(), spec.key == vocab.hostname);
            for d in universe.domains_for(spec.key, None) {
                g.register(d, &vocab.interner);
            }
            g
        });
        id
    }

    /// Inverse groups from running pods with required anti-affinity, recorded where they run.
    fn existing_inverse_groups(&mut self) {
        let nodes = self.nodes;
        for n in nodes {
            for p in n.pods.iter().filter(|p| p.counted) {
                for term in &p.shape.anti_terms {
                    let spec = self.term_spec(Kind::AntiAffinity, &p.shape.namespace, term);
                    let key = spec.key;
                    let id = self.inverse_group(spec);
                    if let Some(d) = n.label_values.get(&key) {
                        self.topology.inverse[id as usize].record(*d, &self.vocab.interner);
                    }
                }
            }
        }
    }

    /// Which groups select each class's pods.
    fn link_selections(&mut self) {
        for class in &mut self.classes {
            class.selected_by = (0..self.topology.groups.len())
                .filter(|g| self.topology.groups[*g].selects(class.ns, &class.labels))
                .map(|g| g as GroupId)
                .collect();
            class.inverse_selected_by = (0..self.topology.inverse.len())
                .filter(|g| self.topology.inverse[*g].selects(class.ns, &class.labels))
                .map(|g| g as GroupId)
                .collect();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduling::testing::{pod, resources, shared};
    use crate::scheduling::types::ExistingNode;

    fn node_with(name: &str, pods: Vec<Arc<LeanPod>>) -> ExistingNode {
        ExistingNode {
            name: name.into(),
            allocatable: resources(&[("cpu", "8"), ("memory", "16Gi"), ("pods", "110")]),
            pods,
            ..Default::default()
        }
    }

    #[test]
    fn a_workloads_pods_share_one_shape_across_nodes() {
        let web = pod("web")
            .cpu("1")
            .labels(&[("app", "web")])
            .replicas("web", 3);
        let other = pod("db").cpu("2").labels(&[("app", "db")]).build();
        let mut pods = shared(web.into_iter().chain([other]).collect());
        let db = pods.pop().expect("db");
        let (a, b) = (
            node_with("a", pods[..2].to_vec()),
            node_with("b", vec![pods[2].clone(), db]),
        );
        let (mut vocab, mut names, mut shapes) =
            (Vocab::new(), ResNames::default(), Shapes::default());
        let a = sparse_node(&a, &mut vocab, &mut names, &mut shapes).expect("valid node");
        let b = sparse_node(&b, &mut vocab, &mut names, &mut shapes).expect("valid node");
        assert!(Rc::ptr_eq(&a.pods[0].shape, &a.pods[1].shape));
        assert!(
            Rc::ptr_eq(&a.pods[0].shape, &b.pods[0].shape),
            "across nodes too"
        );
        assert!(
            !Rc::ptr_eq(&b.pods[0].shape, &b.pods[1].shape),
            "another workload"
        );
        assert_eq!(shapes.len(), 2);
        let web = vocab.interner.get("web").expect("interned");
        assert!(b.pods[0].shape.labels.iter().any(|(_, v)| *v == web));
        assert_eq!(b.pods[1].shape.requests()[0].1, 2000, "db's own requests");
    }

    #[test]
    fn an_unparsable_request_fails_only_a_pod_that_counts() {
        let bad = || pod("bad").cpu("lots");
        let mut finished = bad().build();
        finished.status = Some(k8s_openapi::api::core::v1::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let finished = Arc::new(LeanPod::from(finished));
        let (mut vocab, mut names, mut shapes) =
            (Vocab::new(), ResNames::default(), Shapes::default());
        let node = node_with("a", vec![finished]);
        assert!(sparse_node(&node, &mut vocab, &mut names, &mut shapes).is_ok());
        let node = node_with("b", vec![bad().lean()]);
        let err = sparse_node(&node, &mut vocab, &mut names, &mut shapes)
            .err()
            .expect("a running pod's requests must parse");
        assert!(err.to_string().contains("lots"), "{err}");
    }
}
