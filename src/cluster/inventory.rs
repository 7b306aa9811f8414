//! Sorting the objects of the input manifests into what a plan needs: pods (given, and
//! expanded from their workload controllers), daemonset pods, nodes, NodeClaims, NodePools,
//! EC2NodeClasses, disruption budgets, volumes and namespaces. Each object is decoded and
//! checked as the API server would check it; every problem found, in every object, is
//! collected so that one run reports them all. Objects of other kinds are listed as ignored.
//! Workloads add only the pods their controllers are missing (see `adoption`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, PodTemplate, PodTemplateSpec,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::adoption::{self, Workload};
use super::decode::decode;
use super::nodeclass::{self, ControllerSettings};
use super::workloads::{self, DEFAULT_NAMESPACE, Expansion};
use super::{FieldError, ObjectProblem, checks};
use crate::api::{CapacityBuffer, EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use crate::manifest::Object;
use crate::pods::{LeanPod, PodInterner};
use crate::validation::{self, Verdict};

/// The input of a plan, by kind. Objects appear once: a later object of the same kind,
/// namespace and name replaces an earlier one, as a later `kubectl apply` would.
#[derive(Debug, Default, Clone)]
pub struct Inventory {
    /// Every pod: given ones and those workload controllers would create, bound or pending;
    /// without what no plan decision reads (see `lean`). Shared: the snapshot and the
    /// controller's round point at these pods rather than copy them.
    pub pods: Vec<Arc<LeanPod>>,
    /// One pod per DaemonSet, as the DaemonSet would run it on each node.
    pub daemon_pods: Vec<Pod>,
    /// Nodes and NodeClaims are shared too: the controller's stores hold them in `Arc`s, and
    /// a round or a disruption snapshot points at them instead of copying each.
    pub nodes: Vec<Arc<Node>>,
    pub node_claims: Vec<Arc<NodeClaim>>,
    pub node_pools: Vec<NodePool>,
    pub node_classes: Vec<EC2NodeClass>,
    pub disruption_budgets: Vec<PodDisruptionBudget>,
    /// Given claims and those StatefulSets create from their volumeClaimTemplates.
    pub claims: Vec<PersistentVolumeClaim>,
    pub volumes: Vec<PersistentVolume>,
    pub storage_classes: Vec<StorageClass>,
    /// Each Node's CSI drivers and their volume attach limits (a kubelet writes them).
    pub csi_nodes: Vec<CSINode>,
    pub namespaces: Vec<Namespace>,
    /// NodeOverlays (alpha): applied to each NodePool's instance types by the snapshot.
    pub node_overlays: Vec<NodeOverlay>,
    /// CapacityBuffers' virtual pods (alpha), pending in every snapshot and never written
    /// anywhere (see `crate::buffer`).
    pub buffer_pods: Vec<Arc<LeanPod>>,
    /// `FILE: KIND/NAME` of each object of a kind a plan does not read.
    pub ignored: Vec<String>,
    /// Things worth telling the user that do not make the input invalid.
    pub warnings: Vec<String>,
}

/// Reads every object into an [`Inventory`], or returns every problem found.
pub fn inventory(objects: &[Object]) -> Result<Inventory, Vec<ObjectProblem>> {
    let mut builder = Builder::default();
    for object in objects {
        builder.add(object.clone());
    }
    builder.finish()
}

/// Objects keyed by kind, namespace and name, remembering the order they first appeared in.
struct Keyed<T> {
    items: Vec<T>,
    index: HashMap<(String, String), usize>,
}

impl<T> Default for Keyed<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            index: HashMap::new(),
        }
    }
}

impl<T> Keyed<T> {
    /// Inserts or replaces; returns whether an earlier object was replaced.
    fn put(&mut self, namespace: &str, name: &str, item: T) -> bool {
        match self.index.get(&(namespace.to_string(), name.to_string())) {
            Some(&position) => {
                self.items[position] = item;
                true
            }
            None => {
                self.index
                    .insert((namespace.to_string(), name.to_string()), self.items.len());
                self.items.push(item);
                false
            }
        }
    }
}

