//! The decision half of the controller's disruption loop, one pass at a time (where
//! [`super::decide`] plays the whole loop offline): [`pass`] runs the voluntary methods in
//! upstream's order — emptiness, drift, multi-node, single-node consolidation; expiration
//! is a controller of its own — and returns the first command with its replacements as
//! NodeClaims to create, plus what the loop reports beside it (eligible nodes, budgets,
//! why nodes stay, each method's evaluation time). [`validate`] is upstream's re-check of a
//! graceful command after its validation period, on the cluster as it is then: every node
//! still a candidate the method may take, the budget still allowing them all, and a fresh
//! simulation still asking for the same action — no new node for a delete, exactly one for
//! a replace whose instance types include every type the command would launch (the command
//! kept only cheaper ones, so a replacement now needing a type outside them is no saving).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use super::candidate::{Blocks, Candidate, candidates, consolidates_underutilized};
use super::report::{BudgetReport, CommandReport, Decision, Method, Reason};
use super::simulate::simulate;
use super::state::{Forms, State, take_input};
use super::{Cluster, DisruptionError, Options, Timeouts, report_command};
use crate::api::DisruptionReason;
use crate::scheduling::PlannedNodeClaim;

/// The methods the disruption controller runs, in its order.
pub const VOLUNTARY_METHODS: [Method; 4] = [
    Method::Emptiness,
    Method::Drift,
    Method::MultiNodeConsolidation,
    Method::SingleNodeConsolidation,
];

/// A command to execute: what the report shows, and the NodeClaims to create for it.
#[derive(Clone, Debug)]
pub struct Planned {
    pub command: CommandReport,
    pub replacements: Vec<PlannedNodeClaim>,
}

/// One pass of the loop.
#[derive(Debug, Default)]
pub struct Pass {
    pub command: Option<Planned>,
    /// Candidates each reason's methods may consider now.
    pub eligible: BTreeMap<&'static str, usize>,
    /// Allowed disruptions per NodePool and reason, before the command.
    pub budgets: Vec<BudgetReport>,
    /// Why managed nodes the methods looked at were left alone.
    pub blocked: HashMap<String, String>,
    /// How long each method evaluated, in the order run (methods after the one that found
    /// a command do not run).
    pub timings: Vec<(Method, Duration)>,
    /// Consolidation methods that ran out of time ([`super::Timeouts`]).
    pub timed_out: Vec<Method>,
    /// The next instant a node's `consolidateAfter` elapses with nothing else changing: a
    /// pass finding nothing stays true until then at most.
    pub next_consolidatable: Option<k8s_openapi::jiff::Timestamp>,
}

/// Upstream's budget reason name of `reason`.
pub fn reason_name(reason: DisruptionReason) -> &'static str {
    match reason {
        DisruptionReason::Empty => "Empty",
        DisruptionReason::Drifted => "Drifted",
        DisruptionReason::Underutilized => "Underutilized",
    }
}

/// One pass over `cluster`: the first command of [`VOLUNTARY_METHODS`], if any, each
/// consolidation method within its `timeouts`.
pub fn pass(
    cluster: &Cluster,
    options: Options,
    timeouts: Timeouts,
) -> Result<Pass, DisruptionError> {
    let input = cluster.scheduling.clone();
    let state = State::for_voluntary_methods(cluster, input, options, Forms::default())?;
    run_pass(state, options, timeouts, &mut Forms::default())
}

/// [`pass`] over a cluster the caller gives up, whose pods the pass edits in place instead
/// of copying every one of them (the controller's snapshot, built for this pass alone). The
/// pass starts from `forms` and leaves there what it prepared, for the next pass.
pub fn pass_owned(
    mut cluster: Cluster,
    options: Options,
    timeouts: Timeouts,
    forms: &mut Forms,
) -> Result<Pass, DisruptionError> {
    let input = take_input(&mut cluster);
    let state = State::for_voluntary_methods(&cluster, input, options, std::mem::take(forms))?;
    run_pass(state, options, timeouts, forms)
}

