//! What kerf accepts but does not act on yet, said out loud. A setting that upstream honours
//! and kerf parses without acting on would otherwise change nothing silently; each one is
//! named in a start-up warning. A setting leaves this list the day kerf implements it
//! (NodePool disruption settings left it when disruption and expiration landed).

use crate::settings::{FeatureGates, ValidSettings};

/// One warning per accepted setting kerf does not act on yet.
pub fn ignored_settings(settings: &ValidSettings) -> Vec<String> {
    let mut ignored = Vec::new();
    let FeatureGates {
        // Acted on: `node_repair`.
        node_repair: _,
        reserved_capacity,
        spot_to_spot_consolidation: _acted_on_by_disruption,
        node_overlay,
        static_capacity,
        capacity_buffer,
        nominate_pods: _acted_on_by_registration,
    } = settings.feature_gates;
    for (gate, on) in [
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
    ignored
}

/// Logs [`ignored_settings`] as warnings.
pub fn warn_ignored_settings(settings: &ValidSettings) {
    for warning in ignored_settings(settings) {
        tracing::warn!(setting = %warning, "setting accepted but not acted on");
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
        assert!(!named("INTERRUPTION_QUEUE"), "acted on now: {warnings:?}");
        assert!(
            !named("FEATURE_GATES NodeRepair"),
            "acted on now: {warnings:?}"
        );
        assert!(!named("FEATURE_GATES ReservedCapacity"), "{warnings:?}");
        assert!(!named("PREFERENCE_POLICY"), "acted on now: {warnings:?}");
        assert!(!named("MIN_VALUES_POLICY"), "acted on now: {warnings:?}");
        assert!(warnings.is_empty(), "{warnings:?}");
    }
}
