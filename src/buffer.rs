//! CapacityBuffer as a pure expansion: how many placeholder ("virtual") pods a buffer wants
//! ([`replicas`], cluster-autoscaler's rule as upstream Karpenter applies it: the larger of
//! `replicas` and `percentage` of the workload, capped by what fits in `limits`, or `limits`
//! alone) and the pods themselves ([`virtual_pods`]). Virtual pods exist only inside the
//! scheduling simulation: they are appended to the pending pods of a provisioning round or a
//! consolidation simulation, so room is planned for them and kept, and are never written to
//! the API. They carry upstream's annotations, naming their buffer, and the template's labels
//! so affinity and spread constraints see them; volumes needing a claim are dropped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodCondition, PodSpec, PodStatus, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::api::CapacityBufferSpec;
use crate::pods::PodLike;
use crate::resources::{Quantity, Resources};

/// Marks a virtual pod (upstream's annotation).
pub const FAKE_POD_ANNOTATION: &str = "karpenter.sh/capacity-buffer-fake-pod";
/// The buffer a virtual pod stands for, by name and namespace.
pub const BUFFER_NAME_ANNOTATION: &str = "karpenter.sh/capacity-buffer-name";
pub const BUFFER_NAMESPACE_ANNOTATION: &str = "karpenter.sh/capacity-buffer-namespace";
/// Starts every virtual pod's uid, so a placement (`PodRef`) tells a virtual pod from a
/// real one, whose uid the API server makes (a UUID).
pub const VIRTUAL_UID_PREFIX: &str = "capacity-buffer/";
/// The lowest priority: a virtual pod is worth less than any real one.
pub const VIRTUAL_POD_PRIORITY: i32 = i32::MIN;

/// Whether `pod` is a buffer's virtual pod.
pub fn is_virtual(pod: &impl PodLike) -> bool {
    pod.meta()
        .annotations
        .and_then(|a| a.get(FAKE_POD_ANNOTATION))
        .is_some_and(|v| v == "true")
}

/// Whether `uid` is a virtual pod's (see [`VIRTUAL_UID_PREFIX`]).
pub fn is_virtual_uid(uid: &str) -> bool {
    uid.starts_with(VIRTUAL_UID_PREFIX)
}

/// `namespace/name` of the buffer a virtual pod stands for.
pub fn buffer_of(pod: &impl PodLike) -> Option<String> {
    let annotations = pod.meta().annotations?;
    if !is_virtual(pod) {
        return None;
    }
    Some(format!(
        "{}/{}",
        annotations.get(BUFFER_NAMESPACE_ANNOTATION)?,
        annotations.get(BUFFER_NAME_ANNOTATION)?
    ))
}

/// `ceil(workload × percentage / 100)`, at least 1 when both are positive.
pub fn percentage_replicas(workload_replicas: i32, percentage: i32) -> i32 {
    let exact = (i64::from(workload_replicas) * i64::from(percentage) + 99) / 100;
    let replicas = i32::try_from(exact.max(0)).unwrap_or(i32::MAX);
    if replicas < 1 && percentage > 0 && workload_replicas > 0 {
        1
    } else {
        replicas
    }
}

/// How many pods of `requests` fit in `limits`: the least `floor(limit / request)` over the
/// resources both name; `None` when they name none in common.
pub fn limit_replicas(limits: &Resources, requests: &Resources) -> Option<i32> {
    limits
        .iter()
        .filter_map(|(name, limit)| {
            let request = requests.get(name).filter(|r| !r.is_zero())?;
            let fits = limit.milli_value() / request.milli_value().max(1);
            Some(i32::try_from(fits.max(0)).unwrap_or(i32::MAX))
        })
        .min()
}

/// The buffer's size: the larger of `replicas` and the percentage of `workload_replicas`
/// (the scalableRef's, when there is one), capped by `limits` over `requests` (one pod's);
/// with neither set, what `limits` allows; else 0.
pub fn replicas(
    spec: &CapacityBufferSpec,
    requests: &Resources,
    workload_replicas: Option<i32>,
) -> i32 {
    let mut candidates = Vec::new();
    if let (Some(percentage), Some(workload)) = (spec.percentage, workload_replicas)
        && workload > 0
    {
        candidates.push(percentage_replicas(workload, percentage));
    }
    candidates.extend(spec.replicas);
    let desired = candidates.iter().copied().max();
    let limited = spec
        .limits
        .as_ref()
        .and_then(|limits| limit_replicas(&resources_of(limits), requests));
    match (desired, limited) {
        (Some(desired), Some(limited)) => desired.min(limited),
        (Some(desired), None) => desired,
        (None, Some(limited)) => limited,
        (None, None) => 0,
    }
}