/// Builds an [`Inventory`] one object at a time, so that a manifest stream is read without
/// holding its objects: each is decoded into its typed form and dropped.
#[derive(Default)]
pub struct Builder {
    pods: Keyed<Arc<LeanPod>>,
    /// One spec and one shared metadata per distinct one, shared by the pods that have it.
    interner: PodInterner,
    daemon_pods: Keyed<Pod>,
    nodes: Keyed<Node>,
    node_claims: Keyed<NodeClaim>,
    node_pools: Keyed<NodePool>,
    node_classes: Keyed<EC2NodeClass>,
    disruption_budgets: Keyed<PodDisruptionBudget>,
    claims: Keyed<PersistentVolumeClaim>,
    volumes: Keyed<PersistentVolume>,
    storage_classes: Keyed<StorageClass>,
    csi_nodes: Keyed<CSINode>,
    namespaces: Keyed<Namespace>,
    node_overlays: Keyed<NodeOverlay>,
    capacity_buffers: Keyed<CapacityBuffer>,
    pod_templates: Keyed<PodTemplate>,
    /// Workload expansions, placed once every given pod is known (see [`adoption`]).
    deferred: Vec<Deferred>,
    ignored: Vec<String>,
    warnings: Vec<String>,
    problems: Vec<ObjectProblem>,
}

struct Deferred {
    file: String,
    object: String,
    workload: Workload,
    source: Source,
}

/// A workload object kept until every given pod is known. Its pods are made only then, one
/// workload at a time, and only those its controller is missing are kept: a dump's running
/// replicas are given as pods, and building them all again up front would hold a second
/// copy of every one while the stream is read.
#[derive(Clone)]
enum Source {
    Deployment(Deployment),
    ReplicaSet(ReplicaSet),
    StatefulSet(StatefulSet),
    Job(Job),
}

impl Source {
    /// The workload's namespace and name.
    fn source_name(&self) -> (String, String) {
        namespaced_name(match self {
            Self::Deployment(d) => &d.metadata,
            Self::ReplicaSet(r) => &r.metadata,
            Self::StatefulSet(s) => &s.metadata,
            Self::Job(j) => &j.metadata,
        })
    }

    fn expand(&self) -> Result<Expansion, FieldError> {
        match self {
            Self::Deployment(deployment) => workloads::expand_deployment(deployment),
            Self::ReplicaSet(replica_set) => workloads::expand_replica_set(replica_set),
            Self::StatefulSet(stateful_set) => workloads::expand_stateful_set(stateful_set),
            Self::Job(job) => workloads::expand_job(job),
        }
    }

    /// The checks [`Source::expand`] makes, without making the pods: none of them depends
    /// on how many replicas there are (a negative count is left to fail).
    fn check(&self) -> Result<(), FieldError> {
        let mut empty = self.clone();
        let count = match &mut empty {
            Self::Deployment(d) => d.spec.as_mut().map(|s| &mut s.replicas),
            Self::ReplicaSet(r) => r.spec.as_mut().map(|s| &mut s.replicas),
            Self::StatefulSet(s) => s.spec.as_mut().map(|s| &mut s.replicas),
            Self::Job(j) => j.spec.as_mut().map(|s| &mut s.parallelism),
        };
        if let Some(count) = count
            && count.is_none_or(|n| n >= 0)
        {
            *count = Some(0);
        }
        empty.expand().map(drop)
    }
}

/// Where an object came from, for messages.
struct Origin<'a> {
    file: &'a str,
    object: String,
}

impl Origin<'_> {
    fn problem(&self, error: FieldError) -> ObjectProblem {
        ObjectProblem {
            file: self.file.to_string(),
            object: self.object.clone(),
            path: error.path,
            message: error.message,
        }
    }
}

impl Builder {
    /// Reads one object; its problems are kept for [`Builder::finish`].
    pub fn add(&mut self, object: Object) {
        if let Err(problems) = self.add_object(object) {
            self.problems.extend(problems);
        }
    }

    /// The inventory, or every problem found in every object.
    pub fn finish(mut self) -> Result<Inventory, Vec<ObjectProblem>> {
        let buffer_pods = self.buffer_pods();
        self.expand_deferred();
        if self.problems.is_empty() {
            let mut inventory = self.into_inventory();
            inventory.buffer_pods = buffer_pods;
            Ok(inventory)
        } else {
            Err(self.problems)
        }
    }

