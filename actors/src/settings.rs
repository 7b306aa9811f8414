//! The controller's settings, named and defaulted as upstream Karpenter's (core and AWS
//! provider): each is a flag and an environment variable (`--batch-idle-duration` /
//! `BATCH_IDLE_DURATION`). [`Settings`] is what clap reads; [`Settings::validate`] turns it into
//! [`ValidSettings`], refusing a bad value with an error that names the setting, so a
//! misconfigured daemon stops at start-up instead of misbehaving later.

use std::time::Duration;

use clap::Args;

/// Every setting as read from flags and the environment (upstream names and defaults).
#[derive(Args, Debug, Clone, PartialEq)]
pub struct Settings {
    /// [REQUIRED] The Kubernetes cluster name for resource discovery.
    #[arg(long, env = "CLUSTER_NAME", default_value = "")]
    pub cluster_name: String,
    /// The external cluster endpoint new nodes connect to (discovered when empty).
    #[arg(long, env = "CLUSTER_ENDPOINT", default_value = "")]
    pub cluster_endpoint: String,
    /// Cluster CA bundle for nodes (taken from the controller's TLS config when empty).
    #[arg(long, env = "CLUSTER_CA_BUNDLE", default_value = "")]
    pub cluster_ca_bundle: String,
    /// SQS queue for interruption events; interruption handling is off when empty.
    #[arg(long, env = "INTERRUPTION_QUEUE", default_value = "")]
    pub interruption_queue: String,
    /// Longest gap between new pending pods that still extends a batching window.
    #[arg(long, env = "BATCH_IDLE_DURATION", default_value = "1s", value_parser = go_duration)]
    pub batch_idle_duration: Duration,
    /// Longest a batching window stays open.
    #[arg(long, env = "BATCH_MAX_DURATION", default_value = "10s", value_parser = go_duration)]
    pub batch_max_duration: Duration,
    /// Fraction of memory subtracted from every instance type for the hypervisor.
    #[arg(long, env = "VM_MEMORY_OVERHEAD_PERCENT", default_value_t = 0.075)]
    pub vm_memory_overhead_percent: f64,
    /// ENIs left out of the max-pods and kube-reserved calculations.
    #[arg(long, env = "RESERVED_ENIS", default_value_t = 0)]
    pub reserved_enis: u32,
    /// Assume AWS services without a VPC endpoint (e.g. pricing) are unreachable.
    #[arg(long, env = "ISOLATED_VPC", default_value_t = false, action = clap::ArgAction::Set)]
    pub isolated_vpc: bool,
    /// Log verbosity: `debug`, `info`, `warn` or `error`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Optional features, `Name=true|false` separated by commas.
    #[arg(long, env = "FEATURE_GATES", default_value = DEFAULT_FEATURE_GATES)]
    pub feature_gates: String,
    /// Port of the Prometheus `/metrics` endpoint.
    #[arg(long, env = "METRICS_PORT", default_value_t = 8080)]
    pub metrics_port: u16,
    /// Port of the `/healthz` and `/readyz` probes.
    #[arg(long, env = "HEALTH_PROBE_PORT", default_value_t = 8081)]
    pub health_probe_port: u16,
    /// Smoothed queries per second to the API server, per kind of object (as upstream).
    #[arg(long, env = "KUBE_CLIENT_QPS", default_value_t = 200)]
    pub kube_client_qps: u32,
    /// Burst of queries to the API server above the smoothed rate, per kind of object.
    #[arg(long, env = "KUBE_CLIENT_BURST", default_value_t = 300)]
    pub kube_client_burst: u32,
    /// Run without leader election (a single replica).
    #[arg(long, env = "DISABLE_LEADER_ELECTION", default_value_t = false, action = clap::ArgAction::Set)]
    pub disable_leader_election: bool,
    /// Name of the leader election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_NAME",
        default_value = "karpenter-leader-election"
    )]
    pub leader_election_name: String,
    /// Namespace of the leader election Lease (the controller's own namespace when empty).
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", default_value = "")]
    pub leader_election_namespace: String,
    /// Whether preferred affinities and ScheduleAnyway spreads are honoured: `Respect` or `Ignore`.
    #[arg(long, env = "PREFERENCE_POLICY", default_value = "Respect")]
    pub preference_policy: String,
    /// Whether `minValues` may be relaxed: `Strict` or `BestEffort`.
    #[arg(long, env = "MIN_VALUES_POLICY", default_value = "Strict")]
    pub min_values_policy: String,
    /// Disable cluster state metrics: pod, node and NodePool gauges, pod latencies and
    /// status-condition metrics.
    #[arg(long, env = "DISABLE_CLUSTER_STATE_OBSERVABILITY", default_value_t = false, action = clap::ArgAction::Set)]
    pub disable_cluster_state_observability: bool,
}

