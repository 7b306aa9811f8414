//! Advice a round gives from what it already resolved, in the words `kerf plan` prints: a
//! NodePool whose EC2NodeClass sets a kubelet `maxPods` above the VPC CNI's IP limit of some
//! of its instance types gets a Warning event (reason [`MAX_PODS_ABOVE_ENI_LIMIT`]; upstream
//! has none), so a user who never runs `kerf plan` learns why pods stay ContainerCreating.
//! The event recorder's de-duplication keeps it to one per NodePool and class per
//! [`ADVICE_DEDUPE`] however many rounds run.

use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kerf::advice::max_pods_above_eni_limit;
use kerf::api::NodePool;
use kerf::catalog::Catalog;
use kerf::cluster::inventory::Inventory;
use kerf::scheduling::NodePoolInput;

use crate::events::{Dedupe, Event, EventType};

/// kerf's event reason.
pub const MAX_PODS_ABOVE_ENI_LIMIT: &str = "MaxPodsAboveENILimit";

/// A setting changes rarely; a reminder an hour is enough.
pub const ADVICE_DEDUPE: Duration = Duration::from_secs(60 * 60);

/// The warnings for the round's NodePools (`pools`, their instance types resolved) whose
/// class sets `maxPods` too high.
pub fn max_pods(
    pools: &[NodePoolInput],
    inventory: &Inventory,
    catalog: &Catalog,
    reserved_enis: u32,
) -> Vec<Event> {
    pools
        .iter()
        .filter_map(|pool| {
            let node_pool = inventory
                .node_pools
                .iter()
                .find(|p| p.name() == pool.name)?;
            let class_name = &node_pool.node_class_ref().name;
            let class = inventory
                .node_classes
                .iter()
                .find(|c| c.metadata.name.as_deref() == Some(class_name.as_str()))?;
            let message = max_pods_above_eni_limit(pool, class, catalog, reserved_enis)?;
            Some(warning(node_pool, class_name, message))
        })
        .collect()
}

fn warning(pool: &NodePool, class: &str, message: String) -> Event {
    let uid = pool.metadata.uid.clone().unwrap_or_default();
    Event {
        regarding: ObjectReference {
            api_version: Some("karpenter.sh/v1".to_owned()),
            kind: Some("NodePool".to_owned()),
            name: Some(pool.name().to_owned()),
            uid: pool.metadata.uid.clone(),
            ..ObjectReference::default()
        },
        type_: EventType::Warning,
        reason: MAX_PODS_ABOVE_ENI_LIMIT,
        message,
        dedupe: Some(Dedupe {
            values: vec![uid, class.to_owned()],
            timeout: ADVICE_DEDUPE,
        }),
        throttle: None,
    }
}
