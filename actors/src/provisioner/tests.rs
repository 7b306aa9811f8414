//! A round through the NodePoolSchedulers plans exactly what the core's sequential solve
//! plans for the same snapshot, with one scheduler per NodePool.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use kerf::cluster::snapshot;
use kerf::scheduling::{SchedulingInput, solve};
use serde_json::json;

use super::*;
use crate::nodeclaim_creator::{CreateError, node_claim};
use crate::state::{ObjectKey, Writers};

/// Stands in for the NodeClaimCreator: records what it is asked to launch, answers a few
/// milliseconds later (as a create would) with the NodeClaim the NodeClaimCreator would create, and
/// records how many launches it had in flight at once.
struct Recorder {
    recorded: Arc<Mutex<Vec<PlannedNodeClaim>>>,
    depth: MailboxDepth,
    in_flight: Arc<AtomicUsize>,
    most_in_flight: Arc<AtomicUsize>,
}

impl Actor for Recorder {
    type Context = Context<Self>;
}

impl Handler<CreateNodeClaim> for Recorder {
    type Result = ResponseFuture<Result<kerf::api::NodeClaim, CreateError>>;

    fn handle(&mut self, launch: CreateNodeClaim, _ctx: &mut Context<Self>) -> Self::Result {
        self.depth.taken();
        let mut recorded = self.recorded.lock().expect("not poisoned");
        let mut claim = node_claim(&launch.claim, &launch.pool);
        claim.metadata.name = Some(format!("{}-{}", launch.pool.name(), recorded.len()));
        recorded.push(launch.claim);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most_in_flight.fetch_max(now, Ordering::SeqCst);
        let in_flight = Arc::clone(&self.in_flight);
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok(claim)
        })
    }
}

/// At most this many launches at once: fewer than the round plans.
const CREATOR_TEST_CAPACITY: usize = 2;

/// A started [`Recorder`] behind a mailbox of [`CREATOR_TEST_CAPACITY`].
fn recorder(
    recorded: &Arc<Mutex<Vec<PlannedNodeClaim>>>,
    most_in_flight: &Arc<AtomicUsize>,
) -> Outbox<CreateNodeClaim> {
    let depth = MailboxDepth::new("nodeclaim-creator-test", CREATOR_TEST_CAPACITY);
    let recorder = crate::supervisor::start(
        "nodeclaim-creator-test",
        depth.clone(),
        crate::supervisor::once(Recorder {
            recorded: Arc::clone(recorded),
            depth: depth.clone(),
            in_flight: Arc::new(AtomicUsize::new(0)),
            most_in_flight: Arc::clone(most_in_flight),
        }),
    );
    Outbox::new(&recorder, depth)
}

/// Provisioning through `creator`, counting what `created` holds as in flight.
fn provisioning(
    creator: Outbox<CreateNodeClaim>,
    created: CreatedClaims,
    catalog: Catalog,
) -> Provisioning {
    Provisioning {
        creator,
        created,
        offerings: None,
        catalog,
        controller: ControllerSettings::default(),
        policies: kerf::scheduling::SolvePolicies::default(),
        events: crate::events::EventRecorder::disabled(),
        instance_types: InstanceTypeCache::default(),
        resolves_node_classes: false,
    }
}

fn node_pool(name: &str) -> NodePool {
    serde_json::from_value(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "taints": [{"key": "team", "value": name, "effect": "NoSchedule"}],
            "requirements": [
                {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m"]}
            ]
        }}}
    }))
    .expect("a valid NodePool")
}

/// An unschedulable pod tolerating `team` (none: tolerating nothing).
fn pod(name: &str, team: Option<&str>, cpu: &str) -> k8s_openapi::api::core::v1::Pod {
    let tolerations = team.map_or(
        json!([]),
        |t| json!([{"key": "team", "operator": "Equal", "value": t, "effect": "NoSchedule"}]),
    );
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "resourceVersion": "1", "labels": {"app": team.unwrap_or("none")}},
        "spec": {
            "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            "tolerations": tolerations,
            "topologySpreadConstraints": [{
                "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": team.unwrap_or("none")}}
            }]
        },
        "status": {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
        ]}
    }))
    .expect("a valid pod")
}

