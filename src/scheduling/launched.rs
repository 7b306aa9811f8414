//! A planned NodeClaim as the Node it becomes once its launch choice is running: the
//! instance type's labels and resources, the labels the NodeClaim's requirements resolve to,
//! and its pods bound to it. The disruption simulation adds replacements this way, and
//! `kerf plan --rounds` carries one round's NodeClaims into the next as in-flight capacity,
//! charged against the NodePool's limits at the launched type's capacity as the controller
//! does, rather than at the largest candidate's.

use crate::pods::LeanPod;
use std::sync::Arc;

use super::types::{ExistingNode, InstanceType, LaunchChoice, Operator, PlannedNodeClaim};
use crate::labels;
use crate::pods::bound_to;

impl PlannedNodeClaim {
    /// The Node named `name` this NodeClaim becomes when `launch` (an offering of `it`)
    /// runs, holding `pods`.
    pub fn launched_node(
        &self,
        name: &str,
        launch: &LaunchChoice,
        it: &InstanceType,
        pods: Vec<Arc<LeanPod>>,
        initialized: bool,
    ) -> ExistingNode {
        let mut node_labels = it.labels.clone();
        node_labels.extend(self.labels.clone());
        for r in &self.requirements {
            if r.operator == Operator::In && r.values.len() == 1 {
                node_labels.insert(r.key.clone(), r.values[0].clone());
            }
        }
        for (key, value) in [
            (labels::INSTANCE_TYPE, launch.instance_type.as_str()),
            (labels::ZONE, launch.zone.as_str()),
            (labels::CAPACITY_TYPE, launch.capacity_type.as_str()),
            (labels::NODEPOOL, self.node_pool.as_str()),
            (labels::HOSTNAME, name),
        ] {
            node_labels.insert(key.to_string(), value.to_string());
        }
        if initialized {
            node_labels.insert(labels::INITIALIZED.to_string(), "true".to_string());
        }
        ExistingNode {
            name: name.to_string(),
            labels: node_labels.into(),
            taints: self.taints.clone(),
            allocatable: it.allocatable(),
            capacity: it.capacity.clone(),
            pods: pods.into_iter().map(|pod| bound_to(&pod, name)).collect(),
            initialized,
            node_pool: Some(self.node_pool.clone()),
            node_claim: Some(name.to_string()),
            volume_limits: Default::default(),
        }
    }
}
