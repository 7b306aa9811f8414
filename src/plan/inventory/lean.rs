//! What the inventory keeps of a pod. A plan holds every pod of the input until the solve
//! ends, so each byte per pod counts ten- or a hundred-thousandfold. The pod is checked
//! whole before this; what is dropped here is what no decision of the plan reads (the
//! scheduler, the report, the warnings and the disruption pass): volumes other than claims
//! and in-tree EBS, and what a container runs rather than what it needs.

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::plan::workloads::Expansion;

/// Drops what no plan decision reads from `pod`. Only claims (given or ephemeral) constrain
/// where a pod may run, and in-tree EBS volumes draw a warning; the other volumes (the
/// service-account token, ConfigMaps, Secrets, `emptyDir`) are most of a real pod's, and
/// k8s-openapi's `Volume` holds every kind of source inline, about 3 KB each, more than the
/// rest of the pod. Of a container, resources, ports (host ports), restart policy (a sidecar's
/// requests add up differently) and name are read: its command, environment, probes and
/// mounts are most of a real container and go. Ephemeral (debug) containers request nothing.
pub(super) fn keep_what_plans_read(pod: &mut Pod) {
    let Some(spec) = pod.spec.as_mut() else {
        return;
    };
    spec.containers.iter_mut().for_each(keep_requirements);
    if let Some(init) = spec.init_containers.as_mut() {
        init.iter_mut().for_each(keep_requirements);
    }
    spec.ephemeral_containers = None;
    let Some(volumes) = spec.volumes.as_mut() else {
        return;
    };
    volumes.retain(|volume| {
        volume.persistent_volume_claim.is_some()
            || volume.ephemeral.is_some()
            || volume.aws_elastic_block_store.is_some()
    });
    if volumes.is_empty() {
        spec.volumes = None;
    } else {
        volumes.shrink_to_fit();
    }
}

/// An expansion's pods as the inventory keeps them, without the room of the replicas
/// adoption dropped.
pub(super) fn expansion(mut expansion: Expansion) -> Expansion {
    expansion.pods.iter_mut().for_each(keep_what_plans_read);
    expansion.pods.shrink_to_fit();
    expansion
}

fn keep_requirements(container: &mut Container) {
    let Container {
        name,
        resources,
        ports,
        restart_policy,
        ..
    } = std::mem::take(container);
    *container = Container {
        name,
        resources,
        ports,
        restart_policy,
        ..Container::default()
    };
}