/// A resource list's readable quantities (the CRD's pattern guarantees them).
pub fn resources_of(
    list: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> Resources {
    let mut resources = Resources::new();
    for (name, quantity) in list {
        if let Ok(quantity) = Quantity::parse(&quantity.0) {
            resources.insert(name, quantity);
        }
    }
    resources
}

/// Where one solve put a buffer's virtual pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Placed {
    /// On existing (or in-flight) capacity.
    pub existing: usize,
    /// On NodeClaims the solve plans.
    pub new_capacity: usize,
    /// Nowhere.
    pub failed: usize,
}

/// The buffer (`namespace/name`) a virtual pod's placement names, from its uid
/// ([`VIRTUAL_UID_PREFIX`]`<buffer uid>-<i>`) and name (`capacity-buffer-<buffer>-<i>`).
fn buffer_of_ref(pod: &crate::scheduling::PodRef) -> Option<String> {
    if !is_virtual_uid(&pod.uid) {
        return None;
    }
    let name = pod.name.strip_prefix("capacity-buffer-")?;
    let (buffer, _index) = name.rsplit_once('-')?;
    Some(format!("{}/{buffer}", pod.namespace))
}

/// Each buffer's virtual pods in `result`, by `namespace/name`: upstream's summary behind
/// the `Provisioning` condition.
pub fn placements(result: &crate::scheduling::SchedulingResult) -> BTreeMap<String, Placed> {
    let mut out: BTreeMap<String, Placed> = BTreeMap::new();
    let existing = result.existing_nodes.iter().flat_map(|n| &n.pods);
    for key in existing.filter_map(buffer_of_ref) {
        out.entry(key).or_default().existing += 1;
    }
    let planned = result.new_node_claims.iter().flat_map(|c| &c.pods);
    for key in planned.filter_map(buffer_of_ref) {
        out.entry(key).or_default().new_capacity += 1;
    }
    for key in result.errors.keys().filter_map(buffer_of_ref) {
        out.entry(key).or_default().failed += 1;
    }
    out
}

/// Which buffer virtual pods stand for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BufferRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// The buffer's `count` virtual pods, shaped by `template`: named
/// `capacity-buffer-<buffer>-<i>` (1-based) with uid
/// `<`[`VIRTUAL_UID_PREFIX`]`><buffer uid>-<i>`, so a round's
/// placements name the same pods from round to round.
pub fn virtual_pods(buffer: &BufferRef<'_>, template: &PodTemplateSpec, count: i32) -> Vec<Pod> {
    let spec = sanitized(template.spec.clone().unwrap_or_default());
    let labels = template.metadata.as_ref().and_then(|m| m.labels.clone());
    (1..=count.max(0))
        .map(|i| Pod {
            metadata: ObjectMeta {
                name: Some(format!("capacity-buffer-{}-{i}", buffer.name)),
                namespace: Some(buffer.namespace.to_owned()),
                uid: Some(format!("{VIRTUAL_UID_PREFIX}{}-{i}", buffer.uid)),
                labels: labels.clone(),
                annotations: Some(BTreeMap::from([
                    (FAKE_POD_ANNOTATION.to_owned(), "true".to_owned()),
                    (BUFFER_NAME_ANNOTATION.to_owned(), buffer.name.to_owned()),
                    (
                        BUFFER_NAMESPACE_ANNOTATION.to_owned(),
                        buffer.namespace.to_owned(),
                    ),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(spec.clone()),
            status: Some(PodStatus {
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".to_owned(),
                    status: "False".to_owned(),
                    reason: Some("Unschedulable".to_owned()),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
        })
        .collect()
}

/// The template's spec without what a pod that never exists cannot have: a node name, and
/// volumes backed by a claim (with their mounts); at the lowest priority.
fn sanitized(mut spec: PodSpec) -> PodSpec {
    spec.node_name = None;
    spec.priority = Some(VIRTUAL_POD_PRIORITY);
    spec.priority_class_name = None;
    let mut dropped = Vec::new();
    if let Some(volumes) = &mut spec.volumes {
        volumes.retain(|v| {
            let keep = v.persistent_volume_claim.is_none() && v.ephemeral.is_none();
            if !keep {
                dropped.push(v.name.clone());
            }
            keep
        });
    }
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        if let Some(mounts) = &mut container.volume_mounts {
            mounts.retain(|m| !dropped.contains(&m.name));
        }
    }
    spec
}

#[cfg(test)]
mod tests;
