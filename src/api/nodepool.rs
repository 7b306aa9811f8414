//! `karpenter.sh/v1` NodePool: the template NodeClaims are stamped from, the limits of what may
//! be launched, and the disruption policy (consolidation, budgets). Defaults match the CRD:
//! `consolidationPolicy: WhenEmptyOrUnderutilized`, `consolidateAfter: 0s`, budgets
//! `[{nodes: "10%"}]`, `expireAfter: 720h`, no `terminationGracePeriod`.

use super::condition::{Condition, Conditions};
use super::duration::{Duration, NillableDuration};
use super::nodeclaim::{NodeClassReference, ResourceList, default_expire_after};
use super::requirement::NodeSelectorRequirementWithMinValues;
use k8s_openapi::api::core::v1::Taint;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where and how NodeClaims may be launched for pending pods.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.sh",
    version = "v1",
    kind = "NodePool",
    status = "NodePoolStatus",
    category = "karpenter",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolSpec {
    pub template: NodeClaimTemplate,
    #[serde(default)]
    pub disruption: Disruption,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<ResourceList>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
    /// Static NodePools (alpha): keep exactly this many nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
}

/// The NodeClaim template: labels/annotations and the NodeClaim spec minus resources.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeClaimTemplate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<TemplateMetadata>,
    pub spec: NodeClaimTemplateSpec,
}

/// Labels and annotations copied onto each NodeClaim and its node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TemplateMetadata {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The part of a NodeClaim spec a NodePool fixes for every NodeClaim it creates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClaimTemplateSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<Taint>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub startup_taints: Vec<Taint>,
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
    pub node_class_ref: NodeClassReference,
    #[serde(default = "default_expire_after")]
    pub expire_after: NillableDuration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period: Option<Duration>,
}

/// Which nodes consolidation may remove.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ConsolidationPolicy {
    WhenEmpty,
    #[default]
    WhenEmptyOrUnderutilized,
    Balanced,
}

/// The disruption methods a budget can be limited to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum DisruptionReason {
    Underutilized,
    Empty,
    Drifted,
}

impl DisruptionReason {
    /// Every reason, in the order budgets and reports list them.
    pub const ALL: [Self; 3] = [Self::Empty, Self::Drifted, Self::Underutilized];
}

/// Consolidation policy, delay and budgets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Disruption {
    #[serde(default = "default_consolidate_after")]
    pub consolidate_after: NillableDuration,
    #[serde(default)]
    pub consolidation_policy: ConsolidationPolicy,
    #[serde(default = "default_budgets")]
    pub budgets: Vec<Budget>,
}

impl Default for Disruption {
    fn default() -> Self {
        Self {
            consolidate_after: default_consolidate_after(),
            consolidation_policy: ConsolidationPolicy::default(),
            budgets: default_budgets(),
        }
    }
}

fn default_consolidate_after() -> NillableDuration {
    NillableDuration::After(Duration::from_secs(0))
}

fn default_budgets() -> Vec<Budget> {
    vec![Budget::default()]
}

pub const DEFAULT_BUDGET_NODES: &str = "10%";

/// The `spec.limits` key that caps a NodePool's node count (upstream's `resources.Node`).
pub const NODES_LIMIT: &str = "nodes";

fn default_budget_nodes() -> String {
    DEFAULT_BUDGET_NODES.to_owned()
}

/// How many of a NodePool's nodes may be disrupted at once, optionally only in a cron window
/// and only for some reasons.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Budget {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<DisruptionReason>,
    /// A node count (`"5"`) or a percentage (`"10%"`).
    #[serde(default = "default_budget_nodes")]
    pub nodes: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration: Option<Duration>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            reasons: Vec::new(),
            nodes: default_budget_nodes(),
            schedule: None,
            duration: None,
        }
    }
}

/// A budget's `nodes` value, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BudgetNodes {
    Count(u64),
    Percent(u8),
}

impl Budget {
    /// `None` when `nodes` is not an integer or a 0–100 percentage (rejected by validation).
    pub fn parsed_nodes(&self) -> Option<BudgetNodes> {
        match self.nodes.strip_suffix('%') {
            Some(pct) => pct
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= 100)
                .map(BudgetNodes::Percent),
            None => self.nodes.parse().ok().map(BudgetNodes::Count),
        }
    }

    /// Whether this budget constrains the given disruption reason.
    pub fn applies_to(&self, reason: DisruptionReason) -> bool {
        self.reasons.is_empty() || self.reasons.contains(&reason)
    }
}