    fn add_object(&mut self, object: Object) -> Result<(), Vec<ObjectProblem>> {
        let file = object.source.file.clone();
        let origin = Origin {
            file: &file,
            object: object.display_name(),
        };
        let single = |error: FieldError| vec![origin.problem(error)];
        let group = object.group().to_owned();
        match (group.as_str(), object.kind.as_str()) {
            ("", "Pod") => {
                let pod = match object.pod {
                    Some(pod) => given_typed_pod(*pod),
                    None => given_pod(object.value),
                }
                .map_err(single)?;
                self.put_pod(pod, &origin);
            }
            ("apps", "Deployment") => {
                let deployment: Deployment = workload(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&deployment.metadata);
                let selector = deployment
                    .spec
                    .as_ref()
                    .map(|spec| spec.selector.clone())
                    .unwrap_or_default();
                let workload = Workload::Deployment {
                    namespace,
                    name,
                    selector,
                };
                self.defer(workload, Source::Deployment(deployment), &origin)
                    .map_err(single)?;
            }
            ("apps", "ReplicaSet") => {
                let replica_set: ReplicaSet = workload(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&replica_set.metadata);
                let deployment = adoption::owning_deployment(
                    replica_set
                        .metadata
                        .owner_references
                        .as_deref()
                        .unwrap_or_default(),
                );
                let workload = Workload::ReplicaSet {
                    namespace,
                    name,
                    deployment,
                };
                self.defer(workload, Source::ReplicaSet(replica_set), &origin)
                    .map_err(single)?;
            }
            ("apps", "StatefulSet") => {
                let stateful_set: StatefulSet = workload(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&stateful_set.metadata);
                let workload = Workload::StatefulSet { namespace, name };
                self.defer(workload, Source::StatefulSet(stateful_set), &origin)
                    .map_err(single)?;
            }
            ("batch", "Job") => {
                let job: Job = workload(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&job.metadata);
                self.defer(Workload::Job { namespace, name }, Source::Job(job), &origin)
                    .map_err(single)?;
            }
            ("apps", "DaemonSet") => {
                let daemon_set: DaemonSet = workload(object.value).map_err(single)?;
                let pod = workloads::daemon_pod(&daemon_set).map_err(single)?;
                let (namespace, name) = namespaced_name(&pod.metadata);
                let replaced = self.daemon_pods.put(&namespace, &name, pod);
                self.note_replacement(replaced, &origin);
            }
            ("", "Node") => {
                let node: Node = named(object.value).map_err(single)?;
                node_resources(&node).map_err(single)?;
                let name = node.metadata.name.clone().unwrap_or_default();
                let replaced = self.nodes.put("", &name, node);
                self.note_replacement(replaced, &origin);
            }
            ("", "PodTemplate") => {
                let template: PodTemplate = namespaced(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&template.metadata);
                let replaced = self.pod_templates.put(&namespace, &name, template);
                self.note_replacement(replaced, &origin);
            }
            ("", "Namespace") => {
                let namespace: Namespace = named(object.value).map_err(single)?;
                let name = namespace.metadata.name.clone().unwrap_or_default();
                let replaced = self.namespaces.put("", &name, namespace);
                self.note_replacement(replaced, &origin);
            }
            ("", "PersistentVolumeClaim") => {
                let claim: PersistentVolumeClaim = namespaced(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&claim.metadata);
                let replaced = self.claims.put(&namespace, &name, claim);
                self.note_replacement(replaced, &origin);
            }
            ("", "PersistentVolume") => {
                let volume: PersistentVolume = named(object.value).map_err(single)?;
                let name = volume.metadata.name.clone().unwrap_or_default();
                let replaced = self.volumes.put("", &name, volume);
                self.note_replacement(replaced, &origin);
            }
            ("storage.k8s.io", "StorageClass") => {
                let class: StorageClass = named(object.value).map_err(single)?;
                let name = class.metadata.name.clone().unwrap_or_default();
                let replaced = self.storage_classes.put("", &name, class);
                self.note_replacement(replaced, &origin);
            }
            ("storage.k8s.io", "CSINode") => {
                let node: CSINode = named(object.value).map_err(single)?;
                let name = node.metadata.name.clone().unwrap_or_default();
                let replaced = self.csi_nodes.put("", &name, node);
                self.note_replacement(replaced, &origin);
            }
            ("policy", "PodDisruptionBudget") => {
                let budget: PodDisruptionBudget = namespaced(object.value).map_err(single)?;
                let (namespace, name) = namespaced_name(&budget.metadata);
                let replaced = self.disruption_budgets.put(&namespace, &name, budget);
                self.note_replacement(replaced, &origin);
            }
            _ => return self.add_karpenter_object(&object, &origin),
        }
        Ok(())
    }

