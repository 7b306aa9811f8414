//! What kerf accepts but does not act on yet, said out loud. A setting that upstream honours
//! and kerf parses without acting on would otherwise change nothing silently; each one is
//! named in a start-up warning. A setting leaves this list the day kerf implements it
//! (NodePool disruption settings left it when disruption and expiration landed).

use crate::settings::{FeatureGates, ValidSettings};

/// Gates kerf does not act on yet: (name, whether on, upstream's default). Every gate
/// upstream's v1.14 defines is acted on; the destructuring makes a gate added to
/// [`FeatureGates`] say here whether it is.
fn unacted_gates(gates: FeatureGates) -> [(&'static str, bool, bool); 0] {
    let FeatureGates {
        node_repair: _acted_on_by_node_repair,
        reserved_capacity: _acted_on_by_offerings_and_launches,
        spot_to_spot_consolidation: _acted_on_by_disruption,
        node_overlay: _acted_on_by_every_snapshot,
        static_capacity: _acted_on_by_static_capacity,
        capacity_buffer: _acted_on_by_the_buffer_controller,
        nominate_pods: _acted_on_by_registration,
    } = gates;
    []
}

/// One warning per accepted setting kerf does not act on yet that the user turned on: a gate
/// at upstream's default (ReservedCapacity is on by default) is no warning of the user's
/// setting, and is said once at info level instead ([`default_gate_notes`]).
pub fn ignored_settings(settings: &ValidSettings) -> Vec<String> {
    unacted_gates(settings.feature_gates)
        .into_iter()
        .filter(|(_, on, default)| *on && !*default)
        .map(|(gate, _, _)| {
            format!("FEATURE_GATES {gate}=true: kerf does not act on this gate yet")
        })
        .collect()
}

/// What a gate left at an upstream default of on means here: kerf does not (fully) act on
/// it yet, and what it does do.
pub fn default_gate_notes(settings: &ValidSettings) -> Vec<String> {
    unacted_gates(settings.feature_gates)
        .into_iter()
        .filter(|(_, on, default)| *on && *default)
        .map(|(gate, _, _)| {
            format!("FEATURE_GATES {gate} is on (upstream's default); kerf does not act on it yet")
        })
        .collect()
}

/// Logs [`ignored_settings`] as warnings and [`default_gate_notes`] as information.
pub fn warn_ignored_settings(settings: &ValidSettings) {
    for warning in ignored_settings(settings) {
        tracing::warn!(setting = %warning, "setting accepted but not acted on");
    }
    for note in default_gate_notes(settings) {
        tracing::info!(setting = %note, "default setting not acted on");
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

    #[test]
    fn every_gate_is_acted_on_so_none_is_noted_or_warned() {
        let defaults = settings(&[]);
        assert!(ignored_settings(&defaults).is_empty());
        assert!(default_gate_notes(&defaults).is_empty());
        let all_on = settings(&[
            "--feature-gates",
            "NodeRepair=true,ReservedCapacity=true,SpotToSpotConsolidation=true,\
             NodeOverlay=true,StaticCapacity=true,CapacityBuffer=true",
        ]);
        assert!(ignored_settings(&all_on).is_empty());
        assert!(default_gate_notes(&all_on).is_empty());
    }
}
