//! The chart grants the controller no more than it uses. `kerf simulate` runs the controller
//! as the chart's ServiceAccount under the chart's rendered RBAC (`deploy/chart-rbac.json`,
//! kept equal to `helm template` by `cli/tests/chart.rs`), enforced by the API emulator, and
//! reports the requests RBAC refused and the granted rules no request used. One simulation
//! that exercises every actor (provisioning; the `--drift` AMI rollout, whose replacements
//! drain and terminate the drifted nodes; `--interrupt-spot`; `--scale-down` consolidation;
//! the instance-health poller and the start-up reads throughout) must be
//! refused nothing and leave unused only the rules listed in [`NOT_REACHED`], each with why
//! a simulation does not reach it and which test of the controller suite (which runs under
//! the same RBAC and fails on any refusal) does.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Granted rules no simulation reaches, as the summary names them, and why.
const NOT_REACHED: &[(&str, &str)] = &[
    (
        r#"ClusterRole karpenter-core: list nodeoverlays in API group "karpenter.sh""#,
        NODE_OVERLAY,
    ),
    (
        r#"ClusterRole karpenter-core: watch nodeoverlays in API group "karpenter.sh""#,
        NODE_OVERLAY,
    ),
    (
        r#"ClusterRole karpenter-core: patch nodeoverlays/status in API group "karpenter.sh""#,
        NODE_OVERLAY,
    ),
    (
        r#"ClusterRole karpenter-core: list capacitybuffers in API group "autoscaling.x-k8s.io""#,
        CAPACITY_BUFFER,
    ),
    (
        r#"ClusterRole karpenter-core: watch capacitybuffers in API group "autoscaling.x-k8s.io""#,
        CAPACITY_BUFFER,
    ),
    (
        r#"ClusterRole karpenter-core: patch capacitybuffers/status in API group "autoscaling.x-k8s.io""#,
        CAPACITY_BUFFER,
    ),
    (
        r#"ClusterRole karpenter-core: get podtemplates in API group """#,
        CAPACITY_BUFFER,
    ),
    (
        r#"ClusterRole karpenter-core: get deployments in API group "apps""#,
        SCALABLE_REF,
    ),
    (
        r#"ClusterRole karpenter-core: get replicasets in API group "apps""#,
        SCALABLE_REF_KINDS,
    ),
    (
        r#"ClusterRole karpenter-core: get statefulsets in API group "apps""#,
        SCALABLE_REF_KINDS,
    ),
    (
        r#"Role karpenter/karpenter: get leases named ["karpenter-leader-election"] in API group "coordination.k8s.io""#,
        LEADER_ELECTION,
    ),
    (
        r#"Role karpenter/karpenter: update leases named ["karpenter-leader-election"] in API group "coordination.k8s.io""#,
        LEADER_ELECTION,
    ),
    (
        r#"Role karpenter/karpenter: create leases in API group "coordination.k8s.io""#,
        LEADER_ELECTION,
    ),
    (
        r#"ClusterRole karpenter-core: delete pods in API group """#,
        "a pod is deleted only when a drain outlives its NodeClaim's terminationGracePeriod \
         (a PDB or do-not-disrupt holding the eviction until the deadline); the simulation's \
         NodePools set none. Used by actors/tests/controller/termination.rs::\
         the_termination_grace_period_forces_out_what_budgets_and_do_not_disrupt_hold",
    ),
    (
        r#"ClusterRole karpenter-core: patch events in API group """#,
        "an Event is patched only when an identical one (not de-duplicated) repeats within \
         the correlation window, which depends on timing a simulation does not control. Used \
         by actors/tests/controller/events.rs::\
         the_recorder_counts_identical_events_and_drops_deduplicated_ones",
    ),
];

/// Why the alpha kinds' rules are not reached: the simulation runs without their gates.
const NODE_OVERLAY: &str = "NodeOverlays are watched and their status written only with the \
     NodeOverlay gate, which this simulation leaves off. Used by \
     actors/tests/controller/overlays.rs::\
     a_priced_overlay_brings_a_type_among_the_cheapest_and_the_heavier_one_wins";

const CAPACITY_BUFFER: &str = "CapacityBuffers are watched, resolved (their PodTemplate) and \
     their status written only with the CapacityBuffer gate, which this simulation leaves \
     off. Used by actors/tests/controller/buffers.rs::\
     a_buffer_keeps_room_for_its_placeholder_pods_and_refills_it";