/// Every store listed once: the state counts as synced.
fn synced(writers: &mut Writers) {
    writers.pods.finish_relist();
    writers.nodes.finish_relist();
    writers.nodeclaims.finish_relist();
    writers.nodepools.finish_relist();
    writers.nodeclasses.finish_relist();
    writers.daemonsets.finish_relist();
    writers.pdbs.finish_relist();
    writers.persistent_volumes.finish_relist();
    writers.persistent_volume_claims.finish_relist();
    writers.storage_classes.finish_relist();
    writers.csi_nodes.finish_relist();
    writers.node_overlays.finish_relist();
    writers.capacity_buffers.finish_relist();
}

/// The core's sequential solve of the snapshot the Provisioner builds from `state`.
fn sequential(state: &ClusterState, catalog: &Catalog) -> SchedulingInput {
    let inventory = inventory::of(state, []);
    let snapshot = snapshot::build(&inventory, catalog, ControllerSettings::default())
        .expect("a valid snapshot");
    let mut input = snapshot.input;
    input.options.max_instance_types = MAX_INSTANCE_TYPES;
    input.options.parallel = false;
    input
}

/// Runs `test` inside an actix system on a multi-threaded tokio runtime, as the daemon.
fn run<Fut: std::future::Future<Output = ()>>(test: impl FnOnce() -> Fut) {
    let system = crate::supervisor::system(2).expect("runtime builds");
    system.block_on(test());
}

#[test]
fn a_round_solved_by_the_node_pool_schedulers_equals_the_sequential_solve() {
    run(|| async {
        let (state, mut writers) = ClusterState::new();
        for name in ["a", "b"] {
            writers
                .nodepools
                .apply(ObjectKey::new(None, name), node_pool(name));
        }
        let mut pods = Vec::new();
        for i in 0..5 {
            pods.push(pod(&format!("a-{i}"), Some("a"), "1500m"));
            pods.push(pod(&format!("b-{i}"), Some("b"), "700m"));
        }
        pods.push(pod("nowhere", None, "1"));
        for p in pods {
            let name = p.metadata.name.clone().expect("named");
            writers
                .pods
                .apply(ObjectKey::new(Some("default"), &name), p);
        }
        synced(&mut writers);
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let expected = solve(&sequential(&state, &catalog)).expect("solves");
        assert!(expected.new_node_claims.len() >= 2, "{expected:?}");

        let recorded = Arc::new(Mutex::new(Vec::new()));
        let most_in_flight = Arc::new(AtomicUsize::new(0));
        let provisioning = provisioning(
            recorder(&recorded, &most_in_flight),
            CreatedClaims::default(),
            catalog,
        );
        let (_leader_tx, leader) = watch::channel(true);
        let depth = MailboxDepth::new("provisioner-test", PROVISIONER_MAILBOX_CAPACITY);
        let Started {
            addr,
            mut rounds,
            node_pool_schedulers: schedulers,
        } = Provisioner::start(
            Arc::clone(&state),
            leader,
            depth.clone(),
            Some(provisioning),
        );
        Outbox::new(&addr, depth)
            .deliver(BatchReady {
                pods: vec!["default/a-0".into()],
                window: Duration::from_secs(1),
                closed: tokio::time::Instant::now(),
            })
            .await
            .expect("provisioner alive");
        let round = rounds.borrow_and_update().clone().expect("a round");

        assert_eq!(*schedulers.borrow(), ["a".to_owned(), "b".to_owned()]);
        let planned = recorded.lock().expect("not poisoned").clone();
        assert_eq!(planned, expected.new_node_claims);
        assert_eq!(round.nodeclaims.len(), planned.len());
        assert_eq!(
            round.planned_pods,
            planned.iter().map(|c| c.pods.len()).sum::<usize>()
        );
        assert!(planned.len() > CREATOR_TEST_CAPACITY, "{planned:?}");
        assert_eq!(
            most_in_flight.load(Ordering::SeqCst),
            CREATOR_TEST_CAPACITY,
            "launches overlap, never beyond the NodeClaimCreator's mailbox"
        );
        assert!(
            round
                .problems
                .iter()
                .any(|p| p.starts_with("default/nowhere:")),
            "{round:?}"
        );
        let pools: std::collections::BTreeSet<&str> =
            planned.iter().map(|c| c.node_pool.as_str()).collect();
        assert_eq!(pools, ["a", "b"].into_iter().collect());
    });
}