fn run_pass(
    mut state: State,
    options: Options,
    timeouts: Timeouts,
    forms: &mut Forms,
) -> Result<Pass, DisruptionError> {
    state.timeouts = timeouts;
    let mut out = Pass {
        budgets: state.budget_report()?,
        ..Pass::default()
    };
    let mut blocks = Blocks::default();
    out.eligible = eligible(&state, &candidates(&state, &mut Blocks::default()));
    out.next_consolidatable = next_consolidatable(&state, options);
    for method in VOLUNTARY_METHODS {
        let started = Instant::now();
        let command = state.first_of(&[method], &mut blocks)?;
        out.timings.push((method, started.elapsed()));
        if let Some(command) = command {
            out.command = Some(Planned {
                command: report_command(&command),
                replacements: command
                    .replacements
                    .iter()
                    .map(|r| r.claim.clone())
                    .collect(),
            });
            break;
        }
    }
    out.blocked = blocks.0;
    out.timed_out = state.timed_out;
    *forms = state.forms;
    Ok(out)
}

fn next_consolidatable(state: &State, options: Options) -> Option<k8s_openapi::jiff::Timestamp> {
    let now = options.now.as_second();
    state
        .managed
        .iter()
        .filter(|m| !m.deleting)
        .filter_map(|m| {
            let after = state
                .pool(&m.node_pool)?
                .pool
                .disruption()
                .consolidate_after
                .as_std()?;
            let at = m.last_pod_event?.as_second() + i64::try_from(after.as_secs()).ok()?;
            (at > now).then_some(at)
        })
        .min()
        .and_then(|at| k8s_openapi::jiff::Timestamp::from_second(at).ok())
}

fn eligible(state: &State, candidates: &[Candidate]) -> BTreeMap<&'static str, usize> {
    let graceful = |c: &&Candidate| c.graceful_block.is_none();
    let consolidatable = |c: &&Candidate| c.consolidatable.is_ok();
    let mut out = BTreeMap::new();
    out.insert(
        reason_name(DisruptionReason::Empty),
        candidates
            .iter()
            .filter(|c| c.is_empty())
            .filter(consolidatable)
            .filter(graceful)
            .count(),
    );
    out.insert(
        reason_name(DisruptionReason::Drifted),
        candidates
            .iter()
            .filter(|c| c.drift.is_some() && (c.termination_grace_period || graceful(c)))
            .count(),
    );
    out.insert(
        reason_name(DisruptionReason::Underutilized),
        candidates
            .iter()
            .filter(consolidatable)
            .filter(graceful)
            .filter(|c| {
                c.is_empty()
                    || state
                        .pool(&c.pool)
                        .is_some_and(|p| consolidates_underutilized(p.pool).is_ok())
            })
            .count(),
    );
    out
}

/// Why a command no longer holds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("node {node} is no longer a disruption candidate: {why}")]
    NotCandidate { node: String, why: String },
    #[error(
        "the {reason} budget of NodePool {pool} allows {allowed} disruptions, the command needs {needed}"
    )]
    Budget {
        pool: String,
        reason: &'static str,
        allowed: usize,
        needed: usize,
    },
    #[error("node {0} is no longer empty")]
    NotEmpty(String),
    #[error("scheduling simulation produced new results: {0}")]
    Changed(String),
    /// The cluster cannot be decided on (a malformed NodePool), kept as text so the error
    /// stays comparable.
    #[error("{0}")]
    Input(String),
}

/// Re-checks `planned` on `cluster` as it is now (upstream's validation after the 15 s
/// wait); drift and expiration commands are not validated, as upstream.
pub fn validate(cluster: &Cluster, options: Options, planned: &Planned) -> Result<(), Invalid> {
    let state = State::new(cluster, options).map_err(input_error)?;
    validate_on(state, planned)
}

/// [`validate`] on a cluster the caller gives up, its pods moved into the check, not copied.
pub fn validate_owned(
    mut cluster: Cluster,
    options: Options,
    planned: &Planned,
) -> Result<(), Invalid> {
    let input = take_input(&mut cluster);
    let state = State::with_input(&cluster, input, options).map_err(input_error)?;
    validate_on(state, planned)
}