const SCALABLE_REF: &str = "a CapacityBuffer's scalableRef, read only with the CapacityBuffer \
     gate, which this simulation leaves off. Used by actors/tests/controller/buffers.rs::\
     a_scalable_ref_buffer_takes_a_percentage_of_its_workload";

const SCALABLE_REF_KINDS: &str = "a CapacityBuffer's scalableRef naming a StatefulSet or a \
     ReplicaSet: the same read as a Deployment's (capacity_buffer::resolve_scalable), which \
     actors/tests/controller/buffers.rs::a_scalable_ref_buffer_takes_a_percentage_of_its_workload \
     reaches; no test names these two kinds yet";

/// Why the leader Lease's rules are not reached.
const LEADER_ELECTION: &str = "kerf simulate runs one replica, without leader election: a lone \
     replica gains nothing from a Lease, and the short Lease a fast run needs lapses on a \
     loaded machine and stalls the run (tried: 300 pods timed out at load 14). Used by \
     actors/tests/controller/leader.rs and failover.rs, and by scenarios with several replicas";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// `ClusterRole karpenter-core: get nodes in API group ""` for every verb, resource and group
/// of every rule in the rendered ClusterRoles and Roles (bound or not).
fn rendered_grants() -> Vec<String> {
    let text = std::fs::read_to_string(repo().join("deploy/chart-rbac.json")).unwrap();
    let objects: Vec<Value> = serde_json::from_str(&text).unwrap();
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|s| s.as_str().unwrap().to_owned())
            .collect()
    };
    let mut grants = Vec::new();
    for role in &objects {
        let role_name = match role["kind"].as_str().unwrap() {
            "ClusterRole" => format!("ClusterRole {}", role["metadata"]["name"].as_str().unwrap()),
            "Role" => format!(
                "Role {}/{}",
                role["metadata"]["namespace"].as_str().unwrap(),
                role["metadata"]["name"].as_str().unwrap()
            ),
            _ => continue,
        };
        for rule in role["rules"].as_array().unwrap() {
            let names = strings(&rule["resourceNames"]);
            let named = if names.is_empty() {
                String::new()
            } else {
                format!(" named {names:?}")
            };
            for verb in strings(&rule["verbs"]) {
                for group in strings(&rule["apiGroups"]) {
                    for resource in strings(&rule["resources"]) {
                        grants.push(format!(
                            "{role_name}: {verb} {resource}{named} in API group {group:?}"
                        ));
                    }
                }
            }
        }
    }
    grants
}

#[test]
fn the_listed_exceptions_are_rules_the_chart_grants() {
    let grants = rendered_grants();
    for (rule, _why) in NOT_REACHED {
        assert!(
            grants.iter().any(|g| g == rule),
            "{rule} is no longer in deploy/chart-rbac.json: drop it from NOT_REACHED"
        );
    }
}

#[test]
fn a_simulation_of_every_actor_is_refused_nothing_and_uses_every_granted_rule() {
    let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
        .args(["simulate", "--fast", "-o", "json", "--duration", "120s"])
        .args(["--pods", "12", "--drift", "--interrupt-spot", "0.5"])
        .args(["--scale-down", "0.5"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "kerf simulate failed: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "complete", "{stderr}");
    assert!(
        summary["interruptions"]["interruptedNodes"]
            .as_u64()
            .unwrap()
            > 0,
        "the interruption phase ran: {}",
        summary["interruptions"]
    );
    assert!(
        summary["drift"]["drifted"].as_u64().unwrap() > 0,
        "the drift phase ran: {}",
        summary["drift"]
    );
    let rbac = &summary["rbac"];
    assert_eq!(
        rbac["refused"],
        serde_json::json!([]),
        "the chart's RBAC refused the controller these (grant them in deploy/chart/templates)"
    );
    let unexpected: Vec<&str> = rbac["unused"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g.as_str().unwrap())
        .filter(|g| NOT_REACHED.iter().all(|(rule, _)| rule != g))
        .collect();
    assert!(
        unexpected.is_empty(),
        "the chart grants the controller rules no request used (drop them from \
         deploy/chart/templates, or list them in NOT_REACHED with the reason): {unexpected:#?}"
    );
}