/// Cluster state holding NodePool `a` and `count` pending pods `a-0`, `a-1`, … tolerating it,
/// every store listed.
fn pool_a_with_pods(count: usize) -> (Arc<ClusterState>, Writers) {
    let (state, mut writers) = ClusterState::new();
    writers
        .nodepools
        .apply(ObjectKey::new(None, "a"), node_pool("a"));
    for i in 0..count {
        let name = format!("a-{i}");
        writers.pods.apply(
            ObjectKey::new(Some("default"), &name),
            pod(&name, Some("a"), "1"),
        );
    }
    synced(&mut writers);
    (state, writers)
}

#[test]
fn a_rounds_snapshot_shares_the_stores_pods_instead_of_copying_them() {
    let (state, _writers) = pool_a_with_pods(3);
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let inventory = inventory::of(&state, []);
    let snapshot = snapshot::build(&inventory, &catalog, ControllerSettings::default())
        .expect("a valid snapshot");
    assert_eq!(snapshot.input.pods.len(), 3);
    for pod in &snapshot.input.pods {
        let name = pod.meta().name.expect("named");
        let stored = state
            .pods
            .get(&ObjectKey::new(Some("default"), name))
            .expect("stored");
        assert!(
            Arc::ptr_eq(pod, &stored),
            "{name}: the round's pod is the store's own, not a copy"
        );
    }
    let specs: Vec<_> = snapshot
        .input
        .pods
        .iter()
        .map(|pod| pod.shared_spec().expect("a spec"))
        .collect();
    assert!(
        specs.iter().all(|spec| Arc::ptr_eq(spec, specs[0])),
        "the store keeps one spec for replicas"
    );
}

/// A full Node `name` (one core, taken by its bound pod `on-<name>`).
fn full_node(writers: &mut Writers, name: &str) {
    let node = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "resourceVersion": "1",
                     "labels": {"topology.kubernetes.io/zone": "us-east-1a"}},
        "status": {"allocatable": {"cpu": "1", "memory": "4Gi", "pods": "10"}}
    }))
    .expect("a valid Node");
    writers.nodes.apply(ObjectKey::new(None, name), node);
    let mut bound = pod(&format!("on-{name}"), Some("a"), "1");
    bound.spec.get_or_insert_with(Default::default).node_name = Some(name.into());
    bound.status = None;
    writers.pods.apply(
        ObjectKey::new(Some("default"), &format!("on-{name}")),
        bound,
    );
}