    /// Karpenter objects go through `kerf validate`'s rules; anything else is ignored.
    fn add_karpenter_object(
        &mut self,
        object: &Object,
        origin: &Origin,
    ) -> Result<(), Vec<ObjectProblem>> {
        let problems = |list: Vec<validation::Problem>| {
            list.into_iter()
                .map(|problem| origin.problem(FieldError::new(problem.path, problem.message)))
                .collect::<Vec<_>>()
        };
        let convert = |error: FieldError| vec![origin.problem(error)];
        let name = object.name.clone().unwrap_or_default();
        let replaced = match validation::validate_object(object) {
            Verdict::Ignored => {
                self.ignored
                    .push(format!("{}: {}", origin.file, origin.object));
                return Ok(());
            }
            Verdict::Invalid(list) => return Err(problems(list)),
            Verdict::Valid(validation::KarpenterKind::NodePool) => {
                self.node_pools
                    .put("", &name, decode(object.value.clone()).map_err(convert)?)
            }
            Verdict::Valid(validation::KarpenterKind::NodeClaim) => {
                let claim: NodeClaim = decode(object.value.clone()).map_err(convert)?;
                node_claim_resources(&claim).map_err(convert)?;
                self.node_claims.put("", &name, claim)
            }
            Verdict::Valid(validation::KarpenterKind::NodeOverlay) => {
                self.node_overlays
                    .put("", &name, decode(object.value.clone()).map_err(convert)?)
            }
            Verdict::Valid(validation::KarpenterKind::CapacityBuffer) => {
                let buffer: CapacityBuffer = decode(object.value.clone()).map_err(convert)?;
                let namespace = buffer.namespace().to_owned();
                self.capacity_buffers.put(&namespace, &name, buffer)
            }
            Verdict::Valid(validation::KarpenterKind::EC2NodeClass) => {
                let class: EC2NodeClass = decode(object.value.clone()).map_err(convert)?;
                // Its sizing settings are needed for every pool that uses it: refuse it here,
                // where the file is known, rather than while planning.
                nodeclass::allocatable_settings(&class, ControllerSettings::default())
                    .map_err(convert)?;
                self.node_classes.put("", &name, class)
            }
        };
        self.note_replacement(replaced, origin);
        Ok(())
    }

    fn put_pod(&mut self, mut pod: Pod, origin: &Origin) {
        lean::keep_what_plans_read(&mut pod);
        let (namespace, name) = namespaced_name(&pod.metadata);
        let replaced = self.pods.put(
            &namespace,
            &name,
            Arc::new(LeanPod::new(pod, &mut self.interner)),
        );
        if replaced {
            self.warnings.push(format!(
                "{}: {}: pod {namespace}/{name} appears more than once; the last one is used",
                origin.file, origin.object
            ));
        }
    }

    fn defer(
        &mut self,
        workload: Workload,
        source: Source,
        origin: &Origin,
    ) -> Result<(), FieldError> {
        source.check()?;
        self.deferred.push(Deferred {
            file: origin.file.to_string(),
            object: origin.object.clone(),
            workload,
            source,
        });
        Ok(())
    }

    /// The CapacityBuffers' virtual pods, each buffer's shape read from the input's
    /// PodTemplate or workload (`scalableRef`) as the buffer controller reads the API's; a
    /// buffer whose reference is not in the input is warned about and left out.
    fn buffer_pods(&mut self) -> Vec<Arc<LeanPod>> {
        let mut pods = Vec::new();
        for buffer in &self.capacity_buffers.items {
            let namespace = buffer.namespace().to_owned();
            let resolved = match (&buffer.spec.pod_template_ref, &buffer.spec.scalable_ref) {
                (Some(reference), _) => self
                    .pod_templates
                    .index
                    .get(&(namespace.clone(), reference.name.clone()))
                    .map(|&i| {
                        let template = &self.pod_templates.items[i];
                        (template.template.clone().unwrap_or_default(), None)
                    }),
                (None, Some(reference)) => self.deferred.iter().find_map(|d| {
                    let (template, replicas) = workload_template(&d.source, &reference.kind)?;
                    let (ns, name) = d.source.source_name();
                    (ns == namespace && name == reference.name)
                        .then_some((template, Some(replicas)))
                }),
                (None, None) => None,
            };
            let Some((template, workload_replicas)) = resolved else {
                self.warnings.push(format!(
                    "CapacityBuffer {namespace}/{}: its podTemplateRef or scalableRef is not in the input; it reserves nothing",
                    buffer.name()
                ));
                continue;
            };
            let requests = template_requests(&template);
            let count = crate::buffer::replicas(&buffer.spec, &requests, workload_replicas);
            let uid = buffer
                .metadata
                .uid
                .clone()
                .unwrap_or_else(|| format!("{namespace}/{}", buffer.name()));
            let reference = crate::buffer::BufferRef {
                namespace: &namespace,
                name: buffer.name(),
                uid: &uid,
            };
            for pod in crate::buffer::virtual_pods(&reference, &template, count) {
                pods.push(Arc::new(LeanPod::new(pod, &mut self.interner)));
            }
        }
        pods
    }

