//! The simulated cluster's attach/detach controller (with the EBS CSI driver behind it): a
//! pod bound to a Node that mounts a bound PersistentVolumeClaim gets a VolumeAttachment
//! for the claim's PersistentVolume on that Node, and once no pod on the Node uses that
//! volume any more (the pod is gone, not merely deleting: its containers still hold the
//! mount) the attachment is deleted after [`super::KubeletConfig::detach_delay`], as a real
//! detach takes seconds. That delay is what Karpenter's drainer waits out before it
//! terminates the instance, so the simulation exercises the wait without a test writing
//! attachments by hand. Only attachments of [`ATTACHER`] are managed; others are left as
//! they are.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec,
};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::reflector::Store;
use kube::{Api, Client};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::{KubeletPod, KubeletStats, is_status};
use crate::informer::{Informer, any_event};

/// The CSI driver whose attachments the simulation creates and removes.
pub const ATTACHER: &str = "ebs.csi.aws.com";

/// One attachment: a PersistentVolume on a Node.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Wanted {
    volume: String,
    node: String,
}

impl Wanted {
    /// The attachment's name (real ones hash the same three facts).
    fn name(&self) -> String {
        format!("csi-{}-{}", self.volume, self.node)
    }

    fn attachment(&self) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta {
                name: Some(self.name()),
                ..ObjectMeta::default()
            },
            spec: VolumeAttachmentSpec {
                attacher: ATTACHER.to_owned(),
                node_name: self.node.clone(),
                source: VolumeAttachmentSource {
                    persistent_volume_name: Some(self.volume.clone()),
                    ..VolumeAttachmentSource::default()
                },
            },
            status: None,
        }
    }
}

/// The kubelets' pod cache, shared rather than kept twice: a ready store, and a receiver
/// that sees it change.
pub struct Pods {
    pub store: Store<KubeletPod>,
    pub changes: watch::Receiver<u64>,
}

/// Runs the controller until aborted; `resync` bounds the sleep without a change.
pub async fn run(
    client: Client,
    pods: Pods,
    detach_delay: Duration,
    resync: Duration,
    stats: Arc<KubeletStats>,
) {
    let claims = Informer::start(
        Api::<PersistentVolumeClaim>::all(client.clone()),
        any_event::<PersistentVolumeClaim>,
    );
    let attachments = Informer::start(
        Api::<VolumeAttachment>::all(client.clone()),
        any_event::<VolumeAttachment>,
    );
    claims.ready().await;
    attachments.ready().await;
    let wake = Arc::new(Notify::new());
    let mut watchers = Vec::new();
    for mut changes in [pods.changes, claims.changes(), attachments.changes()] {
        let wake = Arc::clone(&wake);
        watchers.push(AbortOnDrop(tokio::spawn(kerf_heap::inherit(async move {
            while changes.changed().await.is_ok() {
                wake.notify_one();
            }
        }))));
    }
    let api: Api<VolumeAttachment> = Api::all(client);
    // When each attachment was first seen unused: it is detached `detach_delay` later.
    let mut unused_since: HashMap<String, Instant> = HashMap::new();
    loop {
        let wanted = wanted(&pods.store.state(), &claims.store().state());
        let existing = attachments.store().state();
        let now = Instant::now();
        let present: HashSet<String> = existing
            .iter()
            .filter_map(|a| a.metadata.name.clone())
            .collect();
        for attach in wanted.iter().filter(|w| !present.contains(&w.name())) {
            match api
                .create(&PostParams::default(), &attach.attachment())
                .await
            {
                Ok(_) => {
                    stats.volumes_attached.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if is_status(&e, 409) => {}
                Err(error) => {
                    stats.api_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "attaching volume failed");
                }
            }
        }
        let wanted_names: HashSet<String> = wanted.iter().map(Wanted::name).collect();
        let unused: Vec<String> = existing
            .iter()
            .filter(|a| a.spec.attacher == ATTACHER)
            .filter_map(|a| a.metadata.name.clone())
            .filter(|name| !wanted_names.contains(name))
            .collect();
        unused_since.retain(|name, _| unused.contains(name));
        let mut next = now + resync;
        for name in unused {
            let since = *unused_since.entry(name.clone()).or_insert(now);
            if now < since + detach_delay {
                next = next.min(since + detach_delay);
                continue;
            }
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {
                    stats.volumes_detached.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if is_status(&e, 404) => {}
                Err(error) => {
                    stats.api_errors.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(%error, "detaching volume failed");
                }
            }
        }
        tokio::select! {
            _ = wake.notified() => {}
            _ = tokio::time::sleep_until(next) => {}
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The attachments the pods need: each bound, non-terminal pod's bound claims' volumes on
/// its Node.
fn wanted(pods: &[Arc<KubeletPod>], claims: &[Arc<PersistentVolumeClaim>]) -> HashSet<Wanted> {
    let volume_of: HashMap<(&str, &str), &str> = claims
        .iter()
        .filter_map(|c| {
            Some((
                (
                    c.metadata.namespace.as_deref()?,
                    c.metadata.name.as_deref()?,
                ),
                c.spec.as_ref()?.volume_name.as_deref()?,
            ))
        })
        .collect();
    let mut out = HashSet::new();
    for pod in pods {
        let Some(node) = pod.node_name.as_deref() else {
            continue;
        };
        if pod.is_terminal() {
            continue;
        }
        for claim in &pod.claims {
            if let Some(pv) = volume_of.get(&(pod.namespace.as_str(), claim.as_str())) {
                out.insert(Wanted {
                    volume: (*pv).to_owned(),
                    node: node.to_owned(),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> Arc<KubeletPod> {
        Arc::new(KubeletPod::of(
            serde_json::from_value(value).expect("a pod"),
        ))
    }

    #[test]
    fn bound_live_pods_want_their_bound_claims_volumes_on_their_node() {
        let claims: Vec<Arc<PersistentVolumeClaim>> = [("data", Some("pv-data")), ("new", None)]
            .into_iter()
            .map(|(name, pv)| {
                Arc::new(
                    serde_json::from_value(json!({"metadata": {"name": name, "namespace": "db"},
                        "spec": {"volumeName": pv}}))
                    .expect("a claim"),
                )
            })
            .collect();
        let with = |name: &str, node: Option<&str>, claim: &str, phase: &str| {
            pod(json!({"metadata": {"name": name, "namespace": "db"},
                "spec": {"nodeName": node, "containers": [],
                    "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}]},
                "status": {"phase": phase}}))
        };
        let pods = [
            with("running", Some("n1"), "data", "Running"),
            with("unbound-claim", Some("n1"), "new", "Running"),
            with("unscheduled", None, "data", "Pending"),
            with("done", Some("n2"), "data", "Succeeded"),
        ];
        let wanted = wanted(&pods, &claims);
        assert_eq!(
            wanted,
            HashSet::from([Wanted {
                volume: "pv-data".into(),
                node: "n1".into()
            }])
        );
    }
}