#[test]
fn a_later_round_reuses_the_prepared_forms_of_the_pods_and_nodes_unchanged_since() {
    run(|| async {
        let (state, mut writers) = pool_a_with_pods(3);
        full_node(&mut writers, "node-0");
        full_node(&mut writers, "node-1");
        let recorded = Arc::new(Mutex::new(Vec::new()));
        let creator = recorder(&recorded, &Arc::new(AtomicUsize::new(0)));
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let provisioning = provisioning(creator, CreatedClaims::default(), catalog);
        let (_leader_tx, leader) = watch::channel(true);
        let depth = MailboxDepth::new("provisioner-test", PROVISIONER_MAILBOX_CAPACITY);
        let Started {
            addr, mut rounds, ..
        } = Provisioner::start(
            Arc::clone(&state),
            leader,
            depth.clone(),
            Some(provisioning),
        );
        let outbox = Outbox::new(&addr, depth);
        let batch = || BatchReady {
            pods: vec!["default/a-0".into()],
            window: Duration::from_secs(1),
            closed: tokio::time::Instant::now(),
        };
        outbox.deliver(batch()).await.expect("provisioner alive");
        let first = rounds.borrow_and_update().clone().expect("a round");
        assert_eq!((first.placing, first.forms_reused), (3, 0), "{first:?}");
        assert_eq!(first.nodes_reused, 0, "{first:?}");

        // The launches recorded created nothing: the pods stay pending. One is written.
        let mut written = pod("a-0", Some("a"), "2");
        written.metadata.resource_version = Some("2".into());
        writers
            .pods
            .apply(ObjectKey::new(Some("default"), "a-0"), written);
        outbox.deliver(batch()).await.expect("provisioner alive");
        let second = rounds.borrow_and_update().clone().expect("a round");
        assert_eq!(second.placing, 3, "{second:?}");
        assert_eq!(second.forms_reused, 2, "all but the written pod's");
        assert_eq!(
            second.nodes_reused, 2,
            "both nodes and their pods are unchanged"
        );

        // A pod bound on node-1 since: its form is built again, node-0's kept.
        let mut bound = pod("late", Some("a"), "100m");
        bound.spec.get_or_insert_with(Default::default).node_name = Some("node-1".into());
        bound.status = None;
        writers
            .pods
            .apply(ObjectKey::new(Some("default"), "late"), bound);
        outbox.deliver(batch()).await.expect("provisioner alive");
        let third = rounds.borrow_and_update().clone().expect("a round");
        assert_eq!((third.placing, third.nodes_reused), (3, 1), "{third:?}");
    });
}

fn empty_round() -> Round {
    Round {
        number: 1,
        triggered: 0,
        pending: Vec::new(),
        placing: 0,
        withheld: 0,
        released: 0,
        forms_reused: 0,
        nodes_reused: 0,
        window: Duration::ZERO,
        nodeclaims: Vec::new(),
        planned_pods: 0,
        problems: Vec::new(),
        timing: RoundTiming::default(),
    }
}

#[test]
fn a_round_whose_pods_are_all_held_on_nodeclaims_in_flight_solves_nothing() {
    run(|| async {
        let (state, mut writers) = pool_a_with_pods(2);
        let catalog = Catalog::embedded("us-east-1").expect("catalog");
        let planned = solve(&sequential(&state, &catalog)).expect("solves");
        assert!(!planned.new_node_claims.is_empty(), "{planned:?}");
        let created = CreatedClaims::default();
        let mut held = HashMap::new();
        for (i, claim) in planned.new_node_claims.iter().enumerate() {
            let name = format!("a-held-{i}");
            let mut created_claim = node_claim(claim, &node_pool("a"));
            created_claim.metadata.name = Some(name.clone());
            writers
                .nodeclaims
                .apply(ObjectKey::new(None, &name), created_claim.clone());
            created.record(created_claim, claim.pods.clone());
            held.insert(name.clone(), name);
        }

        let creator = recorder(&Arc::default(), &Arc::default());
        let mut provisioner = Provisioner::new(
            Arc::clone(&state),
            watch::channel(true).1,
            Arc::new(watch::channel(None).0),
            Arc::new(watch::channel(Vec::new()).0),
            MailboxDepth::new("provisioner-test", PROVISIONER_MAILBOX_CAPACITY),
            Some(provisioning(creator, created, catalog)),
        );

        let mut round = empty_round();
        let plan = provisioner.plan(&mut round, &mut RoundHeap::start());
        assert!(plan.is_none(), "nothing to prepare or solve");
        assert_eq!(round.placing, 0);
        assert!(
            !round.problems.iter().any(|p| p.starts_with("default/")),
            "no pod reported unplaced: {round:?}"
        );

        writers.pods.apply(
            ObjectKey::new(Some("default"), "a-2"),
            pod("a-2", Some("a"), "1"),
        );
        let mut round = empty_round();
        let plan = provisioner.plan(&mut round, &mut RoundHeap::start());
        assert_eq!(round.placing, 1, "only the pod no NodeClaim holds");
        let plan = plan.expect("a pod to place");
        assert_eq!(plan.holding, held, "the others stay on their NodeClaims");
    });
}
