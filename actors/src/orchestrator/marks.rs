//! The two marks a node carries while a disruption command holds it, written and removed
//! here for both the orchestration queue (which sets them, and removes them on a rollback)
//! and the disruption loop (which removes the ones a crash or a lost leader left behind):
//! the `karpenter.sh/disrupted:NoSchedule` taint on the Node, so nothing new schedules onto
//! a node about to go, and the `DisruptionReason` condition on its NodeClaim, saying why.
//! Each write reads the object fresh and patches it locked to that version; a conflict (a
//! concurrent writer such as the lifecycle) is retried from a fresh read a few times. A
//! Node already being deleted keeps its taint: termination owns it from then on.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::api::condition::types;
use kerf::api::{ConditionStatus, NodeClaim};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use crate::lifecycle::conditions::ConditionSet;
use crate::lifecycle::patch;
use kerf::taints::disrupted_taint;

/// Attempts of one locked write before giving up on repeated conflicts.
const CONFLICT_ATTEMPTS: usize = 3;

/// Why a mark could not be written.
#[derive(Debug, thiserror::Error)]
pub enum MarkError {
    #[error("reading {kind} {name}: {source}")]
    Read {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("patching {kind} {name}: {source}")]
    Patch {
        kind: &'static str,
        name: String,
        #[source]
        source: kube::Error,
    },
}

fn is_status(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == code)
}

/// Where a locked write goes: the object itself or its status.
#[derive(Clone, Copy)]
enum Target {
    Main,
    Status,
}

/// Reads `name` fresh, asks `body` for the locked patch that marks it (`None`: nothing to
/// do), and writes it; a conflict starts over from a fresh read, at most
/// [`CONFLICT_ATTEMPTS`] times. An object that is gone needs nothing.
async fn locked_write<K>(
    api: &Api<K>,
    kind: &'static str,
    name: &str,
    target: Target,
    body: impl Fn(&K) -> Option<serde_json::Value>,
) -> Result<(), MarkError>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    for attempt in 1..=CONFLICT_ATTEMPTS {
        let object = match api.get_opt(name).await {
            Ok(Some(object)) => object,
            Ok(None) => return Ok(()),
            Err(source) => {
                return Err(MarkError::Read {
                    kind,
                    name: name.to_owned(),
                    source,
                });
            }
        };
        let Some(body) = body(&object) else {
            return Ok(());
        };
        let params = PatchParams::default();
        let written = match target {
            Target::Main => api.patch(name, &params, &Patch::Merge(body)).await,
            Target::Status => api.patch_status(name, &params, &Patch::Merge(body)).await,
        };
        match written {
            Ok(_) => return Ok(()),
            Err(e) if is_status(&e, 409) && attempt < CONFLICT_ATTEMPTS => {}
            Err(e) if is_status(&e, 404) => return Ok(()),
            Err(source) => {
                return Err(MarkError::Patch {
                    kind,
                    name: name.to_owned(),
                    source,
                });
            }
        }
    }
    Ok(())
}

/// Adds (`on`) or removes the disrupted taint on Node `name`. A Node that is gone needs
/// nothing; one being deleted is left as it is.
pub async fn set_disrupted_taint(nodes: &Api<Node>, name: &str, on: bool) -> Result<(), MarkError> {
    locked_write(nodes, "Node", name, Target::Main, |node: &Node| {
        if node.metadata.deletion_timestamp.is_some() {
            return None;
        }
        patch::locked(
            node,
            &with_taint(node, on),
            node.metadata.resource_version.as_deref(),
        )
    })
    .await
}

/// `node` with the disrupted taint added (replacing a same-key taint of another effect) or
/// every taint of its key removed.
pub fn with_taint(node: &Node, on: bool) -> Node {
    let mut out = node.clone();
    let taint = disrupted_taint();
    let spec = out.spec.get_or_insert_with(Default::default);
    let mut taints = spec.taints.take().unwrap_or_default();
    let present = taints
        .iter()
        .any(|t| t.key == taint.key && t.effect == taint.effect);
    if on && !present {
        taints.retain(|t| t.key != taint.key);
        taints.push(taint);
    } else if !on {
        taints.retain(|t| t.key != taint.key);
    }
    spec.taints = (!taints.is_empty() || node.spec.as_ref().is_some_and(|s| s.taints.is_some()))
        .then_some(taints);
    out
}

