//! The CapacityBuffer controller (`capacitybuffer` upstream, with the `CapacityBuffer` gate):
//! each buffer's pod shape is read from its PodTemplate (`podTemplateRef`) or its workload's
//! template (`scalableRef`: a Deployment, StatefulSet or ReplicaSet, whose replicas feed
//! `percentage`), sized with [`kerf::buffer::replicas`], and turned into virtual pods that
//! cluster state hands to every snapshot ([`ClusterState::set_buffer_pods`]): the
//! Provisioner plans room for them next to the real pending pods (and nothing else: they are
//! never created, nominated or reported), and disruption's simulations must keep room for
//! them, so spare capacity is kept, and refilled by the round that sees real pods take it.
//! The status (`ReadyForProvisioning`, `replicas`, `podTemplateRef`,
//! `podTemplateGeneration`, `provisioningStrategy`) is written as upstream's, with
//! `Provisioning` from where the latest round put the pods. Passes run
//! while leading, on buffer changes and every [`PERIOD`]; a change of the virtual pods asks
//! the Batcher for a round at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{PodTemplate, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kerf::api::capacitybuffer::{
    ACTIVE_PROVISIONING_STRATEGY, CONDITION_PROVISIONING, CONDITION_READY_FOR_PROVISIONING,
    LocalObjectRef, ScalableRef,
};
use kerf::api::{CapacityBuffer, Condition, ConditionStatus, Conditions};
use kerf::buffer::{self, BufferRef};
use kerf::pods::{LeanPod, PodInterner, PodLike};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::watch;

use crate::batcher::triggers::Retrigger;
use crate::lifecycle::patch::locked;
use crate::requeue::{self, Trigger};
use crate::state::ClusterState;

/// Upstream's controller name (reconcile metrics).
pub const CONTROLLER: &str = "capacitybuffer";
/// How often buffers are resolved again without a change announcing it: a PodTemplate or a
/// workload's replica count changes without a watch here. Upstream requeues every 30 s; 10 s
/// keeps `percentage` buffers close to a scaling workload for the cost of a few GETs.
pub const PERIOD: Duration = Duration::from_secs(10);
/// `ReadyForProvisioning` reasons, as upstream.
pub const REASON_RESOLVED: &str = "Resolved";
pub const REASON_POD_TEMPLATE_NOT_FOUND: &str = "PodTemplateNotFound";
pub const REASON_SCALABLE_REF_NOT_FOUND: &str = "ScalableRefNotFound";
pub const REASON_RESOLUTION_FAILED: &str = "ResolutionFailed";

/// A buffer's pod shape, resolved.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub template: PodTemplateSpec,
    /// The PodTemplate's name and generation (`podTemplateRef`).
    pub pod_template: Option<(String, i64)>,
    /// The workload's replicas (`scalableRef`).
    pub workload_replicas: Option<i32>,
}

/// Why a buffer did not resolve: the reason for its condition, and the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}: {message}")]
pub struct Unresolved {
    pub reason: &'static str,
    pub message: String,
    /// Not the user's doing (an API error): counted as a failed reconcile and retried.
    pub transient: bool,
}

fn not_found_or(reason: &'static str, error: kube::Error) -> Unresolved {
    match error {
        kube::Error::Api(e) if e.code == 404 => Unresolved {
            reason,
            message: e.message,
            transient: false,
        },
        other => Unresolved {
            reason: REASON_RESOLUTION_FAILED,
            message: other.to_string(),
            transient: true,
        },
    }
}

fn unresolved(message: String) -> Unresolved {
    Unresolved {
        reason: REASON_RESOLUTION_FAILED,
        message,
        transient: false,
    }
}