fn input_error(error: DisruptionError) -> Invalid {
    Invalid::Input(error.to_string())
}

fn validate_on(mut state: State, planned: &Planned) -> Result<(), Invalid> {
    let command = &planned.command;
    let mut blocks = Blocks::default();
    let all = candidates(&state, &mut blocks);
    let by_name: HashMap<&str, &Candidate> = all.iter().map(|c| (c.name.as_str(), c)).collect();
    let mut chosen = Vec::with_capacity(command.nodes.len());
    for node in &command.nodes {
        let Some(c) = by_name.get(node.as_str()) else {
            let why = blocks
                .0
                .get(node)
                .cloned()
                .unwrap_or_else(|| "it is being deleted or gone".to_string());
            return Err(Invalid::NotCandidate {
                node: node.clone(),
                why,
            });
        };
        still_allowed(&state, command.method, c)?;
        chosen.push(*c);
    }
    check_budgets(&state, command, &chosen)?;
    match command.method {
        Method::Emptiness => match chosen.iter().find(|c| !c.is_empty()) {
            Some(c) => Err(Invalid::NotEmpty(c.name.clone())),
            None => Ok(()),
        },
        Method::MultiNodeConsolidation | Method::SingleNodeConsolidation => {
            same_simulation(&mut state, command, &chosen)
        }
        Method::Drift | Method::Expiration => Ok(()),
    }
}

/// Whether `method` may still take `c`: graceful methods need no blocking pod and
/// `consolidateAfter` elapsed; consolidation of a non-empty node needs a policy allowing it.
fn still_allowed(state: &State, method: Method, c: &Candidate) -> Result<(), Invalid> {
    let not = |why: String| Invalid::NotCandidate {
        node: c.name.clone(),
        why,
    };
    if let Some(why) = &c.graceful_block {
        return Err(not(why.clone()));
    }
    c.consolidatable.clone().map_err(not)?;
    if method != Method::Emptiness
        && !c.is_empty()
        && let Some(pool) = state.pool(&c.pool)
    {
        consolidates_underutilized(pool.pool).map_err(not)?;
    }
    Ok(())
}

fn check_budgets(
    state: &State,
    command: &CommandReport,
    chosen: &[&Candidate],
) -> Result<(), Invalid> {
    let reason = match command.reason {
        Reason::Empty => DisruptionReason::Empty,
        Reason::Drifted => DisruptionReason::Drifted,
        Reason::Underutilized => DisruptionReason::Underutilized,
        Reason::Expired => return Ok(()),
    };
    let budgets = state.budgets().map_err(|e| Invalid::Input(e.to_string()))?;
    let mut needed: BTreeMap<&str, usize> = BTreeMap::new();
    for c in chosen {
        *needed.entry(c.pool.as_str()).or_default() += 1;
    }
    for (pool, needed) in needed {
        let allowed = budgets
            .get(&(pool.to_string(), reason))
            .copied()
            .unwrap_or(super::UNLIMITED);
        if needed > allowed {
            return Err(Invalid::Budget {
                pool: pool.to_string(),
                reason: reason_name(reason),
                allowed,
                needed,
            });
        }
    }
    Ok(())
}