    /// Workloads create their missing pods once every given pod is known.
    fn expand_deferred(&mut self) {
        let deployments: HashSet<(String, String)> = self
            .deferred
            .iter()
            .filter_map(|d| match &d.workload {
                Workload::Deployment {
                    namespace, name, ..
                } => Some((namespace.clone(), name.clone())),
                _ => None,
            })
            .collect();
        let deferred = std::mem::take(&mut self.deferred);
        let given = adoption::Given::new(self.pods.items.iter().map(|p| &**p));
        let mut missing: Vec<(Expansion, Origin)> = Vec::new();
        for d in &deferred {
            let origin = Origin {
                file: &d.file,
                object: d.object.clone(),
            };
            // `defer` checked what `expand` checks; an error here is still reported.
            match d.source.expand() {
                Ok(expansion) => {
                    let expansion = adoption::missing(&d.workload, expansion, &given, &deployments);
                    missing.push((lean::expansion(expansion), origin));
                }
                Err(error) => self.problems.push(origin.problem(error)),
            }
        }
        for (expansion, origin) in missing {
            self.put_expansion(expansion, &origin);
        }
    }

    fn put_expansion(&mut self, expansion: Expansion, origin: &Origin) {
        for pod in expansion.pods {
            self.put_pod(pod, origin);
        }
        for claim in expansion.claims {
            let (namespace, name) = namespaced_name(&claim.metadata);
            // A claim given in the input is the existing one: the StatefulSet controller reuses it.
            if !self
                .claims
                .index
                .contains_key(&(namespace.clone(), name.clone()))
            {
                self.claims.put(&namespace, &name, claim);
            }
        }
    }

    fn note_replacement(&mut self, replaced: bool, origin: &Origin) {
        if replaced {
            self.warnings.push(format!(
                "{}: {}: appears more than once; the last one is used",
                origin.file, origin.object
            ));
        }
    }

    fn into_inventory(self) -> Inventory {
        Inventory {
            pods: self.pods.items,
            daemon_pods: self.daemon_pods.items,
            nodes: self.nodes.items.into_iter().map(Arc::new).collect(),
            node_claims: self.node_claims.items.into_iter().map(Arc::new).collect(),
            node_pools: self.node_pools.items,
            node_classes: self.node_classes.items,
            disruption_budgets: self.disruption_budgets.items,
            claims: self.claims.items,
            volumes: self.volumes.items,
            storage_classes: self.storage_classes.items,
            csi_nodes: self.csi_nodes.items,
            namespaces: self.namespaces.items,
            node_overlays: self.node_overlays.items,
            buffer_pods: Vec::new(),
            ignored: self.ignored,
            warnings: self.warnings,
        }
    }
}

/// A workload's pod template and replicas, if it is of `kind`.
fn workload_template(source: &Source, kind: &str) -> Option<(PodTemplateSpec, i32)> {
    match (source, kind) {
        (Source::Deployment(d), "Deployment") => {
            let spec = d.spec.as_ref()?;
            Some((spec.template.clone(), spec.replicas.unwrap_or(1)))
        }
        (Source::StatefulSet(s), "StatefulSet") => {
            let spec = s.spec.as_ref()?;
            Some((spec.template.clone(), spec.replicas.unwrap_or(1)))
        }
        (Source::ReplicaSet(r), "ReplicaSet") => {
            let spec = r.spec.as_ref()?;
            Some((spec.template.clone()?, spec.replicas.unwrap_or(1)))
        }
        _ => None,
    }
}

/// One pod of `template`'s requests, as the scheduler counts them.
fn template_requests(template: &PodTemplateSpec) -> crate::resources::Resources {
    let pod = Pod {
        spec: template.spec.clone(),
        ..Pod::default()
    };
    crate::scheduling::resource_requests(&pod).unwrap_or_default()
}

fn namespaced_name(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> (String, String) {
    (
        metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string()),
        metadata.name.clone().unwrap_or_default(),
    )
}

