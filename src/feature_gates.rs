//! Upstream Karpenter's `FEATURE_GATES` setting (`--feature-gates`): comma-separated
//! `Name=bool` pairs laid over fixed defaults. It lives in the core so that the controller's
//! settings and `kerf plan --disruption` read the same text the same way. The syntax is
//! Kubernetes' `mapStringBool` flag with Go's `strconv.ParseBool` values (`true`, `1`, `t`,
//! `TRUE`, ...), as upstream parses it; names upstream does not know are ignored there, so
//! they are returned here for the caller to warn about rather than refused.

/// The gates upstream v1 defines, with their default values.
pub const DEFAULT_FEATURE_GATES: &str = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false";

/// Optional behaviour switched on or off by `FEATURE_GATES`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    pub node_repair: bool,
    pub reserved_capacity: bool,
    /// Consolidation may replace a spot node with a cheaper spot node.
    pub spot_to_spot_consolidation: bool,
    pub node_overlay: bool,
    pub static_capacity: bool,
}

impl Default for FeatureGates {
    fn default() -> Self {
        Self {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
        }
    }
}

/// Why `FEATURE_GATES` could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FeatureGatesError {
    #[error("malformed pair {0:?}, expect Name=bool")]
    MalformedPair(String),
    #[error("invalid value of {name}: {value:?} (expected true or false)")]
    InvalidValue { name: String, value: String },
}

/// Parsed gates and the names upstream would ignore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedFeatureGates {
    pub gates: FeatureGates,
    pub unknown: Vec<String>,
}

impl FeatureGates {
    /// Parses `text` over the defaults; a gate given twice takes its last value.
    pub fn parse(text: &str) -> Result<ParsedFeatureGates, FeatureGatesError> {
        let mut gates = FeatureGates::default();
        let mut unknown = Vec::new();
        for pair in text.split(',').filter(|p| !p.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| FeatureGatesError::MalformedPair(pair.to_string()))?;
            let (name, value) = (name.trim(), value.trim());
            let value = go_parse_bool(value).ok_or_else(|| FeatureGatesError::InvalidValue {
                name: name.to_string(),
                value: value.to_string(),
            })?;
            match name {
                "NodeRepair" => gates.node_repair = value,
                "ReservedCapacity" => gates.reserved_capacity = value,
                "SpotToSpotConsolidation" => gates.spot_to_spot_consolidation = value,
                "NodeOverlay" => gates.node_overlay = value,
                "StaticCapacity" => gates.static_capacity = value,
                other => unknown.push(other.to_string()),
            }
        }
        Ok(ParsedFeatureGates { gates, unknown })
    }
}

/// Go's `strconv.ParseBool`.
fn go_parse_bool(text: &str) -> Option<bool> {
    match text {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Some(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_upstreams_and_the_default_text_changes_nothing() {
        let parsed = FeatureGates::parse(DEFAULT_FEATURE_GATES).expect("valid");
        assert_eq!(parsed.gates, FeatureGates::default());
        assert!(parsed.unknown.is_empty());
        assert!(!parsed.gates.spot_to_spot_consolidation);
        assert!(parsed.gates.reserved_capacity);
        assert_eq!(
            FeatureGates::parse("").expect("empty").gates,
            FeatureGates::default()
        );
    }

    #[test]
    fn reads_go_booleans_with_spaces_and_keeps_the_last_value() {
        let parsed = FeatureGates::parse(
            " SpotToSpotConsolidation = T ,ReservedCapacity=0,,NodeRepair=1,NodeRepair=false",
        )
        .expect("valid");
        assert!(parsed.gates.spot_to_spot_consolidation);
        assert!(!parsed.gates.reserved_capacity);
        assert!(!parsed.gates.node_repair);
    }

    #[test]
    fn unknown_gates_are_reported_not_refused() {
        let parsed = FeatureGates::parse("Future=true,SpotToSpotConsolidation=true").expect("ok");
        assert_eq!(parsed.unknown, ["Future"]);
        assert!(parsed.gates.spot_to_spot_consolidation);
    }

    #[test]
    fn malformed_pairs_and_values_name_the_problem() {
        assert_eq!(
            FeatureGates::parse("SpotToSpotConsolidation").expect_err("no ="),
            FeatureGatesError::MalformedPair("SpotToSpotConsolidation".into())
        );
        let error = FeatureGates::parse("SpotToSpotConsolidation=yes").expect_err("not a bool");
        assert_eq!(
            error.to_string(),
            "invalid value of SpotToSpotConsolidation: \"yes\" (expected true or false)"
        );
    }
}