/// Upstream's feature gate defaults.
pub const DEFAULT_FEATURE_GATES: &str = "NodeRepair=false,ReservedCapacity=true,SpotToSpotConsolidation=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false";

/// Go's `time.ParseDuration` syntax, as upstream's duration flags take.
fn go_duration(text: &str) -> Result<Duration, String> {
    kerf::api::duration::Duration::parse(text)
        .map(|d| d.as_std())
        .map_err(|e| e.to_string())
}

/// A setting whose value cannot be used; the message names the setting.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SettingsError {
    #[error("CLUSTER_NAME (--cluster-name) is required")]
    MissingClusterName,
    #[error("VM_MEMORY_OVERHEAD_PERCENT (--vm-memory-overhead-percent) must be in [0, 1), got {0}")]
    VmMemoryOverhead(f64),
    #[error("BATCH_IDLE_DURATION (--batch-idle-duration) must be positive")]
    BatchIdleZero,
    #[error(
        "BATCH_MAX_DURATION (--batch-max-duration) {max:?} must be at least BATCH_IDLE_DURATION {idle:?}"
    )]
    BatchMaxBelowIdle { idle: Duration, max: Duration },
    #[error("LOG_LEVEL (--log-level) must be one of debug, info, warn, error; got {0:?}")]
    LogLevel(String),
    #[error("FEATURE_GATES (--feature-gates): {0}")]
    FeatureGates(String),
    #[error("KUBE_CLIENT_QPS (--kube-client-qps) must be positive")]
    KubeClientQps,
    #[error(
        "KUBE_CLIENT_BURST (--kube-client-burst) {burst} must be at least KUBE_CLIENT_QPS {qps}"
    )]
    KubeClientBurst { qps: u32, burst: u32 },
    #[error("PREFERENCE_POLICY (--preference-policy) must be Respect or Ignore; got {0:?}")]
    PreferencePolicy(String),
    #[error("MIN_VALUES_POLICY (--min-values-policy) must be Strict or BestEffort; got {0:?}")]
    MinValuesPolicy(String),
}

/// Log verbosity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    /// The `tracing` filter directive for this level.
    pub fn directive(self) -> &'static str {
        match self {
            Self::Debug => "debug",
            Self::Info => "info",
            Self::Warn => "warn",
            Self::Error => "error",
        }
    }
}

/// Optional features (upstream's gates).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FeatureGates {
    pub node_repair: bool,
    pub reserved_capacity: bool,
    pub spot_to_spot_consolidation: bool,
    pub node_overlay: bool,
    pub static_capacity: bool,
    pub capacity_buffer: bool,
    /// kerf's own gate, on by default (upstream has no such behaviour): registration writes
    /// `status.nominatedNodeName` on the pods a NodeClaim was launched for (KEP-5278), so
    /// the kube-scheduler keeps their room for them.
    pub nominate_pods: bool,
}

impl FeatureGates {
    /// Parses `Name=bool,...` on top of upstream's defaults.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut gates = Self {
            node_repair: false,
            reserved_capacity: true,
            spot_to_spot_consolidation: false,
            node_overlay: false,
            static_capacity: false,
            capacity_buffer: false,
            nominate_pods: true,
        };
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (name, value) = entry
                .split_once('=')
                .ok_or_else(|| format!("{entry:?} is not Name=true|false"))?;
            let value: bool = value
                .trim()
                .parse()
                .map_err(|_| format!("{name}: {value:?} is not true or false"))?;
            let slot = match name.trim() {
                "NodeRepair" => &mut gates.node_repair,
                "ReservedCapacity" => &mut gates.reserved_capacity,
                "SpotToSpotConsolidation" => &mut gates.spot_to_spot_consolidation,
                "NodeOverlay" => &mut gates.node_overlay,
                "StaticCapacity" => &mut gates.static_capacity,
                "CapacityBuffer" => &mut gates.capacity_buffer,
                "NominatePods" => &mut gates.nominate_pods,
                other => return Err(format!("unknown feature gate {other:?}")),
            };
            *slot = value;
        }
        Ok(gates)
    }
}

