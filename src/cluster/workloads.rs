//! Expansion of workload controllers into the pods (and StatefulSet claims) their
//! Kubernetes controllers would create, so that a plan sees exactly the pending pods a
//! cluster would have moments after `kubectl apply`. Pods are named `<name>-<i>`, carry the
//! template's labels and annotations plus the labels the controller stamps (pod-template-hash,
//! StatefulSet pod name and index, Job name and completion index), and an owner reference
//! that identifies their controller the way the API server records it.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};

use super::{FieldError, checks};
use crate::labels;

/// The namespace of an object that names none, as `kubectl apply` assumes.
pub const DEFAULT_NAMESPACE: &str = "default";

/// What a workload controller creates.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Expansion {
    pub pods: Vec<Pod>,
    /// Claims a StatefulSet creates from its volumeClaimTemplates, one per template and pod.
    pub claims: Vec<PersistentVolumeClaim>,
}

/// The controller recorded in each created pod's owner reference.
struct Controller<'a> {
    api_version: &'a str,
    kind: &'a str,
    name: String,
    namespace: String,
}

impl Controller<'_> {
    /// A stable stand-in for the UID the API server would assign, unique per object.
    fn uid(&self) -> String {
        format!("kerf-plan/{}/{}/{}", self.kind, self.namespace, self.name)
    }

    fn owner_reference(&self) -> OwnerReference {
        OwnerReference {
            api_version: self.api_version.to_string(),
            kind: self.kind.to_string(),
            name: self.name.clone(),
            uid: self.uid(),
            controller: Some(true),
            block_owner_deletion: Some(true),
        }
    }
}

/// A Deployment's pods, owned (as in a cluster) by its current ReplicaSet, which is named
/// after the Deployment and the hash of its pod template.
pub fn expand_deployment(deployment: &Deployment) -> Result<Expansion, FieldError> {
    let (name, namespace) = identity(&deployment.metadata)?;
    let spec = deployment
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec"))?;
    let replicas = count(spec.replicas, 1, "spec.replicas")?;
    check_controller_template(&spec.selector, &spec.template)?;
    let hash = template_hash(&spec.template);
    let replica_set = Controller {
        api_version: "apps/v1",
        kind: "ReplicaSet",
        name: format!("{name}-{hash}"),
        namespace,
    };
    let pods = (0..replicas)
        .map(|index| {
            let mut pod =
                pod_from_template(&spec.template, &replica_set, format!("{name}-{index}"));
            stamp_label(&mut pod, labels::POD_TEMPLATE_HASH, &hash);
            pod
        })
        .collect();
    Ok(Expansion {
        pods,
        claims: Vec::new(),
    })
}

/// A ReplicaSet's pods, owned by the ReplicaSet itself.
pub fn expand_replica_set(replica_set: &ReplicaSet) -> Result<Expansion, FieldError> {
    let (name, namespace) = identity(&replica_set.metadata)?;
    let spec = replica_set
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec"))?;
    let replicas = count(spec.replicas, 1, "spec.replicas")?;
    let template = spec
        .template
        .as_ref()
        .ok_or_else(|| FieldError::required("spec.template"))?;
    check_controller_template(&spec.selector, template)?;
    let owner = Controller {
        api_version: "apps/v1",
        kind: "ReplicaSet",
        name: name.clone(),
        namespace,
    };
    let pods = (0..replicas)
        .map(|index| pod_from_template(template, &owner, format!("{name}-{index}")))
        .collect();
    Ok(Expansion {
        pods,
        claims: Vec::new(),
    })
}