fn same_simulation(
    state: &mut State,
    command: &CommandReport,
    chosen: &[&Candidate],
) -> Result<(), Invalid> {
    let simulation =
        simulate(state, chosen).map_err(|e| Invalid::Changed(format!("simulation failed: {e}")))?;
    if let Some(why) = simulation.unplaced {
        return Err(Invalid::Changed(why));
    }
    match (command.decision, simulation.new_claims.as_slice()) {
        (Decision::Delete, []) => Ok(()),
        (Decision::Delete, _) => Err(Invalid::Changed("the pods now need a new node".to_string())),
        (Decision::Replace, []) => Err(Invalid::Changed(
            "the pods now fit without a replacement".to_string(),
        )),
        (Decision::Replace, [claim]) => {
            let now: HashSet<&str> = claim
                .instance_types
                .iter()
                .map(|o| o.name.as_str())
                .collect();
            let planned = command.replacements.iter().flat_map(|r| &r.instance_types);
            match planned.clone().find(|t| !now.contains(t.as_str())) {
                Some(missing) => Err(Invalid::Changed(format!(
                    "instance type {missing} no longer fits the pods"
                ))),
                None => Ok(()),
            }
        }
        (Decision::Replace, claims) => Err(Invalid::Changed(format!(
            "the pods now need {} new nodes",
            claims.len()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::disruption::testing::*;

    fn unlimited() -> PoolBuilder {
        node_pool("default").budgets(json!([{"nodes": "100%"}]))
    }

    fn planned(cluster: &Cluster) -> Planned {
        pass(cluster, options(), Timeouts::NONE)
            .expect("valid input")
            .command
            .expect("a command")
    }

    /// A cluster with one pending pod and one node, its last pod event `seconds` ago
    /// (`consolidateAfter` is 30 s).
    fn pending_beside_a_node_busy_since(seconds: i64) -> Cluster {
        cluster()
            .pool(unlimited().consolidate_after("30s"))
            .node(
                node("n")
                    .size("xlarge")
                    .pods(1)
                    .last_pod_event(ago(seconds)),
            )
            .pending(
                crate::scheduling::testing::pod("waiting")
                    .cpu("100m")
                    .build(),
            )
            .build()
    }

    #[test]
    fn a_pass_places_the_waiting_pods_only_when_a_voluntary_method_may_take_a_node() {
        let waiting = |cluster: &Cluster| {
            let state = State::for_voluntary_methods(
                cluster,
                cluster.scheduling.clone(),
                options(),
                Forms::default(),
            )
            .expect("valid input");
            let on_node = state.input.existing_nodes[0].pods.len();
            (state.input.pods.len(), on_node)
        };
        // Not consolidatable, not drifted: no method can act, so no solve places the pod.
        assert_eq!(waiting(&pending_beside_a_node_busy_since(10)), (1, 1));
        // Consolidatable: the pod is placed on the node before any candidate is simulated.
        assert_eq!(waiting(&pending_beside_a_node_busy_since(60)), (0, 2));
        let busy = pass(
            &pending_beside_a_node_busy_since(10),
            options(),
            Timeouts::NONE,
        );
        assert!(busy.expect("valid input").command.is_none());
    }

    #[test]
    fn a_pass_returns_the_first_command_with_its_replacement_claims() {
        let cluster = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods(4))
            .build();
        let pass = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
        let planned = pass.command.expect("a command");
        assert_eq!(planned.command.method, Method::SingleNodeConsolidation);
        assert_eq!(planned.command.nodes, ["big"]);
        assert_eq!(planned.replacements.len(), 1);
        assert_eq!(planned.replacements[0].pods.len(), 4);
        assert_eq!(
            planned.replacements[0].instance_types[0].name,
            planned.command.replacements[0].instance_types[0]
        );
        // Every method ran until the one that found the command.
        let ran: Vec<Method> = pass.timings.iter().map(|(m, _)| *m).collect();
        assert_eq!(ran, VOLUNTARY_METHODS);
        assert_eq!(pass.eligible["Underutilized"], 1);
        assert_eq!(pass.eligible["Empty"], 0);
        assert_eq!(
            pass.next_consolidatable, None,
            "consolidateAfter passed long ago"
        );
    }

    #[test]
    fn a_pass_on_a_given_up_cluster_decides_as_one_on_a_borrowed_cluster() {
        let big = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods(4))
            .build();
        for cluster in [big, eight_light_nodes()] {
            let borrowed = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
            let mut forms = Forms::default();
            let owned =
                pass_owned(cluster.clone(), options(), Timeouts::NONE, &mut forms).expect("valid");
            let planned = borrowed.command.expect("a command");
            let owned_planned = owned.command.expect("a command");
            assert_eq!(format!("{owned_planned:?}"), format!("{planned:?}"));
            assert_eq!(
                (owned.eligible, owned.blocked),
                (borrowed.eligible, borrowed.blocked)
            );
            assert_eq!(validate(&cluster, options(), &planned), Ok(()));
            assert_eq!(validate_owned(cluster, options(), &planned), Ok(()));
        }
    }

    #[test]
    fn a_pass_starts_from_the_node_forms_the_pass_before_left() {
        let cluster = benchmark_cluster(12, 7);
        let mut forms = Forms::default();
        let first = pass_owned(cluster.clone(), options(), Timeouts::NONE, &mut forms);
        let after_one = forms.nodes_reused();
        let second = pass_owned(cluster.clone(), options(), Timeouts::NONE, &mut forms);
        let command = |p: Result<Pass, DisruptionError>| format!("{:?}", p.expect("valid").command);
        assert_eq!(command(second), command(first));
        assert!(after_one > 0, "the first pass simulates more than once");
        // The second pass reuses what the first did, and also in its first simulation, whose
        // forms a pass starting afresh would build.
        assert!(forms.nodes_reused() - after_one > after_one, "{forms:?}");
    }

    #[test]
    fn taking_the_input_moves_the_pods_and_nodes_and_leaves_the_instance_types() {
        let mut cluster = eight_light_nodes();
        let nodes = cluster.scheduling.existing_nodes.len();
        let types = cluster.scheduling.node_pools[0].instance_types.len();
        let input = take_input(&mut cluster);
        assert_eq!(input.existing_nodes.len(), nodes);
        assert!(cluster.scheduling.existing_nodes.is_empty());
        assert!(cluster.scheduling.pods.is_empty());
        assert_eq!(cluster.scheduling.node_pools[0].instance_types.len(), types);
        assert_eq!(input.node_pools[0].instance_types.len(), types);
    }

    fn eight_light_nodes() -> Cluster {
        (0..8)
            .fold(cluster().pool(unlimited()), |c, i| {
                c.node(node(&format!("n{i}")).pods(1))
            })
            .build()
    }

    #[test]
    fn multi_node_consolidation_keeps_its_best_command_when_its_minute_runs_out() {
        let cluster = eight_light_nodes();
        let unlimited = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
        let all = unlimited.command.expect("a command").command;
        assert_eq!(all.method, Method::MultiNodeConsolidation);
        assert_eq!(all.nodes.len(), 8);
        assert!(unlimited.timed_out.is_empty());

        // 25 s per look: the search tries 5 nodes, then 7, and the minute is over.
        let timeouts = Timeouts {
            clock: ticking,
            ..Timeouts::UPSTREAM
        };
        let cut = pass(&cluster, options(), timeouts).expect("valid input");
        assert_eq!(cut.timed_out, [Method::MultiNodeConsolidation]);
        let partial = cut.command.expect("the best command so far").command;
        assert_eq!(partial.method, Method::MultiNodeConsolidation);
        assert_eq!(partial.nodes.len(), 7, "{partial:?}");
    }

    /// `special` sorts first and blocks every prefix: only the search around it finds the
    /// `lights` light nodes.
    fn a_blocker_before_light_nodes(lights: usize) -> Cluster {
        (0..lights)
            .fold(
                cluster().pool(unlimited()).node(special_node("xlarge")),
                |c, i| c.node(node(&format!("light{i}")).pods(1)),
            )
            .build()
    }

    #[test]
    fn the_search_around_blocking_nodes_stops_at_its_own_bound_and_at_the_minute() {
        let cluster = a_blocker_before_light_nodes(4);
        fn command(p: &Pass) -> &CommandReport {
            &p.command.as_ref().expect("a command").command
        }
        let method = |p: &Pass| command(p).method;
        let unbounded = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
        assert_eq!(method(&unbounded), Method::MultiNodeConsolidation);
        assert_eq!(command(&unbounded).nodes.len(), 4);

        // 25 s per look: the search's own ten seconds are over at its first look, though the
        // method has no limit; single-node consolidation then takes one light node.
        let own = Timeouts {
            clock: ticking,
            ..Timeouts {
                around_blockers: Timeouts::UPSTREAM.around_blockers,
                ..Timeouts::NONE
            }
        };
        let bounded = pass(&cluster, options(), own).expect("valid input");
        assert_eq!(method(&bounded), Method::SingleNodeConsolidation);
        assert!(bounded.timed_out.is_empty(), "{:?}", bounded.timed_out);

        // Without its own bound, the method's minute stops it: two prefixes fail, and the
        // minute is over before the search around `special` finishes.
        let minute = Timeouts {
            clock: ticking,
            around_blockers: None,
            ..Timeouts::UPSTREAM
        };
        let cut = pass(&cluster, options(), minute).expect("valid input");
        assert_eq!(cut.timed_out, [Method::MultiNodeConsolidation]);
        assert_eq!(method(&cut), Method::SingleNodeConsolidation);

        // With eight light nodes the prefix search itself runs out of the minute (its third
        // look): the search around `special` stops at once, and the timeout counts once.
        let longer = a_blocker_before_light_nodes(8);
        let cut = pass(&longer, options(), minute).expect("valid input");
        assert_eq!(cut.timed_out, [Method::MultiNodeConsolidation]);
        assert_eq!(method(&cut), Method::SingleNodeConsolidation);
    }

    #[test]
    fn multi_node_consolidation_tries_the_last_passes_blockers_last() {
        let cluster = a_blocker_before_light_nodes(4);
        // 25 s per look, 60 s for the search: time for one group.
        let one_group = Timeouts {
            clock: ticking,
            around_blockers: Some(Duration::from_secs(60)),
            ..Timeouts::NONE
        };
        let mut forms = Forms::default();
        // Without memory the one group is all five nodes, which `special` fails.
        let first = pass_owned(cluster.clone(), options(), one_group, &mut forms).expect("valid");
        assert_ne!(
            first.command.as_ref().map(|c| c.command.method),
            Some(Method::MultiNodeConsolidation)
        );
        // An unhurried pass isolates `special` and keeps it for the next.
        let unhurried = Timeouts {
            clock: ticking,
            ..Timeouts::NONE
        };
        let whole = pass_owned(cluster.clone(), options(), unhurried, &mut forms).expect("valid");
        assert_eq!(whole.command.expect("a command").command.nodes.len(), 4);
        assert!(forms.blockers.recent("special", ticking()), "{forms:?}");
        // The next pass's searches take `special` last: the command is found at once.
        let next = pass_owned(cluster, options(), one_group, &mut forms).expect("valid");
        let command = next.command.expect("a command").command;
        assert_eq!(command.method, Method::MultiNodeConsolidation);
        assert_eq!(command.nodes.len(), 4);
    }

    #[test]
    fn a_budget_reaches_past_the_last_passes_blockers() {
        // Room for three disruptions: `special` and two light nodes, while it comes first.
        let cluster = (0..4)
            .fold(
                cluster()
                    .pool(node_pool("default").budgets(json!([{"nodes": "3"}])))
                    .node(special_node("xlarge")),
                |c, i| c.node(node(&format!("light{i}")).pods(1)),
            )
            .build();
        let mut forms = Forms::default();
        let nodes = |forms: &mut Forms| {
            let pass = pass_owned(cluster.clone(), options(), Timeouts::NONE, forms);
            let command = pass.expect("valid").command.expect("a command").command;
            assert_eq!(command.method, Method::MultiNodeConsolidation);
            command.nodes.len()
        };
        assert_eq!(nodes(&mut forms), 2);
        assert_eq!(nodes(&mut forms), 3);
    }

    #[test]
    fn single_node_consolidation_gives_up_the_pass_when_its_time_runs_out() {
        let cluster = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods(4))
            .build();
        let expired = Timeouts {
            single_node: Some(Duration::ZERO),
            clock: ticking,
            ..Timeouts::UPSTREAM
        };
        let pass = pass(&cluster, options(), expired).expect("valid input");
        assert!(pass.command.is_none(), "{:?}", pass.command);
        assert_eq!(pass.timed_out, [Method::SingleNodeConsolidation]);
        // Within its time the same pass replaces the node.
        let timely = super::pass(&cluster, options(), Timeouts::UPSTREAM).expect("valid input");
        assert_eq!(
            timely.command.expect("a command").command.method,
            Method::SingleNodeConsolidation
        );
        assert!(timely.timed_out.is_empty());
    }

    #[test]
    fn a_pass_names_when_the_next_node_becomes_consolidatable() {
        let cluster = cluster()
            .pool(unlimited().consolidate_after("5m"))
            .node(node("fresh").last_pod_event(ago(60)))
            .node(node("fresher").last_pod_event(ago(30)))
            .build();
        let pass = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
        assert!(pass.command.is_none());
        assert_eq!(
            pass.next_consolidatable.map(|t| t.as_second()),
            Some(ago(60).as_second() + 300)
        );
    }

    #[test]
    fn a_pass_stops_at_emptiness_and_reports_budgets() {
        let cluster = cluster()
            .pool(node_pool("default").budgets(json!([{"nodes": "1"}])))
            .node(node("a"))
            .node(node("b"))
            .build();
        let pass = pass(&cluster, options(), Timeouts::NONE).expect("valid input");
        let planned = pass.command.expect("a command");
        assert_eq!(planned.command.method, Method::Emptiness);
        assert_eq!(planned.command.nodes, ["a"]);
        assert_eq!(pass.timings.len(), 1);
        let empty = pass
            .budgets
            .iter()
            .find(|b| b.reason == DisruptionReason::Empty)
            .expect("an Empty budget");
        assert_eq!(empty.allowed, 1);
    }

    #[test]
    fn an_unchanged_cluster_validates() {
        let cluster = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods(4))
            .node(node("empty"))
            .build();
        let first = planned(&cluster);
        assert_eq!(validate(&cluster, options(), &first), Ok(()));
    }

    #[test]
    fn an_empty_node_that_got_a_pod_fails_validation() {
        let before = cluster().pool(unlimited()).node(node("a")).build();
        let command = planned(&before);
        let after = cluster().pool(unlimited()).node(node("a").pods(1)).build();
        assert_eq!(
            validate(&after, options(), &command),
            Err(Invalid::NotEmpty("a".into()))
        );
    }

    #[test]
    fn a_node_deleted_meanwhile_fails_validation() {
        let before = cluster().pool(unlimited()).node(node("a")).build();
        let command = planned(&before);
        let after = cluster()
            .pool(unlimited())
            .node(node("a").deleting())
            .build();
        assert!(matches!(
            validate(&after, options(), &command),
            Err(Invalid::NotCandidate { node, .. }) if node == "a"
        ));
    }

    #[test]
    fn a_budget_lowered_meanwhile_fails_validation() {
        let before = cluster()
            .pool(unlimited())
            .node(node("a"))
            .node(node("b"))
            .build();
        let command = planned(&before);
        assert_eq!(command.command.nodes, ["a", "b"]);
        let after = cluster()
            .pool(node_pool("default").budgets(json!([{"nodes": "1"}])))
            .node(node("a"))
            .node(node("b"))
            .build();
        assert!(matches!(
            validate(&after, options(), &command),
            Err(Invalid::Budget {
                allowed: 1,
                needed: 2,
                ..
            })
        ));
    }

    #[test]
    fn a_replacement_whose_pods_grew_past_its_types_fails_validation() {
        let before = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods(4))
            .build();
        let command = planned(&before);
        assert_eq!(command.command.decision, Decision::Replace);
        // The same node now runs pods only the xlarge holds: no cheaper type fits any more.
        let after = cluster()
            .pool(unlimited())
            .node(node("big").size("xlarge").pods_of(1, |i| {
                crate::scheduling::testing::pod(&format!("huge-{i}"))
                    .cpu("12")
                    .memory("20Gi")
                    .build()
            }))
            .build();
        assert!(matches!(
            validate(&after, options(), &command),
            Err(Invalid::Changed(_))
        ));
    }
}