/// Observed state: provisioned resources, node count, conditions.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePoolStatus {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub resources: ResourceList,
    #[serde(default)]
    pub nodes: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_class_observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl NodePool {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn requirements(&self) -> &[NodeSelectorRequirementWithMinValues] {
        &self.spec.template.spec.requirements
    }

    /// Scheduling priority; an unset weight counts as 0.
    pub fn weight(&self) -> i32 {
        self.spec.weight.unwrap_or(0)
    }

    pub fn node_class_ref(&self) -> &NodeClassReference {
        &self.spec.template.spec.node_class_ref
    }

    pub fn taints(&self) -> &[Taint] {
        &self.spec.template.spec.taints
    }

    pub fn startup_taints(&self) -> &[Taint] {
        &self.spec.template.spec.startup_taints
    }

    /// Template labels (empty when none).
    pub fn template_labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.labels.as_ref())
            .unwrap_or(&EMPTY)
    }

    pub fn template_annotations(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.spec
            .template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref())
            .unwrap_or(&EMPTY)
    }

    pub fn limits(&self) -> Option<&ResourceList> {
        self.spec.limits.as_ref()
    }

    pub fn expire_after(&self) -> &NillableDuration {
        &self.spec.template.spec.expire_after
    }

    pub fn termination_grace_period(&self) -> Option<&Duration> {
        self.spec.template.spec.termination_grace_period.as_ref()
    }

    pub fn disruption(&self) -> &Disruption {
        &self.spec.disruption
    }

    /// A static NodePool keeps `replicas` nodes instead of scaling with pods.
    pub fn is_static(&self) -> bool {
        self.spec.replicas.is_some()
    }

    /// `spec.replicas` of a static NodePool (negative values, refused by the CRD, read as 0).
    pub fn replicas(&self) -> Option<u64> {
        self.spec.replicas.map(|r| u64::try_from(r).unwrap_or(0))
    }

    /// `spec.limits.nodes`: the most nodes the pool may have at once, surge included.
    /// `None` when unset or unreadable (a quantity validation refuses).
    pub fn node_limit(&self) -> Option<u64> {
        let text = &self.limits()?.get(NODES_LIMIT)?.0;
        let quantity = crate::resources::Quantity::parse(text).ok()?;
        Some(u64::try_from(quantity.value()).unwrap_or(0))
    }

    pub fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }

    pub fn is_condition_true(&self, type_: &str) -> bool {
        self.conditions().is_condition_true(type_)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration as StdDuration;

    fn nodepool(spec: serde_json::Value) -> NodePool {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "np"}, "spec": spec
        }))
        .unwrap()
    }

    fn template() -> serde_json::Value {
        serde_json::json!({"spec": {
            "requirements": [{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"], "minValues": 1}],
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
        }})
    }

    #[test]
    fn applies_upstream_defaults() {
        let np = nodepool(serde_json::json!({"template": template()}));
        assert_eq!(np.weight(), 0);
        assert_eq!(
            np.expire_after().as_std(),
            Some(StdDuration::from_secs(720 * 3600))
        );
        assert!(np.termination_grace_period().is_none());
        let d = np.disruption();
        assert_eq!(
            d.consolidation_policy,
            ConsolidationPolicy::WhenEmptyOrUnderutilized
        );
        assert_eq!(d.consolidate_after.as_std(), Some(StdDuration::ZERO));
        assert_eq!(d.budgets, [Budget::default()]);
        assert_eq!(d.budgets[0].parsed_nodes(), Some(BudgetNodes::Percent(10)));
        assert!(!np.is_static());
    }

    #[test]
    fn accessors_read_the_template() {
        let np = nodepool(serde_json::json!({
            "template": template(), "weight": 50,
            "disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "3", "reasons": ["Drifted"]}]}
        }));
        assert_eq!(np.weight(), 50);
        assert_eq!(np.node_class_ref().name, "default");
        assert_eq!(np.requirements()[0].min_values, Some(1));
        assert!(np.disruption().consolidate_after.is_never());
        let budget = &np.disruption().budgets[0];
        assert_eq!(budget.parsed_nodes(), Some(BudgetNodes::Count(3)));
        assert!(budget.applies_to(DisruptionReason::Drifted));
        assert!(!budget.applies_to(DisruptionReason::Empty));
        assert!(np.template_labels().is_empty());
    }

    #[test]
    fn replicas_and_the_node_limit_read_the_spec() {
        let np = nodepool(serde_json::json!({
            "template": template(), "replicas": 3, "limits": {"nodes": "5"}
        }));
        assert!(np.is_static());
        assert_eq!(np.replicas(), Some(3));
        assert_eq!(np.node_limit(), Some(5));
        let dynamic =
            nodepool(serde_json::json!({"template": template(), "limits": {"cpu": "10"}}));
        assert_eq!(dynamic.replicas(), None);
        assert_eq!(dynamic.node_limit(), None);
        let negative = nodepool(serde_json::json!({"template": template(), "replicas": -1}));
        assert_eq!(negative.replicas(), Some(0));
    }
}