/// Capacity and allocatable decide what fits on a node: they must be quantities.
fn node_resources(node: &Node) -> Result<(), FieldError> {
    let Some(status) = &node.status else {
        return Ok(());
    };
    if let Some(capacity) = &status.capacity {
        checks::resource_list(capacity, "status.capacity")?;
    }
    if let Some(allocatable) = &status.allocatable {
        checks::resource_list(allocatable, "status.allocatable")?;
    }
    Ok(())
}

/// `kerf validate` leaves a NodeClaim's status alone (the API server ignores it on create);
/// an in-flight NodeClaim's resources are read from it, so they are checked here.
fn node_claim_resources(claim: &NodeClaim) -> Result<(), FieldError> {
    let Some(status) = &claim.status else {
        return Ok(());
    };
    checks::resource_list(&status.capacity, "status.capacity")?;
    checks::resource_list(&status.allocatable, "status.allocatable")
}

/// A pod given as such: named, in its namespace (default `default`), checked, with the
/// API server's request defaulting applied and a stable UID when it has none.
fn given_pod(value: Value) -> Result<Pod, FieldError> {
    require(&value, &["spec"])?;
    checked_pod(namespaced(value)?)
}

/// [`given_pod`] for a pod the reader decoded itself (see [`Object::pod`]): the same checks,
/// in the same order, on the typed form.
fn given_typed_pod(mut pod: Pod) -> Result<Pod, FieldError> {
    if pod.spec.is_none() {
        return Err(FieldError::required("spec"));
    }
    let metadata = &mut pod.metadata;
    if metadata.name.as_deref().is_none_or(str::is_empty) {
        return Err(FieldError::required("metadata.name"));
    }
    if metadata.namespace.as_deref().is_none_or(str::is_empty) {
        metadata.namespace = Some(DEFAULT_NAMESPACE.to_owned());
    }
    checked_pod(pod)
}

/// A decoded pod's spec checked, its requests defaulted and its UID set.
fn checked_pod(mut pod: Pod) -> Result<Pod, FieldError> {
    let spec = pod
        .spec
        .as_mut()
        .ok_or_else(|| FieldError::required("spec"))?;
    checks::pod_spec(spec, "spec")?;
    workloads::default_requests_from_limits(spec);
    if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
        let (namespace, name) = namespaced_name(&pod.metadata);
        pod.metadata.uid = Some(format!("kerf-plan/Pod/{namespace}/{name}"));
    }
    Ok(pod)
}

/// A workload controller: its spec and pod template must be present. A missing selector
/// defaults to the template's labels, as the pre-`apps/v1` APIs did; planning loses nothing by
/// accepting it, and an explicit selector is still held to selecting its template.
fn workload<T: DeserializeOwned>(mut value: Value) -> Result<T, FieldError> {
    require(&value, &["spec", "template"])?;
    let spec = &mut value["spec"];
    if spec.get("selector").is_none_or(Value::is_null)
        && let Some(labels) = spec["template"].pointer("/metadata/labels").cloned()
    {
        spec["selector"] = serde_json::json!({ "matchLabels": labels });
    }
    named(value)
}

/// An object that must have a name.
fn named<T: DeserializeOwned>(value: Value) -> Result<T, FieldError> {
    let name = value.pointer("/metadata/name").and_then(Value::as_str);
    if name.is_none_or(str::is_empty) {
        return Err(FieldError::required("metadata.name"));
    }
    decode(value)
}

/// A named object in a namespace, `default` when it names none.
fn namespaced<T: DeserializeOwned>(mut value: Value) -> Result<T, FieldError> {
    if value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
        && let Some(metadata) = value.get_mut("metadata").and_then(Value::as_object_mut)
    {
        metadata.insert("namespace".into(), DEFAULT_NAMESPACE.into());
    }
    named(value)
}

/// Each prefix of `path` must be an object: the API server rejects the object otherwise.
fn require(value: &Value, path: &[&str]) -> Result<(), FieldError> {
    let mut current = value;
    for (depth, field) in path.iter().enumerate() {
        let here = path[..=depth].join(".");
        current = match current.get(*field) {
            None | Some(Value::Null) => return Err(FieldError::required(here)),
            Some(inner @ Value::Object(_)) => inner,
            Some(other) => {
                return Err(FieldError::new(
                    here,
                    format!(
                        "must be an object, not {}",
                        crate::manifest::json_type(other)
                    ),
                ));
            }
        };
    }
    Ok(())
}

mod lean;
#[cfg(test)]
mod tests;