/// Reads the buffer's pod shape from the API.
pub async fn resolve(client: &Client, cb: &CapacityBuffer) -> Result<Resolved, Unresolved> {
    let namespace = cb.namespace();
    match (&cb.spec.pod_template_ref, &cb.spec.scalable_ref) {
        (Some(LocalObjectRef { name }), _) => {
            let api: Api<PodTemplate> = Api::namespaced(client.clone(), namespace);
            let template = api
                .get(name)
                .await
                .map_err(|e| not_found_or(REASON_POD_TEMPLATE_NOT_FOUND, e))?;
            Ok(Resolved {
                template: template.template.unwrap_or_default(),
                pod_template: Some((name.clone(), template.metadata.generation.unwrap_or(0))),
                workload_replicas: None,
            })
        }
        (None, Some(reference)) => resolve_scalable(client, namespace, reference).await,
        (None, None) => Err(unresolved(
            "Neither podTemplateRef nor scalableRef is set".to_owned(),
        )),
    }
}

async fn resolve_scalable(
    client: &Client,
    namespace: &str,
    reference: &ScalableRef,
) -> Result<Resolved, Unresolved> {
    if !reference.api_group.is_empty() && reference.api_group != "apps" {
        return Err(unresolved(format!(
            "unsupported scalableRef API group {:?}",
            reference.api_group
        )));
    }
    let missing = |e| not_found_or(REASON_SCALABLE_REF_NOT_FOUND, e);
    let (template, replicas) = match reference.kind.as_str() {
        "Deployment" => {
            let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
            let spec = api.get(&reference.name).await.map_err(missing)?.spec;
            spec.map(|s| (s.template, s.replicas)).unwrap_or_default()
        }
        "StatefulSet" => {
            let api: Api<StatefulSet> = Api::namespaced(client.clone(), namespace);
            let spec = api.get(&reference.name).await.map_err(missing)?.spec;
            spec.map(|s| (s.template, s.replicas)).unwrap_or_default()
        }
        "ReplicaSet" => {
            let api: Api<ReplicaSet> = Api::namespaced(client.clone(), namespace);
            let spec = api.get(&reference.name).await.map_err(missing)?.spec;
            spec.map(|s| (s.template.unwrap_or_default(), s.replicas))
                .unwrap_or_default()
        }
        other => return Err(unresolved(format!("unsupported kind {other:?}"))),
    };
    Ok(Resolved {
        template,
        pod_template: None,
        workload_replicas: Some(replicas.unwrap_or(1)),
    })
}

/// One pod's requests, as the scheduler counts them.
fn requests_of(template: &PodTemplateSpec) -> kerf::resources::Resources {
    let pod = k8s_openapi::api::core::v1::Pod {
        spec: template.spec.clone(),
        ..Default::default()
    };
    kerf::scheduling::resource_requests(&pod).unwrap_or_default()
}

/// The buffer's size for `resolved`.
pub fn replicas(cb: &CapacityBuffer, resolved: &Resolved) -> i32 {
    buffer::replicas(
        &cb.spec,
        &requests_of(&resolved.template),
        resolved.workload_replicas,
    )
}

/// The status `cb` should have after `outcome`.
pub fn wanted_status(
    cb: &CapacityBuffer,
    outcome: &Result<(Resolved, i32), Unresolved>,
    now: Timestamp,
) -> kerf::api::CapacityBufferStatus {
    let mut status = cb.status.clone().unwrap_or_default();
    let (condition_status, reason, message) = match outcome {
        Ok((resolved, replicas)) => {
            match &resolved.pod_template {
                Some((name, generation)) => {
                    status.pod_template_ref = Some(LocalObjectRef { name: name.clone() });
                    status.pod_template_generation = Some(*generation);
                }
                None => {
                    status.pod_template_ref = None;
                    status.pod_template_generation = None;
                }
            }
            status.replicas = Some(*replicas);
            (
                ConditionStatus::True,
                REASON_RESOLVED,
                "Pod template resolved successfully".to_owned(),
            )
        }
        Err(e) => (ConditionStatus::False, e.reason, e.message.clone()),
    };
    status.provisioning_strategy = Some(
        cb.spec
            .provisioning_strategy
            .clone()
            .unwrap_or_else(|| ACTIVE_PROVISIONING_STRATEGY.to_owned()),
    );
    set_condition(
        &mut status,
        cb.metadata.generation,
        CONDITION_READY_FOR_PROVISIONING,
        (condition_status, reason, message),
        now,
    );
    status
}

