//! What kerf accepts but does not act on yet, said out loud. A setting that upstream honours
//! and kerf parses without acting on would otherwise change nothing silently; each one is
//! named in a start-up warning, and so is every NodePool whose disruption settings
//! (`expireAfter`) would make upstream remove nodes — at start-up and again
//! whenever they change. A setting leaves this list the day kerf implements it.

use std::collections::HashMap;

use kerf::api::{NillableDuration, NodePool};

use crate::settings::{FeatureGates, MinValuesPolicy, PreferencePolicy, ValidSettings};
use crate::state::Change;

/// One warning per accepted setting kerf does not act on yet.
pub fn ignored_settings(settings: &ValidSettings) -> Vec<String> {
    let mut ignored = Vec::new();
    if let Some(queue) = &settings.interruption_queue {
        ignored.push(format!(
            "INTERRUPTION_QUEUE={queue}: kerf does not act on interruption messages yet"
        ));
    }
    let FeatureGates {
        node_repair,
        reserved_capacity,
        spot_to_spot_consolidation: _acted_on_by_disruption,
        node_overlay,
        static_capacity,
        capacity_buffer,
    } = settings.feature_gates;
    for (gate, on) in [
        ("NodeRepair", node_repair),
        ("ReservedCapacity", reserved_capacity),
        ("NodeOverlay", node_overlay),
        ("StaticCapacity", static_capacity),
        ("CapacityBuffer", capacity_buffer),
    ] {
        if on {
            ignored.push(format!(
                "FEATURE_GATES {gate}=true: kerf does not act on this gate yet"
            ));
        }
    }
    if settings.preference_policy == PreferencePolicy::Ignore {
        ignored.push(
            "PREFERENCE_POLICY=Ignore: kerf does not act on it yet and respects preferences"
                .to_owned(),
        );
    }
    if settings.min_values_policy == MinValuesPolicy::BestEffort {
        ignored.push(
            "MIN_VALUES_POLICY=BestEffort: kerf does not act on it yet and keeps minValues strict"
                .to_owned(),
        );
    }
    ignored
}

/// Logs [`ignored_settings`] as warnings.
pub fn warn_ignored_settings(settings: &ValidSettings) {
    for warning in ignored_settings(settings) {
        tracing::warn!(setting = %warning, "setting accepted but not acted on");
    }
}

/// What upstream would disrupt a NodePool's nodes for and kerf does not yet, or `None`.
pub fn ignored_disruption(pool: &NodePool) -> Option<String> {
    let mut ignored = Vec::new();
    if *pool.expire_after() != NillableDuration::Never {
        ignored.push(format!("expireAfter {}", pool.expire_after()));
    }
    (!ignored.is_empty()).then(|| ignored.join(", "))
}

/// A NodePool subscriber warning when a NodePool's ignored disruption settings first appear
/// or change.
pub fn on_node_pool() -> impl FnMut(&NodePool, Change) + Send + 'static {
    let mut warned: HashMap<String, String> = HashMap::new();
    move |pool, change| {
        let name = pool.name().to_owned();
        if change == Change::Deleted {
            warned.remove(&name);
            return;
        }
        let Some(ignored) = ignored_disruption(pool) else {
            warned.remove(&name);
            return;
        };
        if warned.get(&name) != Some(&ignored) {
            tracing::warn!(
                nodepool = %name,
                ignored = %ignored,
                "kerf does not disrupt nodes yet: this NodePool's disruption settings are not acted on"
            );
            warned.insert(name, ignored);
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::settings::Settings;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    fn settings(args: &[&str]) -> ValidSettings {
        let mut argv = vec!["kerf", "--cluster-name", "test"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv)
            .expect("parses")
            .settings
            .validate()
            .expect("valid")
    }

    #[test]
    fn each_ignored_setting_is_named() {
        let warnings = ignored_settings(&settings(&[
            "--interruption-queue",
            "q",
            "--feature-gates",
            "NodeRepair=true,ReservedCapacity=false",
            "--preference-policy",
            "Ignore",
            "--min-values-policy",
            "BestEffort",
        ]));
        let named = |what: &str| warnings.iter().any(|w| w.starts_with(what));
        assert!(named("INTERRUPTION_QUEUE=q"), "{warnings:?}");
        assert!(named("FEATURE_GATES NodeRepair=true"), "{warnings:?}");
        assert!(!named("FEATURE_GATES ReservedCapacity"), "{warnings:?}");
        assert!(named("PREFERENCE_POLICY=Ignore"), "{warnings:?}");
        assert!(named("MIN_VALUES_POLICY=BestEffort"), "{warnings:?}");
        assert_eq!(warnings.len(), 4, "{warnings:?}");
    }

    #[test]
    fn a_nodepool_that_never_disrupts_is_not_warned_about() {
        let pool = |disruption: serde_json::Value| -> NodePool {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "p"},
                "spec": {"disruption": disruption, "template": {"spec": {
                    "expireAfter": "Never",
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "d"},
                    "requirements": []}}}
            }))
            .expect("a NodePool")
        };
        assert_eq!(
            ignored_disruption(&pool(serde_json::json!({"consolidateAfter": "Never"}))),
            None
        );
        // Consolidation is acted on (the disruption loop).
        assert_eq!(
            ignored_disruption(&pool(serde_json::json!({"consolidateAfter": "30s"}))),
            None
        );
    }
}
