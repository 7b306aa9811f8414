//! Initialization, as upstream decides it: a registered Node is initialized once it is
//! Ready, the NodeClaim's startup taints are gone from it, no known ephemeral taint
//! (not-ready, unreachable, the cloud provider's uninitialized taint, …) is left, and every
//! resource the NodeClaim requests is registered in the Node's allocatable (device plugins
//! register extended resources such as `nvidia.com/gpu` some time after the kubelet starts,
//! zeroed until then). Until then the reason and message say what is still awaited.

use k8s_openapi::api::core::v1::Node;
use kerf::api::NodeClaim;
use kerf::resources::Quantity;
use kerf::taints::{format_taint, is_known_ephemeral_taint, taints_match};

use super::registration::node_taints;

/// What an uninitialized Node is still waiting for: the `Initialized` condition's reason
/// and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaiting {
    pub reason: &'static str,
    pub message: String,
}

impl Awaiting {
    pub fn node_not_found() -> Self {
        Self {
            reason: "NodeNotFound",
            message: "Node not registered with cluster".to_owned(),
        }
    }
}

/// `Ok` when `node` is initialized for `claim`, else what it awaits (first unmet check).
pub fn check(claim: &NodeClaim, node: &Node) -> Result<(), Awaiting> {
    if !is_ready(node) {
        return Err(Awaiting {
            reason: "NodeNotReady",
            message: "Node status is NotReady".to_owned(),
        });
    }
    let taints = node_taints(node);
    let startup = claim
        .startup_taints()
        .iter()
        .find_map(|s| taints.iter().find(|t| taints_match(s, t)));
    if let Some(taint) = startup {
        return Err(Awaiting {
            reason: "StartupTaintsExist",
            message: format!("StartupTaint {:?} still exists", format_taint(taint)),
        });
    }
    if let Some(taint) = taints.iter().find(|t| is_known_ephemeral_taint(t)) {
        return Err(Awaiting {
            reason: "KnownEphemeralTaintsExist",
            message: format!("KnownEphemeralTaint {:?} still exists", format_taint(taint)),
        });
    }
    if let Some(resource) = unregistered_resource(claim, node) {
        return Err(Awaiting {
            reason: "ResourceNotRegistered",
            message: format!("Resource {resource:?} was requested but not registered"),
        });
    }
    Ok(())
}

/// Whether the Node's `Ready` condition is `True`.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// The first resource the NodeClaim requests (non-zero) that the Node's allocatable has
/// zero of — the kubelet zeroes extended resources until their device plugin registers.
fn unregistered_resource<'a>(claim: &'a NodeClaim, node: &Node) -> Option<&'a str> {
    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
    let requests = claim.resource_requests()?;
    requests
        .iter()
        .filter(|(_, quantity)| !is_zero(&quantity.0))
        .find(|(name, _)| {
            allocatable
                .and_then(|a| a.get(name.as_str()))
                .is_none_or(|q| is_zero(&q.0))
        })
        .map(|(name, _)| name.as_str())
}

/// Unparseable quantities count as zero: the API server validates them, so only a
/// corrupt object has one, and it must not pass for registered capacity.
fn is_zero(text: &str) -> bool {
    Quantity::parse(text).map_or(true, Quantity::is_zero)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim(requests: serde_json::Value) -> NodeClaim {
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "default-abc"},
            "spec": {
                "requirements": [],
                "startupTaints": [{"key": "cni", "effect": "NoSchedule"}],
                "resources": {"requests": requests},
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
            }
        }))
        .expect("valid NodeClaim")
    }

    fn node(ready: &str, taints: serde_json::Value, allocatable: serde_json::Value) -> Node {
        serde_json::from_value(json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints},
            "status": {
                "conditions": [{"type": "Ready", "status": ready}],
                "allocatable": allocatable
            }
        }))
        .expect("valid Node")
    }

    fn reason(result: Result<(), Awaiting>) -> &'static str {
        result.err().map_or("initialized", |a| a.reason)
    }

    #[test]
    fn a_ready_untainted_node_with_its_resources_is_initialized() {
        let c = claim(json!({"cpu": "1", "memory": "1Gi"}));
        let n = node("True", json!([]), json!({"cpu": "2", "memory": "4Gi"}));
        assert_eq!(check(&c, &n), Ok(()));
    }

    #[test]
    fn each_unmet_condition_is_named() {
        let c = claim(json!({"cpu": "1", "nvidia.com/gpu": "1"}));
        let allocatable = json!({"cpu": "2", "nvidia.com/gpu": "1"});
        assert_eq!(
            reason(check(&c, &node("False", json!([]), allocatable.clone()))),
            "NodeNotReady"
        );
        let startup = check(
            &c,
            &node(
                "True",
                json!([{"key": "cni", "effect": "NoSchedule"}]),
                allocatable.clone(),
            ),
        );
        assert_eq!(
            startup,
            Err(Awaiting {
                reason: "StartupTaintsExist",
                message: "StartupTaint \"cni:NoSchedule\" still exists".to_owned()
            })
        );
        assert_eq!(
            reason(check(
                &c,
                &node(
                    "True",
                    json!([{"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}]),
                    allocatable.clone()
                )
            )),
            "KnownEphemeralTaintsExist"
        );
        let unregistered = check(
            &c,
            &node(
                "True",
                json!([]),
                json!({"cpu": "2", "nvidia.com/gpu": "0"}),
            ),
        );
        assert_eq!(
            unregistered,
            Err(Awaiting {
                reason: "ResourceNotRegistered",
                message: "Resource \"nvidia.com/gpu\" was requested but not registered".to_owned()
            })
        );
        let message = unregistered.map_err(|a| a.message).unwrap_err();
        assert!(message.contains(kerf::troubleshooting::documented("not-initialized")));
        assert_eq!(
            reason(check(&c, &node("True", json!([]), json!({"cpu": "2"})))),
            "ResourceNotRegistered"
        );
    }

    #[test]
    fn zero_requests_and_unrelated_taints_do_not_hold_initialization() {
        let c = claim(json!({"cpu": "1", "nvidia.com/gpu": "0"}));
        let n = node(
            "True",
            json!([{"key": "dedicated", "effect": "NoSchedule"}]),
            json!({"cpu": "2"}),
        );
        assert_eq!(check(&c, &n), Ok(()));
    }
}