/// Upstream's `Provisioning` condition from the buffer's readiness and where the latest
/// round put its virtual pods; `None` leaves it as it is (no round placed them yet).
pub fn provisioning_condition(
    ready: bool,
    replicas: i32,
    placed: Option<kerf::buffer::Placed>,
) -> Option<(ConditionStatus, &'static str, String)> {
    if !ready {
        return Some((
            ConditionStatus::False,
            "NotReadyForProvisioning",
            "Buffer is not ReadyForProvisioning".to_owned(),
        ));
    }
    if replicas == 0 {
        return Some((
            ConditionStatus::False,
            "BufferEmpty",
            "Buffer has zero desired replicas".to_owned(),
        ));
    }
    let placed = placed?;
    if placed.new_capacity > 0 || placed.failed > 0 {
        return Some((
            ConditionStatus::False,
            "RequiresNewCapacity",
            format!(
                "{}/{replicas} virtual pods required new capacity, {} failed",
                placed.new_capacity, placed.failed
            ),
        ));
    }
    (i32::try_from(placed.existing).ok() == Some(replicas)).then(|| {
        (
            ConditionStatus::True,
            "FitsExistingCapacity",
            format!("All {replicas} virtual pods fit on existing capacity"),
        )
    })
}

/// Sets condition `type_` in `status`, keeping its transition time while its status holds.
fn set_condition(
    status: &mut kerf::api::CapacityBufferStatus,
    generation: Option<i64>,
    type_: &str,
    (condition_status, reason, message): (ConditionStatus, &str, String),
    now: Timestamp,
) {
    let since = status
        .conditions
        .condition(type_)
        .filter(|c| c.status == condition_status)
        .map_or(Time(now), |c| c.last_transition_time.clone());
    status.conditions.retain(|c| c.type_ != type_);
    status.conditions.push(Condition {
        type_: type_.to_owned(),
        status: condition_status,
        observed_generation: generation,
        last_transition_time: since,
        reason: reason.to_owned(),
        message,
    });
    status.conditions.sort_by(|a, b| a.type_.cmp(&b.type_));
}

/// One pass: resolves every buffer, writes the statuses that changed and publishes the
/// virtual pods; returns whether they changed.
pub async fn reconcile(client: &Client, state: &ClusterState) -> Result<bool, String> {
    let mut interner = PodInterner::default();
    let mut pods: Vec<Arc<LeanPod>> = Vec::new();
    let mut errors = Vec::new();
    for cb in state.capacity_buffers.snapshot() {
        if cb.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let outcome = resolve(client, &cb).await.map(|resolved| {
            let replicas = replicas(&cb, &resolved);
            (resolved, replicas)
        });
        if let Err(e) = &outcome {
            tracing::warn!(buffer = %format!("{}/{}", cb.namespace(), cb.name()), error = %e, "CapacityBuffer did not resolve");
            if e.transient {
                errors.push(e.to_string());
            }
        }
        let mut wanted = (*cb).clone();
        let now = Timestamp::now();
        let mut status = wanted_status(&cb, &outcome, now);
        let key = format!("{}/{}", cb.namespace(), cb.name());
        let replicas = outcome.as_ref().map_or(0, |(_, n)| *n);
        if let Some(condition) =
            provisioning_condition(outcome.is_ok(), replicas, state.buffer_placement(&key))
        {
            set_condition(
                &mut status,
                cb.metadata.generation,
                CONDITION_PROVISIONING,
                condition,
                now,
            );
        }
        wanted.status = Some(status);
        if let Some(patch) = locked(&*cb, &wanted, cb.metadata.resource_version.as_deref()) {
            let namespaced: Api<CapacityBuffer> = Api::namespaced(client.clone(), cb.namespace());
            match namespaced
                .patch_status(cb.name(), &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
                Err(e) => errors.push(format!("patching CapacityBuffer {}: {e}", cb.name())),
            }
        }
        if let Ok((resolved, count)) = outcome {
            let uid = cb.metadata.uid.clone().unwrap_or_default();
            let reference = BufferRef {
                namespace: cb.namespace(),
                name: cb.name(),
                uid: &uid,
            };
            pods.extend(
                buffer::virtual_pods(&reference, &resolved.template, count)
                    .into_iter()
                    .map(|pod| Arc::new(LeanPod::new(pod, &mut interner))),
            );
        }
    }
    let changed = identities(&pods) != identities(&state.buffer_pods());
    if changed {
        state.set_buffer_pods(pods);
    }
    if errors.is_empty() {
        Ok(changed)
    } else {
        Err(errors.join("; "))
    }
}