/// The scheduler's own policies: the settings name them, every solve applies them.
pub use kerf::scheduling::{MinValuesPolicy, PreferencePolicy};

/// Settings checked and parsed; the daemon is wired from this.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidSettings {
    pub cluster_name: String,
    pub cluster_endpoint: Option<String>,
    pub cluster_ca_bundle: Option<String>,
    pub interruption_queue: Option<String>,
    pub batch_idle_duration: Duration,
    pub batch_max_duration: Duration,
    pub vm_memory_overhead_percent: f64,
    pub reserved_enis: u32,
    pub isolated_vpc: bool,
    pub log_level: LogLevel,
    pub feature_gates: FeatureGates,
    pub metrics_port: u16,
    pub health_probe_port: u16,
    pub kube_client_qps: u32,
    pub kube_client_burst: u32,
    pub leader_election: Option<LeaderElectionSettings>,
    pub preference_policy: PreferencePolicy,
    pub min_values_policy: MinValuesPolicy,
    /// Whether the metrics computed from cluster state (and the trackers behind them) run.
    pub cluster_state_observability: bool,
}

/// Where the leader election Lease lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderElectionSettings {
    pub name: String,
    /// `None`: the namespace the controller runs in.
    pub namespace: Option<String>,
}

fn non_empty(text: String) -> Option<String> {
    (!text.is_empty()).then_some(text)
}

impl Settings {
    /// Checks every setting; the first bad one is reported by name.
    pub fn validate(self) -> Result<ValidSettings, SettingsError> {
        // Destructured field by field: a new setting must be handled here to compile.
        let Settings {
            cluster_name,
            cluster_endpoint,
            cluster_ca_bundle,
            interruption_queue,
            batch_idle_duration,
            batch_max_duration,
            vm_memory_overhead_percent,
            reserved_enis,
            isolated_vpc,
            log_level,
            feature_gates,
            metrics_port,
            health_probe_port,
            kube_client_qps,
            kube_client_burst,
            disable_leader_election,
            leader_election_name,
            leader_election_namespace,
            preference_policy,
            min_values_policy,
            disable_cluster_state_observability,
        } = self;
        if cluster_name.is_empty() {
            return Err(SettingsError::MissingClusterName);
        }
        if !(0.0..1.0).contains(&vm_memory_overhead_percent) {
            return Err(SettingsError::VmMemoryOverhead(vm_memory_overhead_percent));
        }
        if batch_idle_duration.is_zero() {
            return Err(SettingsError::BatchIdleZero);
        }
        if batch_max_duration < batch_idle_duration {
            return Err(SettingsError::BatchMaxBelowIdle {
                idle: batch_idle_duration,
                max: batch_max_duration,
            });
        }
        if kube_client_qps == 0 {
            return Err(SettingsError::KubeClientQps);
        }
        if kube_client_burst < kube_client_qps {
            return Err(SettingsError::KubeClientBurst {
                qps: kube_client_qps,
                burst: kube_client_burst,
            });
        }
        Ok(ValidSettings {
            cluster_name,
            cluster_endpoint: non_empty(cluster_endpoint),
            cluster_ca_bundle: non_empty(cluster_ca_bundle),
            interruption_queue: non_empty(interruption_queue),
            batch_idle_duration,
            batch_max_duration,
            vm_memory_overhead_percent,
            reserved_enis,
            isolated_vpc,
            log_level: parse_log_level(&log_level)?,
            feature_gates: FeatureGates::parse(&feature_gates)
                .map_err(SettingsError::FeatureGates)?,
            metrics_port,
            health_probe_port,
            kube_client_qps,
            kube_client_burst,
            leader_election: (!disable_leader_election).then(|| LeaderElectionSettings {
                name: leader_election_name,
                namespace: non_empty(leader_election_namespace),
            }),
            preference_policy: match preference_policy.as_str() {
                "Respect" => PreferencePolicy::Respect,
                "Ignore" => PreferencePolicy::Ignore,
                _ => return Err(SettingsError::PreferencePolicy(preference_policy)),
            },
            min_values_policy: match min_values_policy.as_str() {
                "Strict" => MinValuesPolicy::Strict,
                "BestEffort" => MinValuesPolicy::BestEffort,
                _ => return Err(SettingsError::MinValuesPolicy(min_values_policy)),
            },
            cluster_state_observability: !disable_cluster_state_observability,
        })
    }
}