/// Whether `node` carries the disrupted taint.
pub fn has_disrupted_taint(node: &Node) -> bool {
    let key = disrupted_taint().key;
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|taints| taints.iter().any(|t| t.key == key))
}

/// Sets the `DisruptionReason` condition of NodeClaim `name` to `reason` (upstream's
/// `Underutilized`, `Empty`, `Drifted`), or removes it (`None`). A NodeClaim that is gone
/// needs nothing.
pub async fn set_disruption_reason(
    claims: &Api<NodeClaim>,
    name: &str,
    reason: Option<&str>,
) -> Result<(), MarkError> {
    locked_write(
        claims,
        "NodeClaim",
        name,
        Target::Status,
        |claim: &NodeClaim| {
            let conditions = with_reason(claim, reason)?;
            Some(json!({
                "metadata": {"resourceVersion": claim.metadata.resource_version},
                "status": {"conditions": conditions},
            }))
        },
    )
    .await
}

/// The conditions of `claim` with `DisruptionReason` set to `reason` or removed; `None`
/// when nothing changes.
fn with_reason(claim: &NodeClaim, reason: Option<&str>) -> Option<Vec<kerf::api::Condition>> {
    let conditions = claim.conditions();
    let current = conditions
        .iter()
        .find(|c| c.type_ == types::DISRUPTION_REASON);
    match reason {
        Some(reason) => {
            if current.is_some_and(|c| c.is_true() && c.reason == reason) {
                return None;
            }
            let mut set =
                ConditionSet::new(conditions, claim.metadata.generation, Timestamp::now());
            set.set(
                types::DISRUPTION_REASON,
                ConditionStatus::True,
                reason,
                reason,
            );
            Some(set.into_vec())
        }
        None => {
            current?;
            Some(
                conditions
                    .iter()
                    .filter(|c| c.type_ != types::DISRUPTION_REASON)
                    .cloned()
                    .collect(),
            )
        }
    }
}

/// Whether `claim` carries a `DisruptionReason` condition.
pub fn has_disruption_reason(claim: &NodeClaim) -> bool {
    claim
        .conditions()
        .iter()
        .any(|c| c.type_ == types::DISRUPTION_REASON)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{NodeSpec, Taint};

    use super::*;

    fn node(taints: Vec<Taint>) -> Node {
        Node {
            spec: Some(NodeSpec {
                taints: Some(taints),
                ..NodeSpec::default()
            }),
            ..Node::default()
        }
    }

    #[test]
    fn the_taint_is_added_once_and_removed_whole() {
        let other = Taint {
            key: "team".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        let stale_effect = Taint {
            effect: "NoExecute".into(),
            ..disrupted_taint()
        };
        let tainted = with_taint(&node(vec![other.clone(), stale_effect]), true);
        assert_eq!(
            tainted.spec.as_ref().and_then(|s| s.taints.clone()),
            Some(vec![other.clone(), disrupted_taint()])
        );
        assert!(has_disrupted_taint(&tainted));
        assert_eq!(with_taint(&tainted, true), tainted);
        let clean = with_taint(&tainted, false);
        assert_eq!(
            clean.spec.as_ref().and_then(|s| s.taints.clone()),
            Some(vec![other])
        );
        assert!(!has_disrupted_taint(&clean));
    }

    fn claim() -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "c"},
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                "requirements": []}
        }))
        .expect("a NodeClaim")
    }

    #[test]
    fn the_reason_condition_is_set_changed_and_removed() {
        let mut claim = claim();
        let set = with_reason(&claim, Some("Underutilized")).expect("a change");
        let reason = set
            .iter()
            .find(|c| c.type_ == types::DISRUPTION_REASON)
            .expect("condition set");
        assert_eq!(
            (reason.status, reason.reason.as_str()),
            (ConditionStatus::True, "Underutilized")
        );
        claim.status = Some(kerf::api::NodeClaimStatus {
            conditions: set,
            ..Default::default()
        });
        assert!(has_disruption_reason(&claim));
        assert_eq!(with_reason(&claim, Some("Underutilized")), None);
        let cleared = with_reason(&claim, None).expect("a change");
        assert!(cleared.iter().all(|c| c.type_ != types::DISRUPTION_REASON));
        assert!(with_reason(&self::claim(), None).is_none());
    }
}
