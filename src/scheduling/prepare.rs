//! Turns a [`SchedulingInput`] into the solver's working state: interned requirements, dense
//! resource vectors, NodePools with their instance types and daemonset groups, existing nodes
//! with their remaining room, pod classes with relaxation chains, and topology groups counted
//! from the pods already running. Bad NodePool or instance-type data is an error naming the
//! object and field; a bad pod only fails that pod. What does not depend on the round (pod
//! and node forms) may come from an earlier round; everything is interned afresh, in the same
//! order either way, so a kept form never changes the result.

mod classes;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Taint, Toleration};

use super::SchedulingError;
use super::class::{Class, ClassId, required_term_alternatives, spec_requirements};
use super::forms::{PodForm, PodForms};
use super::intern::{Bits, FxHashMap, Sym};
use super::node_forms::{NodeForm, NodeForms, ShapeForm, ShapeForms};
use super::pod::{ConstraintSpec, HostPort, claim_names, pod_requests};
use super::pool::{DaemonGroup, ItInfo, Offer, Pool};
use super::req::{Req, ReqSet, Vocab};
use super::resvec::{self, CPU, MEMORY, ResId, ResNames};
use super::topology::{DomainUniverse, Topology};
use super::types::InstanceType;
use super::types::{SchedulingInput, SchedulingOptions};
use super::volumes::{Attached, VolumeIndex};
use crate::labels;
use crate::pods::PodLike;
use crate::taints::{self, PreferNoSchedule};
use classes::ClassBuilder;

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
    /// Attachable volumes per CSI driver; empty when the node states no limit.
    pub attach_limits: Vec<(Sym, i64)>,
    /// Volumes attached by its pods, kept only where there are limits to count against.
    pub attached: Attached,
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

/// A workload shape of the pods on existing nodes ([`ShapeForm`]), interned for the round:
/// built once per shape form, so once per workload for every node whose form is kept.
struct ExistingShape {
    form: Arc<ShapeForm>,
    ns: Sym,
    labels: Vec<(Sym, Sym)>,
}

/// The shapes interned so far this round, by the address of their form (held alive by the
/// round's node forms, so no address is reused within it).
type Shapes = FxHashMap<usize, Rc<ExistingShape>>;

/// A node's label values by their keys as written (a topology key names a label as written,
/// deprecated or not), sorted by key: half a hash map's room for a node's few dozen labels.
struct LabelValues(Vec<(Sym, Sym)>);

impl LabelValues {
    fn of(labels: &BTreeMap<String, String>, vocab: &mut Vocab) -> Self {
        let mut pairs: Vec<(Sym, Sym)> = labels
            .iter()
            .map(|(k, v)| (vocab.intern(k), vocab.intern(v)))
            .collect();
        pairs.sort_unstable_by_key(|(k, _)| *k);
        Self(pairs)
    }

    fn get(&self, key: &Sym) -> Option<&Sym> {
        let at = self.0.binary_search_by_key(key, |(k, _)| *k).ok()?;
        Some(&self.0[at].1)
    }
}

struct SparseNode {
    name: String,
    host: Sym,
    label_values: LabelValues,
    reqs: ReqSet,
    taints: Vec<Taint>,
    /// The node's form, kept across rounds.
    form: Arc<NodeForm>,
    /// The form's shapes, interned, each with how many of its pods count.
    shapes: Vec<(Rc<ExistingShape>, u32)>,
    /// Allocatable less the counting pods' requests.
    room: Vec<(ResId, i64)>,
    initialized: bool,
    attach_limits: Vec<(Sym, i64)>,
    attached: Attached,
}

/// Builds the prepared state.
pub fn prepare(input: &SchedulingInput) -> Result<Prepared, SchedulingError> {
    prepare_with(input, None, None)
}