fn parse_log_level(text: &str) -> Result<LogLevel, SettingsError> {
    match text.to_ascii_lowercase().as_str() {
        "debug" => Ok(LogLevel::Debug),
        "info" => Ok(LogLevel::Info),
        "warn" => Ok(LogLevel::Warn),
        "error" => Ok(LogLevel::Error),
        _ => Err(SettingsError::LogLevel(text.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        settings: Settings,
    }

    fn parse(args: &[&str]) -> Result<Settings, clap::Error> {
        let mut argv = vec!["kerf"];
        argv.extend_from_slice(args);
        Cli::try_parse_from(argv).map(|c| c.settings)
    }

    #[test]
    fn defaults_match_upstream() {
        let s = parse(&["--cluster-name", "c"])
            .expect("parses")
            .validate()
            .expect("valid");
        assert_eq!(s.batch_idle_duration, Duration::from_secs(1));
        assert_eq!(s.batch_max_duration, Duration::from_secs(10));
        assert!((s.vm_memory_overhead_percent - 0.075).abs() < 1e-12);
        assert_eq!(s.reserved_enis, 0);
        assert_eq!((s.metrics_port, s.health_probe_port), (8080, 8081));
        assert_eq!((s.kube_client_qps, s.kube_client_burst), (200, 300));
        assert_eq!(s.log_level, LogLevel::Info);
        assert!(s.feature_gates.reserved_capacity);
        assert!(!s.feature_gates.spot_to_spot_consolidation);
        assert_eq!(
            s.leader_election,
            Some(LeaderElectionSettings {
                name: "karpenter-leader-election".into(),
                namespace: None
            })
        );
        assert_eq!(s.interruption_queue, None);
    }

    #[test]
    fn go_durations_are_accepted_and_bad_ones_name_the_flag() {
        let s = parse(&[
            "--cluster-name",
            "c",
            "--batch-idle-duration",
            "500ms",
            "--batch-max-duration",
            "1m30s",
        ])
        .expect("parses");
        assert_eq!(s.batch_idle_duration, Duration::from_millis(500));
        assert_eq!(s.batch_max_duration, Duration::from_secs(90));
        let err = parse(&["--batch-idle-duration", "soon"]).expect_err("rejected");
        assert!(err.to_string().contains("--batch-idle-duration"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_setting() {
        let cases: [(&[&str], &str); 7] = [
            (&[], "CLUSTER_NAME"),
            (
                &["--cluster-name", "c", "--vm-memory-overhead-percent", "1.5"],
                "VM_MEMORY_OVERHEAD_PERCENT",
            ),
            (
                &["--cluster-name", "c", "--log-level", "chatty"],
                "LOG_LEVEL",
            ),
            (
                &["--cluster-name", "c", "--feature-gates", "Warp=true"],
                "FEATURE_GATES",
            ),
            (
                &["--cluster-name", "c", "--batch-max-duration", "100ms"],
                "BATCH_MAX_DURATION",
            ),
            (
                &["--cluster-name", "c", "--kube-client-burst", "10"],
                "KUBE_CLIENT_BURST",
            ),
            (
                &["--cluster-name", "c", "--preference-policy", "Maybe"],
                "PREFERENCE_POLICY",
            ),
        ];
        for (args, name) in cases {
            let err = parse(args)
                .expect("parses")
                .validate()
                .expect_err("rejected");
            assert!(err.to_string().contains(name), "{args:?}: {err}");
        }
    }

    #[test]
    fn feature_gates_override_defaults() {
        let g = FeatureGates::parse("SpotToSpotConsolidation=true, ReservedCapacity=false")
            .expect("parses");
        assert!(g.spot_to_spot_consolidation);
        assert!(!g.reserved_capacity);
        assert!(FeatureGates::parse("NodeRepair").is_err());
        assert!(FeatureGates::parse("NodeRepair=yes").is_err());
    }

    #[test]
    fn disabling_leader_election_drops_its_settings() {
        let s = parse(&["--cluster-name", "c", "--disable-leader-election", "true"])
            .expect("parses")
            .validate()
            .expect("valid");
        assert_eq!(s.leader_election, None);
    }
}
