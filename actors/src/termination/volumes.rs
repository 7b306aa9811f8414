//! Which VolumeAttachments hold a Node's termination, as upstream decides it: those
//! attached to the Node that name a PersistentVolume, except the volumes of pods the drain
//! does not remove (they stay attached until the instance goes). Waiting for them lets a
//! drained pod's volume detach cleanly before its instance is terminated, so the pod's
//! replacement can attach it elsewhere. Pods reach their PersistentVolumes through their
//! claims: a `persistentVolumeClaim` volume names its claim, a generic ephemeral volume's
//! claim is `<pod>-<volume>`.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::jiff::Timestamp;
use kerf::pods::{LeanPod, PodLike};

use super::drain::{bound_to, is_drainable};

/// The attachments among `attachments` that Node `node_name` still waits for.
pub fn pending<'a>(
    node_name: &str,
    attachments: &'a [VolumeAttachment],
    pods: &[Arc<LeanPod>],
    claims: &[Arc<PersistentVolumeClaim>],
    now: Timestamp,
) -> Vec<&'a VolumeAttachment> {
    let kept: HashSet<&str> = pods
        .iter()
        .filter(|p| bound_to(p, node_name) && !is_drainable(p, now))
        .flat_map(|p| volume_names(p, claims))
        .collect();
    attachments
        .iter()
        .filter(|a| a.spec.node_name == node_name)
        .filter(|a| {
            a.spec
                .source
                .persistent_volume_name
                .as_deref()
                .is_some_and(|pv| !kept.contains(pv))
        })
        .collect()
}

/// The PersistentVolumes `pod` mounts through claims that are bound.
fn volume_names<'a>(
    pod: &'a LeanPod,
    claims: &'a [Arc<PersistentVolumeClaim>],
) -> impl Iterator<Item = &'a str> + 'a {
    let namespace = pod.meta().namespace.unwrap_or("default");
    let pod_name = pod.meta().name.unwrap_or_default();
    pod.spec()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(move |v| {
            if let Some(pvc) = &v.persistent_volume_claim {
                Some(pvc.claim_name.clone())
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| format!("{pod_name}-{}", v.name))
            }
        })
        .filter_map(move |claim| {
            claims
                .iter()
                .find(|c| {
                    c.metadata.name.as_deref() == Some(claim.as_str())
                        && c.metadata.namespace.as_deref() == Some(namespace)
                })
                .and_then(|c| c.spec.as_ref()?.volume_name.as_deref())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::termination::testing::{at, pod};
    use serde_json::json;

    fn attachment(name: &str, node: &str, pv: Option<&str>) -> VolumeAttachment {
        let mut source = json!({});
        if let Some(pv) = pv {
            source = json!({"persistentVolumeName": pv});
        }
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {"attacher": "ebs.csi.aws.com", "nodeName": node, "source": source}
        }))
        .expect("valid attachment")
    }

    fn claim(name: &str, pv: &str) -> Arc<PersistentVolumeClaim> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"volumeName": pv}
            }))
            .expect("valid claim"),
        )
    }

    fn names(pending: &[&VolumeAttachment]) -> Vec<String> {
        pending
            .iter()
            .map(|a| a.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn the_node_waits_for_its_own_persistent_volumes_except_those_of_pods_it_keeps() {
        let attachments = vec![
            attachment("drained", "n1", Some("pv-drained")),
            attachment("kept", "n1", Some("pv-kept")),
            attachment("inline", "n1", None),
            attachment("elsewhere", "n2", Some("pv-other")),
        ];
        let pods = vec![
            pod(
                "db",
                json!({"spec": {"volumes": [{"name": "data",
                    "persistentVolumeClaim": {"claimName": "data-db"}}]}}),
            ),
            pod(
                "agent",
                json!({"spec": {
                    "tolerations": [{"key": "karpenter.sh/disrupted", "operator": "Exists"}],
                    "volumes": [{"name": "cache", "ephemeral": {}}]}}),
            ),
        ];
        let claims = vec![
            claim("data-db", "pv-drained"),
            claim("agent-cache", "pv-kept"),
        ];
        let pending = pending("n1", &attachments, &pods, &claims, at(0));
        assert_eq!(names(&pending), ["drained"]);
    }
}
