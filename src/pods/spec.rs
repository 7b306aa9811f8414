//! What a kept pod spec holds: the fields placement reads, for the controller's stores and
//! for `kerf plan`'s inventory alike, which both hold every pod for a long time. Of a
//! container, its name, resources, ports (host ports) and restart policy (a sidecar's
//! requests add up differently) are read; its image, command, environment, probes and mounts
//! are most of a real container and go. Of the volumes, those that tie a pod to storage stay
//! (persistentVolumeClaim, ephemeral, awsElasticBlockStore: zone and volume limits, and what
//! drain waits to detach); the service-account token, ConfigMaps, Secrets, `emptyDir` and the
//! like go — k8s-openapi's `Volume` holds every kind of source inline, about 3 KB each.
//! Ephemeral (debug) containers request nothing and bind no port.

use k8s_openapi::api::core::v1::{Container, PodSpec, Volume};

/// Drops from `spec`, in place, what no placement decision reads.
pub fn keep_what_placement_reads(spec: &mut PodSpec) {
    spec.containers.iter_mut().for_each(keep_requirements);
    if let Some(init) = spec.init_containers.as_mut() {
        init.iter_mut().for_each(keep_requirements);
    }
    spec.ephemeral_containers = None;
    if let Some(volumes) = spec.volumes.as_mut() {
        volumes.retain(ties_to_storage);
        if volumes.is_empty() {
            spec.volumes = None;
        } else {
            volumes.shrink_to_fit();
        }
    }
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

/// Whether `volume` ties its pod to storage: a claim (given or ephemeral) or an EBS volume.
fn ties_to_storage(volume: &Volume) -> bool {
    volume.persistent_volume_claim.is_some()
        || volume.ephemeral.is_some()
        || volume.aws_elastic_block_store.is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_spec_keeps_requirements_and_storage_and_loses_the_rest() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "priority": 100,
            "nodeSelector": {"topology.kubernetes.io/zone": "us-east-1a"},
            "containers": [{
                "name": "app", "image": "web:1", "command": ["serve"],
                "env": [{"name": "SECRET", "value": "x"}],
                "livenessProbe": {"httpGet": {"port": 80}},
                "volumeMounts": [{"name": "config", "mountPath": "/etc/web"}],
                "ports": [{"containerPort": 80, "hostPort": 8080}],
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}
            }],
            "initContainers": [{
                "name": "sidecar", "image": "proxy:1", "restartPolicy": "Always",
                "env": [{"name": "A", "value": "b"}],
                "resources": {"requests": {"cpu": "100m"}}
            }],
            "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
            "volumes": [
                {"name": "config", "configMap": {"name": "web"}},
                {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "legacy", "awsElasticBlockStore": {"volumeID": "vol-1"}},
                {"name": "tmp", "emptyDir": {}}
            ]
        }))
        .expect("spec");
        let was = spec.clone();
        keep_what_placement_reads(&mut spec);

        assert_eq!(spec.priority, was.priority);
        assert_eq!(spec.node_selector, was.node_selector);
        let app = &spec.containers[0];
        assert_eq!(app.name, "app");
        assert_eq!(app.resources, was.containers[0].resources);
        assert_eq!(app.ports, was.containers[0].ports, "host ports place pods");
        assert!(app.image.is_none() && app.command.is_none() && app.env.is_none());
        assert!(app.liveness_probe.is_none() && app.volume_mounts.is_none());
        let sidecar = &spec.init_containers.as_ref().expect("init containers")[0];
        assert_eq!(sidecar.restart_policy.as_deref(), Some("Always"));
        assert_eq!(
            sidecar.resources,
            was.init_containers.expect("init")[0].resources
        );
        assert!(sidecar.env.is_none() && sidecar.image.is_none());
        assert!(spec.ephemeral_containers.is_none());
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data", "scratch", "legacy"]);
    }

    #[test]
    fn a_spec_without_storage_keeps_no_volume_list() {
        let mut spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "app"}],
            "volumes": [{"name": "token", "projected": {"sources": []}}]
        }))
        .expect("spec");
        keep_what_placement_reads(&mut spec);
        assert!(spec.volumes.is_none());
    }
}
