//! What a pass reports, under upstream's names: the eligible nodes per reason, each
//! NodePool's allowed disruptions per reason, each method's evaluation time, decisions,
//! failed validations and consolidation timeouts; and the events on the nodes left alone —
//! `DisruptionBlocked` when a budget, a pod (a PodDisruptionBudget,
//! `karpenter.sh/do-not-disrupt`) or a nomination for pending pods holds the node (also
//! after a pass the screen ended), `Unconsolidatable` when consolidation has
//! no move for it (policy, `consolidateAfter`, no cheaper replacement, pods that would not
//! schedule, a move onto a node still initializing). Reason labels are lower-case, as
//! upstream's disruption metrics carry them.

use std::collections::HashMap;

use kerf::api::DisruptionReason;
use kerf::disruption::controller::{Pass, Planned, reason_name};
use kerf::disruption::{ManagedNode, Method, NOMINATED};
use kerf::labels;

use super::DisruptionDeps;
use super::screen::NoCandidate;
use crate::events::disruption::{self as events, Kind, Subject};
use crate::metrics::{
    DISRUPTION_CONSOLIDATION_TIMEOUTS, DISRUPTION_DECISIONS, DISRUPTION_DECISIONS_BY_NODEPOOL,
    DISRUPTION_ELIGIBLE_NODES, DISRUPTION_EVALUATION_DURATION, DISRUPTION_FAILED_VALIDATIONS,
    NODEPOOLS_ALLOWED_DISRUPTIONS, NODEPOOLS_NODES_CONSUMING_BUDGETS,
};
use crate::orchestrator::{Command, consolidation_type, decision_label, reason_label};
use crate::state::ObjectKey;

/// Upstream labels evaluation times by `reason`: the reason each method disrupts for.
fn method_label(method: Method) -> &'static str {
    match method {
        Method::Emptiness => "empty",
        Method::Drift => "drifted",
        Method::Expiration => "expired",
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => "underutilized",
    }
}

/// Records a pass's gauges, timings and events.
pub fn pass(deps: &DisruptionDeps, managed: &[ManagedNode], pass: &Pass) {
    for (reason, count) in &pass.eligible {
        #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
        metrics::gauge!(DISRUPTION_ELIGIBLE_NODES, "reason" => reason.to_lowercase())
            .set(*count as f64);
    }
    for budget in &pass.budgets {
        #[allow(clippy::cast_precision_loss, reason = "budgets are at most 2^31")]
        metrics::gauge!(
            NODEPOOLS_ALLOWED_DISRUPTIONS,
            "nodepool" => budget.node_pool.clone(),
            "reason" => reason_name(budget.reason).to_lowercase()
        )
        .set(budget.allowed as f64);
        #[allow(clippy::cast_precision_loss, reason = "node counts are far below 2^52")]
        metrics::gauge!(
            NODEPOOLS_NODES_CONSUMING_BUDGETS,
            "nodepool" => budget.node_pool.clone(),
            "reason" => reason_name(budget.reason).to_lowercase()
        )
        .set(budget.disrupting as f64);
    }
    for (method, took) in &pass.timings {
        metrics::histogram!(
            DISRUPTION_EVALUATION_DURATION,
            "reason" => method_label(*method),
            "consolidation_type" => consolidation_type(*method)
        )
        .record(took.as_secs_f64());
    }
    for method in &pass.timed_out {
        tracing::warn!(method = ?method, "consolidation ran out of time");
        metrics::counter!(
            DISRUPTION_CONSOLIDATION_TIMEOUTS,
            "consolidation_type" => consolidation_type(*method)
        )
        .increment(1);
    }
    publish_blocks(deps, managed, &pass.blocked);
}

/// Records a pass the screen ended ([`super::screen`]): no node eligible for any reason,
/// and the events on the nodes left alone.
pub fn no_candidate(deps: &DisruptionDeps, screened: &NoCandidate) {
    for reason in DisruptionReason::ALL {
        metrics::gauge!(DISRUPTION_ELIGIBLE_NODES, "reason" => reason_name(reason).to_lowercase())
            .set(0.0);
    }
    publish_blocks(deps, &screened.managed, &screened.blocked);
}

fn publish_blocks(deps: &DisruptionDeps, nodes: &[ManagedNode], blocked: &HashMap<String, String>) {
    for managed in nodes {
        let Some(why) = blocked.get(&managed.name) else {
            continue;
        };
        // Upstream's `DisruptionBlocked` for a node nominated for a pending pod too.
        let held =
            why.contains("budget") || why.contains(labels::DO_NOT_DISRUPT) || why == NOMINATED;
        let subjects = [
            deps.state
                .nodes
                .get(&ObjectKey::new(None, &managed.name))
                .map(|n| (Kind::Node, n.metadata.uid.clone().unwrap_or_default())),
            deps.state
                .nodeclaims
                .get(&ObjectKey::new(None, &managed.node_claim))
                .map(|c| (Kind::NodeClaim, c.metadata.uid.clone().unwrap_or_default())),
        ];
        for (kind, uid) in subjects.into_iter().flatten() {
            let name = match kind {
                Kind::Node => managed.name.clone(),
                Kind::NodeClaim => managed.node_claim.clone(),
            };
            let subject = Subject { kind, name, uid };
            let event = if held {
                events::blocked(&subject, why)
            } else {
                Some(events::unconsolidatable(&subject, why))
            };
            if let Some(event) = event {
                deps.events.publish(event);
            }
        }
    }
}

/// Counts a command handed to the Orchestrator.
pub fn decision(command: &Command) {
    metrics::counter!(
        DISRUPTION_DECISIONS,
        "decision" => decision_label(command.decision),
        "reason" => reason_label(command.reason),
        "consolidation_type" => consolidation_type(command.method)
    )
    .increment(1);
    let pools: std::collections::BTreeSet<&str> = command
        .candidates
        .iter()
        .map(|c| c.node_pool.as_str())
        .collect();
    for pool in pools {
        metrics::counter!(
            DISRUPTION_DECISIONS_BY_NODEPOOL,
            "nodepool" => pool.to_owned(),
            "decision" => decision_label(command.decision),
            "reason" => reason_label(command.reason),
            "consolidation_type" => consolidation_type(command.method)
        )
        .increment(1);
    }
}

/// Counts a graceful command dropped after its validation period.
pub fn failed_validation(planned: &Planned) {
    metrics::counter!(
        DISRUPTION_FAILED_VALIDATIONS,
        "consolidation_type" => consolidation_type(planned.command.method)
    )
    .increment(1);
}

#[cfg(test)]
mod tests {
    use kerf::disruption::Reason;

    use super::*;

    #[test]
    fn labels_are_upstreams() {
        assert_eq!(
            method_label(Method::SingleNodeConsolidation),
            "underutilized"
        );
        assert_eq!(consolidation_type(Method::MultiNodeConsolidation), "multi");
        assert_eq!(consolidation_type(Method::Drift), "");
        assert_eq!(reason_label(Reason::Empty), "empty");
    }
}
