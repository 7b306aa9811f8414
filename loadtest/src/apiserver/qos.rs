//! A pod's `status.qosClass`, which the real API server sets when the pod is created:
//! `Guaranteed` when every container (init containers too) limits CPU and memory and
//! requests exactly its limits (a request left out defaults to the limit), `BestEffort`
//! when no container requests or limits either, `Burstable` otherwise. Quantities are
//! compared by value (`1` equals `1000m`); one that does not parse counts as unequal.

use kerf::resources::Quantity;
use serde_json::Value;

const COMPUTE: [&str; 2] = ["cpu", "memory"];

/// The QoS class of the pod with this `spec`.
pub(crate) fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|list| spec.get(*list).and_then(Value::as_array))
        .flatten()
        .collect();
    let amount = |c: &Value, kind: &str, resource: &str| {
        c.pointer(&format!("/resources/{kind}/{resource}")).cloned()
    };
    let any_set = containers.iter().any(|c| {
        COMPUTE
            .iter()
            .any(|r| amount(c, "requests", r).is_some() || amount(c, "limits", r).is_some())
    });
    if !any_set {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        COMPUTE.iter().all(
            |r| match (amount(c, "requests", r), amount(c, "limits", r)) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(request), Some(limit)) => same_quantity(&request, &limit),
            },
        )
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

fn same_quantity(a: &Value, b: &Value) -> bool {
    let parse = |v: &Value| match v {
        Value::String(text) => text.parse::<Quantity>().ok(),
        Value::Number(n) => n.to_string().parse::<Quantity>().ok(),
        _ => None,
    };
    matches!((parse(a), parse(b)), (Some(a), Some(b)) if a.milli_value() == b.milli_value())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(resources: Value) -> Value {
        json!({"containers": [{"name": "app", "resources": resources}]})
    }

    #[test]
    fn classes_follow_requests_and_limits() {
        assert_eq!(
            qos_class(&json!({"containers": [{"name": "a"}]})),
            "BestEffort"
        );
        assert_eq!(
            qos_class(&spec(
                json!({"requests": {"cpu": "250m", "memory": "256Mi"}})
            )),
            "Burstable"
        );
        assert_eq!(
            qos_class(&spec(json!({"limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed",
            "requests default to the limits"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "1000m", "memory": "1Gi"},
                "limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Guaranteed"
        );
        assert_eq!(
            qos_class(&spec(json!({"requests": {"cpu": "500m", "memory": "1Gi"},
                "limits": {"cpu": "1", "memory": "1Gi"}}))),
            "Burstable"
        );
        let mixed = json!({"containers": [
            {"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b"}]});
        assert_eq!(qos_class(&mixed), "Burstable");
    }
}