/// A StatefulSet's pods with their stable identities (hostname, subdomain, pod-name and
/// pod-index labels, ordinals from `spec.ordinals.start`) and, per volumeClaimTemplate, a
/// claim `<template>-<name>-<ordinal>` mounted in place of the template's volume.
pub fn expand_stateful_set(stateful_set: &StatefulSet) -> Result<Expansion, FieldError> {
    let (name, namespace) = identity(&stateful_set.metadata)?;
    let spec = stateful_set
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec"))?;
    let replicas = count(spec.replicas, 1, "spec.replicas")?;
    let start = count(
        spec.ordinals.as_ref().and_then(|o| o.start),
        0,
        "spec.ordinals.start",
    )?;
    check_controller_template(&spec.selector, &spec.template)?;
    let templates = spec.volume_claim_templates.as_deref().unwrap_or_default();
    let template_names = claim_template_names(templates)?;
    let owner = Controller {
        api_version: "apps/v1",
        kind: "StatefulSet",
        name: name.clone(),
        namespace,
    };
    let mut expansion = Expansion::default();
    for ordinal in start..start + replicas {
        let pod_name = format!("{name}-{ordinal}");
        let mut pod = pod_from_template(&spec.template, &owner, pod_name.clone());
        stamp_label(&mut pod, labels::STATEFULSET_POD_NAME, &pod_name);
        stamp_label(&mut pod, labels::POD_INDEX, &ordinal.to_string());
        if let Some(pod_spec) = pod.spec.as_mut() {
            pod_spec.hostname = Some(pod_name.clone());
            pod_spec.subdomain.clone_from(&spec.service_name);
        }
        for (template, template_name) in templates.iter().zip(&template_names) {
            let claim_name = format!("{template_name}-{pod_name}");
            mount_claim(&mut pod, template_name, &claim_name);
            expansion.claims.push(claim_from_template(
                template,
                &owner,
                claim_name,
                &spec.selector,
            ));
        }
        expansion.pods.push(pod);
    }
    Ok(expansion)
}

/// The pods a Job runs at once: `parallelism` (default 1), no more than `completions`, none
/// while suspended. Indexed Jobs label each pod with its completion index.
pub fn expand_job(job: &Job) -> Result<Expansion, FieldError> {
    let (name, namespace) = identity(&job.metadata)?;
    let spec = job
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec"))?;
    let parallelism = count(spec.parallelism, 1, "spec.parallelism")?;
    let completions = spec
        .completions
        .map(|c| count(Some(c), 0, "spec.completions"))
        .transpose()?;
    if let Some(selector) = &spec.selector
        && spec.manual_selector == Some(true)
    {
        check_controller_template(selector, &spec.template)?;
    }
    checks::pod_spec(template_spec(&spec.template)?, "spec.template.spec")?;
    let active = if spec.suspend == Some(true) {
        0
    } else {
        completions.map_or(parallelism, |c| c.min(parallelism))
    };
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let owner = Controller {
        api_version: "batch/v1",
        kind: "Job",
        name: name.clone(),
        namespace,
    };
    let uid = owner.uid();
    let pods = (0..active)
        .map(|index| {
            let mut pod = pod_from_template(&spec.template, &owner, format!("{name}-{index}"));
            for key in [labels::JOB_NAME, labels::JOB_NAME_LEGACY] {
                stamp_label(&mut pod, key, &name);
            }
            for key in [
                labels::JOB_CONTROLLER_UID,
                labels::JOB_CONTROLLER_UID_LEGACY,
            ] {
                stamp_label(&mut pod, key, &uid);
            }
            if indexed {
                stamp_label(&mut pod, labels::JOB_COMPLETION_INDEX, &index.to_string());
                pod.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(labels::JOB_COMPLETION_INDEX.to_string(), index.to_string());
            }
            pod
        })
        .collect();
    Ok(Expansion {
        pods,
        claims: Vec::new(),
    })
}

/// The pod a DaemonSet would run on every node it selects, named after the DaemonSet as
/// upstream Karpenter models it; the scheduler adds its requests to each new node's overhead.
pub fn daemon_pod(daemon_set: &DaemonSet) -> Result<Pod, FieldError> {
    let (name, namespace) = identity(&daemon_set.metadata)?;
    let spec = daemon_set
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec"))?;
    check_controller_template(&spec.selector, &spec.template)?;
    let owner = Controller {
        api_version: "apps/v1",
        kind: "DaemonSet",
        name: name.clone(),
        namespace,
    };
    Ok(pod_from_template(&spec.template, &owner, name))
}

/// Applies to a pod the defaulting the API server performs at admission: a container
/// resource with a limit and no request requests its limit.
pub fn default_requests_from_limits(spec: &mut PodSpec) {
    let containers = spec
        .containers
        .iter_mut()
        .chain(spec.init_containers.iter_mut().flatten());
    for container in containers {
        let Some(resources) = container.resources.as_mut() else {
            continue;
        };
        let Some(limits) = resources.limits.as_ref() else {
            continue;
        };
        let requests = resources.requests.get_or_insert_default();
        for (name, limit) in limits {
            requests
                .entry(name.clone())
                .or_insert_with(|| limit.clone());
        }
    }
}

