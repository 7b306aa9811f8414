//! Which Nodes node repair replaces, decided without I/O: a Node whose condition matches
//! one of the AWS provider's repair policies (type and status) for longer than the policy's
//! toleration is unhealthy; a NodePool with more unhealthy Nodes than
//! [`MAX_UNHEALTHY_FRACTION`] of its Nodes (rounded up) is left alone, as upstream does,
//! because that many failing at once points at something replacing Nodes will not fix.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::jiff::Timestamp;
use kerf::labels;

/// A condition that makes a Node unhealthy once it has held for `toleration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RepairPolicy {
    pub condition: &'static str,
    pub status: &'static str,
    pub toleration: Duration,
}

const fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

/// The AWS provider's repair policies: the kubelet's `Ready`, and the conditions the EKS
/// node monitoring agent sets.
pub const AWS_REPAIR_POLICIES: [RepairPolicy; 7] = [
    RepairPolicy {
        condition: "Ready",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "Ready",
        status: "Unknown",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "AcceleratedHardwareReady",
        status: "False",
        toleration: minutes(10),
    },
    RepairPolicy {
        condition: "StorageReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "NetworkingReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "KernelReady",
        status: "False",
        toleration: minutes(30),
    },
    RepairPolicy {
        condition: "ContainerRuntimeReady",
        status: "False",
        toleration: minutes(30),
    },
];

/// A Node to repair and the policy it violated.
pub type Repair<'a> = (&'a Node, RepairPolicy);

/// A NodePool whose repair is held back, and its unhealthy Nodes.
pub type Blocked<'a> = (String, Vec<&'a Node>);

/// More unhealthy Nodes than this share of a NodePool's Nodes blocks its repair.
pub const MAX_UNHEALTHY_FRACTION: f64 = 0.2;

/// The policy `node` has violated past its toleration at `now`, if any.
pub fn unhealthy(node: &Node, policies: &[RepairPolicy], now: Timestamp) -> Option<RepairPolicy> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    policies.iter().copied().find(|policy| {
        conditions.iter().any(|c| {
            c.type_ == policy.condition
                && c.status == policy.status
                && c.last_transition_time.as_ref().is_some_and(|since| {
                    now.duration_since(since.0).as_secs_f64() >= policy.toleration.as_secs_f64()
                })
        })
    })
}

/// The unhealthy Nodes node repair may replace now: those of NodePools whose unhealthy
/// Nodes do not exceed [`MAX_UNHEALTHY_FRACTION`] of their Nodes. Returns them with their
/// policy, and the NodePools blocked with their unhealthy Nodes.
pub fn repairable<'a>(
    nodes: &'a [&'a Node],
    policies: &[RepairPolicy],
    now: Timestamp,
) -> (Vec<Repair<'a>>, Vec<Blocked<'a>>) {
    // Per NodePool: its Nodes, and those unhealthy.
    let mut by_pool: BTreeMap<&str, (usize, Vec<Repair<'a>>)> = BTreeMap::new();
    for node in nodes {
        let Some(pool) = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(labels::NODEPOOL))
        else {
            continue;
        };
        let entry = by_pool.entry(pool).or_default();
        entry.0 += 1;
        if let Some(policy) = unhealthy(node, policies, now) {
            entry.1.push((node, policy));
        }
    }
    let mut repair = Vec::new();
    let mut blocked = Vec::new();
    for (pool, (total, unhealthy)) in by_pool {
        if unhealthy.is_empty() {
            continue;
        }
        #[allow(
            clippy::cast_precision_loss,
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            reason = "node counts are small and the product is non-negative"
        )]
        let allowed = (total as f64 * MAX_UNHEALTHY_FRACTION).ceil() as usize;
        if unhealthy.len() > allowed {
            blocked.push((pool.to_owned(), unhealthy.iter().map(|(n, _)| *n).collect()));
        } else {
            repair.extend(unhealthy);
        }
    }
    (repair, blocked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, pool: &str, ready: &str, minutes_ago: i64, now: Timestamp) -> Node {
        let since = now - k8s_openapi::jiff::SignedDuration::from_mins(minutes_ago);
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {labels::NODEPOOL: pool}},
            "status": {"conditions": [{
                "type": "Ready", "status": ready,
                "lastTransitionTime": since.to_string(),
            }]},
        }))
        .expect("a Node")
    }

    #[test]
    fn a_condition_is_unhealthy_only_past_its_toleration() {
        let now = Timestamp::now();
        let policies = &AWS_REPAIR_POLICIES;
        assert_eq!(
            unhealthy(&node("a", "p", "False", 29, now), policies, now),
            None
        );
        assert_eq!(
            unhealthy(&node("a", "p", "Unknown", 31, now), policies, now).map(|p| p.status),
            Some("Unknown")
        );
        assert_eq!(
            unhealthy(&node("a", "p", "True", 600, now), policies, now),
            None
        );
    }

    #[test]
    fn a_nodepool_with_more_than_a_fifth_unhealthy_is_not_repaired() {
        let now = Timestamp::now();
        let nodes: Vec<Node> = (0..10)
            .map(|i| {
                let (pool, ready) = match i {
                    0 | 1 => ("few", "False"),
                    2..=4 => ("few", "True"),
                    5..=7 => ("many", "False"),
                    _ => ("many", "True"),
                };
                node(&format!("n{i}"), pool, ready, 45, now)
            })
            .collect();
        let refs: Vec<&Node> = nodes.iter().collect();
        let (repair, blocked) = repairable(&refs, &AWS_REPAIR_POLICIES, now);
        // "few": 2 of 5 unhealthy, 20% of 5 is 1: blocked. "many": 3 of 5: blocked.
        assert!(repair.is_empty());
        let names = |blocked: &[Blocked<'_>]| -> Vec<(String, Vec<String>)> {
            blocked
                .iter()
                .map(|(pool, nodes)| {
                    let nodes = nodes
                        .iter()
                        .map(|n| n.metadata.name.clone().unwrap_or_default());
                    (pool.clone(), nodes.collect())
                })
                .collect()
        };
        assert_eq!(
            names(&blocked),
            vec![
                ("few".to_owned(), vec!["n0".to_owned(), "n1".to_owned()]),
                (
                    "many".to_owned(),
                    vec!["n5".to_owned(), "n6".to_owned(), "n7".to_owned()]
                ),
            ]
        );
        let (repair, blocked) = repairable(&refs[1..], &AWS_REPAIR_POLICIES, now);
        // Without n0, "few" has 1 of 4 unhealthy (20% of 4 rounds up to 1).
        assert_eq!(
            repair
                .iter()
                .map(|(n, _)| n.metadata.name.clone().unwrap_or_default())
                .collect::<Vec<_>>(),
            vec!["n1".to_owned()]
        );
        assert_eq!(
            blocked
                .iter()
                .map(|(pool, _)| pool.as_str())
                .collect::<Vec<_>>(),
            vec!["many"]
        );
    }
}