/// Each virtual pod's uid with its spec, to tell a change of the buffers.
fn identities(pods: &[Arc<LeanPod>]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| {
            (
                p.meta().uid.unwrap_or_default().to_owned(),
                serde_json::to_string(&p.spec()).unwrap_or_default(),
            )
        })
        .collect()
}

/// Runs passes until `shutdown`; a change of the virtual pods requests a provisioning round.
pub async fn run(
    client: Client,
    state: Arc<ClusterState>,
    trigger: Trigger,
    retrigger: Retrigger,
    leader: watch::Receiver<bool>,
    shutdown: watch::Receiver<bool>,
) {
    let pass_state = Arc::clone(&state);
    requeue::run(state, trigger, leader, shutdown, move || {
        let (client, state, retrigger) =
            (client.clone(), Arc::clone(&pass_state), retrigger.clone());
        async move {
            match crate::metrics::reconcile(CONTROLLER, reconcile(&client, &state)).await {
                Ok(true) => retrigger.request(),
                Ok(false) => {}
                Err(error) => tracing::warn!(%error, "capacitybuffer"),
            }
            PERIOD
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn buffer(spec: serde_json::Value) -> CapacityBuffer {
        serde_json::from_value(json!({
            "apiVersion": "autoscaling.x-k8s.io/v1beta1", "kind": "CapacityBuffer",
            "metadata": {"name": "b", "namespace": "ns", "generation": 2}, "spec": spec
        }))
        .expect("buffer")
    }

    fn template(cpu: &str) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": {"containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}))
        .expect("template")
    }

    #[test]
    fn status_records_the_resolution_and_its_failure() {
        let cb =
            buffer(json!({"podTemplateRef": {"name": "t"}, "replicas": 3, "limits": {"cpu": "2"}}));
        let resolved = Resolved {
            template: template("500m"),
            pod_template: Some(("t".to_owned(), 4)),
            workload_replicas: None,
        };
        assert_eq!(replicas(&cb, &resolved), 3, "min(3, 2 cpu / 500m = 4)");
        let now = Timestamp::from_second(1_000).expect("time");
        let status = wanted_status(&cb, &Ok((resolved, 3)), now);
        assert_eq!(status.replicas, Some(3));
        assert_eq!(status.pod_template_generation, Some(4));
        assert_eq!(
            status.provisioning_strategy.as_deref(),
            Some(ACTIVE_PROVISIONING_STRATEGY)
        );
        let ready = status
            .conditions
            .condition(CONDITION_READY_FOR_PROVISIONING)
            .expect("set");
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::True, REASON_RESOLVED)
        );
        let failed = wanted_status(
            &cb,
            &Err(Unresolved {
                reason: REASON_POD_TEMPLATE_NOT_FOUND,
                message: "podtemplates \"t\" not found".to_owned(),
                transient: false,
            }),
            now,
        );
        let ready = failed
            .conditions
            .condition(CONDITION_READY_FOR_PROVISIONING)
            .expect("set");
        assert_eq!(
            (ready.status, ready.reason.as_str()),
            (ConditionStatus::False, REASON_POD_TEMPLATE_NOT_FOUND)
        );
    }
}