fn identity(metadata: &ObjectMeta) -> Result<(String, String), FieldError> {
    let name = metadata
        .name
        .clone()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| FieldError::required("metadata.name"))?;
    let namespace = metadata
        .namespace
        .clone()
        .filter(|namespace| !namespace.is_empty())
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    Ok((name, namespace))
}

fn count(value: Option<i32>, default: u32, path: &str) -> Result<u32, FieldError> {
    match value {
        None => Ok(default),
        Some(value) => u32::try_from(value).map_err(|_| {
            FieldError::new(
                path,
                format!("must be greater than or equal to 0, got {value}"),
            )
        }),
    }
}

fn template_spec(template: &PodTemplateSpec) -> Result<&PodSpec, FieldError> {
    template
        .spec
        .as_ref()
        .ok_or_else(|| FieldError::required("spec.template.spec"))
}

fn check_controller_template(
    selector: &LabelSelector,
    template: &PodTemplateSpec,
) -> Result<(), FieldError> {
    let no_labels = BTreeMap::new();
    let labels = template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .unwrap_or(&no_labels);
    checks::selector_selects_template(
        selector,
        labels,
        "spec.selector",
        "spec.template.metadata.labels",
    )?;
    checks::pod_spec(template_spec(template)?, "spec.template.spec")
}

fn claim_template_names(templates: &[PersistentVolumeClaim]) -> Result<Vec<String>, FieldError> {
    templates
        .iter()
        .enumerate()
        .map(|(index, template)| {
            template
                .metadata
                .name
                .clone()
                .filter(|name| !name.is_empty())
                .ok_or_else(|| {
                    FieldError::required(format!(
                        "spec.volumeClaimTemplates[{index}].metadata.name"
                    ))
                })
        })
        .collect()
}

fn pod_from_template(template: &PodTemplateSpec, owner: &Controller, name: String) -> Pod {
    let template_metadata = template.metadata.clone().unwrap_or_default();
    let mut spec = template.spec.clone().unwrap_or_default();
    default_requests_from_limits(&mut spec);
    Pod {
        metadata: ObjectMeta {
            namespace: Some(owner.namespace.clone()),
            labels: template_metadata.labels,
            annotations: template_metadata.annotations,
            owner_references: Some(vec![owner.owner_reference()]),
            uid: Some(format!("{}/{name}", owner.uid())),
            name: Some(name),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    }
}

fn stamp_label(pod: &mut Pod, key: &str, value: &str) {
    pod.metadata
        .labels
        .get_or_insert_default()
        .insert(key.to_string(), value.to_string());
}

/// The StatefulSet controller replaces any template volume of the claim template's name.
fn mount_claim(pod: &mut Pod, volume_name: &str, claim_name: &str) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    let volumes = spec.volumes.get_or_insert_default();
    volumes.retain(|volume| volume.name != volume_name);
    volumes.push(Volume {
        name: volume_name.to_string(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim_name.to_string(),
            read_only: None,
        }),
        ..Default::default()
    });
}

fn claim_from_template(
    template: &PersistentVolumeClaim,
    owner: &Controller,
    name: String,
    selector: &LabelSelector,
) -> PersistentVolumeClaim {
    let mut labels = template.metadata.labels.clone().unwrap_or_default();
    labels.extend(selector.match_labels.clone().unwrap_or_default());
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(owner.namespace.clone()),
            labels: Some(labels),
            annotations: template.metadata.annotations.clone(),
            ..Default::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// A short, stable, DNS-safe digest of the pod template, standing in for the
/// pod-template-hash the Deployment controller derives from it.
fn template_hash(template: &PodTemplateSpec) -> String {
    const SAFE: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let bytes = serde_json::to_vec(template).expect("a PodTemplateSpec always serializes to JSON");
    let hash = bytes.iter().fold(0x811c_9dc5_u32, |hash, byte| {
        (hash ^ u32::from(*byte)).wrapping_mul(0x0100_0193)
    });
    hash.to_string()
        .bytes()
        .map(|digit| char::from(SAFE[usize::from(digit) % SAFE.len()]))
        .collect()
}

#[cfg(test)]
mod tests;