/// [`prepare`], taking the pending pods' forms from `forms` (and keeping the ones it builds)
/// when given, and the existing nodes' from `node_forms` likewise: a controller prepares round
/// after round for the same pods and nodes. The result is the same whatever the caches hold.
pub fn prepare_with(
    input: &SchedulingInput,
    mut forms: Option<&mut PodForms>,
    mut node_forms: Option<&mut NodeForms>,
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
            let r = ds.pod_ref();
            SchedulingError::InvalidDaemonSet {
                daemonset: format!("{}/{}", r.namespace, r.name),
                reason,
            }
        })?;
        daemons.push(d);
    }
    let volumes = VolumeIndex::new(&input.volumes);
    let mut sparse_nodes = Vec::with_capacity(input.existing_nodes.len());
    let (mut shape_forms, mut shapes) = (ShapeForms::default(), Shapes::default());
    for n in &input.existing_nodes {
        let form = match node_forms.as_deref_mut() {
            Some(node_forms) => node_forms.form(n, &mut shape_forms),
            None => Arc::new(NodeForm::of(n, &mut shape_forms, false)),
        };
        let mut node = sparse_node(n, form, &mut vocab, &mut names, &mut shapes)?;
        (node.attach_limits, node.attached) = attachments(n, &volumes, &mut vocab);
        sparse_nodes.push(node);
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
    let mut builder = ClassBuilder {
        vocab: &mut vocab,
        universe,
        nodes: &sparse_nodes,
        pools: &pools,
        volumes,
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
    // Built from the sparse nodes once the classes no longer read them, so that each node's
    // requirements, taints and attach limits move into its state rather than being copied.
    let nodes: Vec<NodeState> = sparse_nodes
        .into_iter()
        .map(|n| node_state(n, &daemons, stride, &vocab))
        .collect();
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
    // Room for the offerings' zone, zone id and capacity type, added below, so that the
    // set is not doubled for them.
    let mut reqs = vocab.label_set_with_room(it.labels.iter(), 3);
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
    form: Arc<NodeForm>,
    vocab: &mut Vocab,
    names: &mut ResNames,
    shapes: &mut Shapes,
) -> Result<SparseNode, SchedulingError> {
    // Room for the hostname: an in-flight NodeClaim's labels have none, and adding it to a
    // full set would double the set.
    let mut reqs = vocab.label_set_with_room(n.labels.iter(), 1);
    let host_name = n
        .labels
        .get(labels::HOSTNAME)
        .cloned()
        .unwrap_or_else(|| n.name.clone());
    let host = vocab.intern(&host_name);
    reqs.0.retain(|(k, _)| *k != vocab.hostname);
    reqs.add(vocab.hostname, Req::single(host), &vocab.interner);
    let label_values = LabelValues::of(&n.labels, vocab);
    let taints = if n.initialized {
        n.taints.clone()
    } else {
        n.taints
            .iter()
            .filter(|t| !taints::is_known_ephemeral_taint(t))
            .cloned()
            .collect()
    };
    let mut listed = Vec::with_capacity(form.shapes.len());
    for (shape_form, counted) in &form.shapes {
        let key = Arc::as_ptr(shape_form) as usize;
        let shape = match shapes.get(&key) {
            Some(shape) => Rc::clone(shape),
            None => {
                let shape = Rc::new(existing_shape(shape_form, vocab, names));
                shapes.insert(key, Rc::clone(&shape));
                shape
            }
        };
        listed.push((shape, *counted));
    }
    if let Some(quantity) = &form.bad {
        return Err(SchedulingError::InvalidNode {
            node: n.name.clone(),
            field: "pods".into(),
            reason: format!("invalid quantity {quantity}"),
        });
    }
    // The room lists the allocatable names first, in their order: registering them here is
    // registering the allocatable, as a node's pods and then its allocatable are met.
    let room = form
        .room
        .iter()
        .map(|(name, value)| (names.id(name), *value))
        .collect();
    Ok(SparseNode {
        name: n.name.clone(),
        host,
        label_values,
        reqs,
        taints,
        form,
        shapes: listed,
        room,
        initialized: n.initialized,
        attach_limits: Vec::new(),
        attached: Attached::new(),
    })
}

/// Interns a shape form: its labels, then its namespace, then its resource names, in the
/// order a pod's own are met.
fn existing_shape(form: &Arc<ShapeForm>, vocab: &mut Vocab, names: &mut ResNames) -> ExistingShape {
    let mut labels: Vec<(Sym, Sym)> = form
        .labels
        .iter()
        .map(|(k, v)| (vocab.intern(k), vocab.intern(v)))
        .collect();
    labels.sort_unstable();
    let ns = vocab.intern(&form.namespace);
    for name in &form.names {
        names.id(name);
    }
    ExistingShape {
        form: Arc::clone(form),
        ns,
        labels,
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

fn node_state(n: SparseNode, daemons: &[Daemon], stride: usize, vocab: &Vocab) -> NodeState {
    let mut avail = resvec::dense(stride, &n.room);
    let mut ports = n.form.ports.clone();
    // Daemonsets that will run here but have no pod yet still need their room.
    for d in daemons {
        let running = n.shapes.iter().any(|(shape, _)| {
            shape
                .form
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
        name: n.name,
        reqs: n.reqs,
        taints: n.taints,
        avail,
        ports,
        initialized: n.initialized,
        placed: Vec::new(),
        attach_limits: n.attach_limits,
        attached: n.attached,
    }
}

/// A node's volume attach limits, interned, and the volumes its counted pods attach (only
/// where a limit makes them matter: most nodes state none).
fn attachments(
    n: &super::types::ExistingNode,
    volumes: &VolumeIndex<'_>,
    vocab: &mut Vocab,
) -> (Vec<(Sym, i64)>, Attached) {
    if n.volume_limits.is_empty() {
        return (Vec::new(), Attached::new());
    }
    let limits = n
        .volume_limits
        .iter()
        .map(|(driver, limit)| (vocab.intern(driver), *limit))
        .collect();
    let mut attached = Attached::new();
    for pod in n.pods.iter().filter(|p| crate::pods::is_active(&***p)) {
        let namespace = pod.meta().namespace.unwrap_or("default");
        for volume in volumes.attachments(namespace, &claim_names(&**pod), vocab) {
            if !attached.contains(&volume) {
                attached.push(volume);
            }
        }
    }
    (limits, attached)
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
        for it in pool.its.iter() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pods::LeanPod;
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

    /// A round's state for preparing nodes one by one.
    #[derive(Default)]
    struct Round {
        forms: NodeForms,
        shape_forms: ShapeForms,
        vocab: Vocab,
        names: ResNames,
        shapes: Shapes,
    }

    impl Round {
        fn node(&mut self, n: &ExistingNode) -> Result<SparseNode, SchedulingError> {
            let form = self.forms.form(n, &mut self.shape_forms);
            sparse_node(n, form, &mut self.vocab, &mut self.names, &mut self.shapes)
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
        let mut round = Round::default();
        let a = round.node(&a).expect("valid node");
        let b = round.node(&b).expect("valid node");
        assert_eq!(a.shapes.len(), 1, "two replicas, one shape");
        assert_eq!(a.shapes[0].1, 2, "both count");
        assert!(
            Rc::ptr_eq(&a.shapes[0].0, &b.shapes[0].0),
            "across nodes too"
        );
        assert!(
            !Rc::ptr_eq(&b.shapes[0].0, &b.shapes[1].0),
            "another workload"
        );
        assert_eq!(round.shapes.len(), 2);
        assert_eq!(round.shape_forms.len(), 2);
        let web = round.vocab.interner.get("web").expect("interned");
        assert!(b.shapes[0].0.labels.iter().any(|(_, v)| *v == web));
        let cpu_left = |n: &SparseNode| n.room.iter().find(|(r, _)| *r == CPU).map(|(_, v)| *v);
        assert_eq!(cpu_left(&a), Some(6000), "8 cores less two web replicas");
        assert_eq!(cpu_left(&b), Some(5000), "less a web replica and db");
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
        let mut round = Round::default();
        let node = node_with("a", vec![finished]);
        let a = round.node(&node).expect("a finished pod does not count");
        assert_eq!(a.shapes[0].1, 0, "listed, not counted");
        let node = node_with("b", vec![bad().lean()]);
        let err = round
            .node(&node)
            .err()
            .expect("a running pod's requests must parse");
        assert!(err.to_string().contains("lots"), "{err}");
    }
}
