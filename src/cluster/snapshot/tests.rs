use super::*;
use crate::catalog::CapacityType;
use crate::cluster::inventory::inventory;
use crate::manifest::parse_all;
use crate::pods::LeanPod;

fn snapshot(yaml: &str) -> Snapshot {
    let inventory = inventory(&parse_all(yaml, "in.yaml").expect("parses")).expect("valid");
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    build(&inventory, &catalog, ControllerSettings::default()).expect("builds")
}

fn names(pods: &[Arc<LeanPod>]) -> Vec<String> {
    pods.iter().map(pod_key).collect()
}

const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements:\n        - {key: karpenter.k8s.aws/instance-generation, operator: Gte, values: ['5']}\n        - {key: karpenter.k8s.aws/instance-cpu, operator: Lte, values: ['16']}\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: missing}\n";

fn pod(name: &str, extra_metadata: &str, extra_spec: &str, status: &str) -> String {
    format!(
        "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n{extra_metadata}spec:\n{extra_spec}  containers: [{{name: c, image: x, resources: {{requests: {{cpu: 500m}}}}}}]\n{status}"
    )
}

#[test]
fn only_unbound_provisionable_pods_are_pending() {
    let yaml = [
        pod("pending", "", "", ""),
        pod("bound", "", "  nodeName: n1\n", ""),
        pod("daemon", "  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: ds, uid: u}]\n", "", ""),
        pod("mirror", "  ownerReferences: [{apiVersion: v1, kind: Node, name: n1, uid: u}]\n", "", ""),
        pod("done", "", "", "status: {phase: Succeeded}\n"),
        pod("failed", "", "", "status: {phase: Failed}\n"),
        pod("deleting", "  deletionTimestamp: '2024-01-01T00:00:00Z'\n", "", ""),
        pod("preempting", "", "", "status: {nominatedNodeName: n1}\n"),
        "---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '2'}}\n".to_string(),
    ]
    .concat();
    let snapshot = snapshot(&yaml);
    assert_eq!(names(&snapshot.input.pods), ["default/pending"]);
    let node = &snapshot.input.existing_nodes[0];
    assert_eq!(names(&node.pods), ["default/bound"]);
}

#[test]
fn nodes_carry_labels_taints_and_resources() {
    let yaml = "apiVersion: v1\nkind: Node\nmetadata:\n  name: n1\n  labels: {karpenter.sh/nodepool: default, karpenter.sh/initialized: 'true'}\nspec:\n  unschedulable: true\n  taints: [{key: dedicated, value: db, effect: NoSchedule}]\nstatus:\n  capacity: {cpu: '4', memory: 16Gi}\n  allocatable: {cpu: 3920m, memory: 15Gi}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2, labels: {karpenter.sh/nodepool: default}}\nstatus: {capacity: {cpu: '2'}}\n";
    let snapshot = snapshot(yaml);
    let nodes = &snapshot.input.existing_nodes;
    let n1 = &nodes[0];
    assert_eq!(
        n1.labels.get(labels::HOSTNAME).map(String::as_str),
        Some("n1"),
        "kubelet's hostname label"
    );
    let taints: Vec<&str> = n1.taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(
        taints,
        ["dedicated", UNSCHEDULABLE_TAINT],
        "a cordoned node is tainted"
    );
    assert_eq!(
        n1.allocatable.get("cpu").map(|q| q.to_string()).as_deref(),
        Some("3920m")
    );
    assert_eq!(
        n1.capacity.get("memory").map(|q| q.to_string()).as_deref(),
        Some("16Gi")
    );
    assert_eq!(n1.node_pool.as_deref(), Some("default"));
    assert!(n1.initialized);
    let n2 = &nodes[1];
    assert!(
        !n2.initialized,
        "a Karpenter node without the initialized label is not initialized"
    );
    assert_eq!(
        n2.allocatable.get("cpu").map(|q| q.to_string()).as_deref(),
        Some("2"),
        "capacity stands in for allocatable"
    );
}

#[test]
fn nodes_and_launched_claims_share_their_objects_labels() {
    let launched = CLAIM.replace(
        "labels: {karpenter.sh/nodepool: default}",
        "labels: {karpenter.sh/nodepool: default, node.kubernetes.io/instance-type: m5.large, \
         topology.kubernetes.io/zone: us-east-1b}",
    );
    let yaml = format!(
        "apiVersion: v1\nkind: Node\nmetadata: {{name: n1, labels: {{kubernetes.io/hostname: n1}}}}\n\
         status: {{allocatable: {{cpu: '2'}}}}\n---\n\
         apiVersion: v1\nkind: Node\nmetadata: {{name: n2}}\nstatus: {{allocatable: {{cpu: '2'}}}}\n\
         ---\n{launched}---\n{}",
        CLAIM.replace("claim-1", "claim-2")
    );
    let inventory = inventory(&parse_all(&yaml, "in.yaml").expect("parses")).expect("valid");
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let snapshot = build(&inventory, &catalog, ControllerSettings::default()).expect("builds");
    let nodes = &snapshot.input.existing_nodes;
    let labels = |name: &str| {
        &nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("{name} in the input"))
            .labels
    };
    let shares = |name: &str, object: Option<&BTreeMap<String, String>>| {
        std::ptr::eq::<BTreeMap<String, String>>(&**labels(name), object.expect("labelled"))
    };
    assert!(shares("n1", inventory.nodes[0].metadata.labels.as_ref()));
    assert!(
        shares("claim-1", inventory.node_claims[0].metadata.labels.as_ref()),
        "its pinned labels are on it already"
    );
    assert_eq!(
        labels("n2").get(labels::HOSTNAME).map(String::as_str),
        Some("n2"),
        "a copy with the hostname added"
    );
    assert!(matches!(labels("n2"), NodeLabels::Own(_)));
    assert_eq!(
        labels("claim-2").get(labels::ZONE).map(String::as_str),
        Some("us-east-1b"),
        "a copy with the pinned zone added"
    );
    assert!(!shares(
        "claim-2",
        inventory.node_claims[1].metadata.labels.as_ref()
    ));
}

#[test]
fn a_nodes_csinode_gives_its_volume_attach_limits() {
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '2'}}\n---\napiVersion: v1\nkind: Node\nmetadata: {name: n2}\nstatus: {allocatable: {cpu: '2'}}\n---\napiVersion: storage.k8s.io/v1\nkind: CSINode\nmetadata: {name: n1}\nspec:\n  drivers:\n    - {name: ebs.csi.aws.com, nodeID: i-1, allocatable: {count: 25}}\n    - {name: efs.csi.aws.com, nodeID: i-1}\n";
    let snapshot = snapshot(yaml);
    let nodes = &snapshot.input.existing_nodes;
    assert_eq!(
        nodes[0].volume_limits,
        [("ebs.csi.aws.com".to_string(), 25)].into(),
        "a driver without a count is unlimited"
    );
    assert!(nodes[1].volume_limits.is_empty(), "no CSINode, no limit");
}

const CLAIM: &str = "apiVersion: karpenter.sh/v1\nkind: NodeClaim\nmetadata:\n  name: claim-1\n  labels: {karpenter.sh/nodepool: default}\nspec:\n  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n  taints: [{key: team, value: a, effect: NoSchedule}]\n  requirements:\n    - {key: node.kubernetes.io/instance-type, operator: In, values: [m5.large]}\n    - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}\n    - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}\n";

#[test]
fn an_in_flight_node_claim_is_capacity_with_its_pinned_labels() {
    let yaml = format!(
        "{CLAIM}status:\n  nodeName: ip-10-0-0-1\n  allocatable: {{cpu: 1930m, memory: 7Gi, pods: '29'}}\n"
    );
    let snapshot = snapshot(&yaml);
    let node = &snapshot.input.existing_nodes[0];
    assert_eq!(node.name, "claim-1");
    assert_eq!(node.node_claim.as_deref(), Some("claim-1"));
    assert_eq!(
        node.labels.get(labels::INSTANCE_TYPE).map(String::as_str),
        Some("m5.large")
    );
    assert_eq!(
        node.labels.get(labels::ZONE).map(String::as_str),
        Some("us-east-1b")
    );
    assert!(
        !node.labels.contains_key(labels::CAPACITY_TYPE),
        "two values pin nothing"
    );
    assert_eq!(node.taints.len(), 1);
    assert_eq!(
        node.allocatable
            .get("pods")
            .map(|q| q.to_string())
            .as_deref(),
        Some("29")
    );
    assert!(!node.initialized);
    assert_eq!(node.node_pool.as_deref(), Some("default"));
}

#[test]
fn a_node_claim_without_status_is_sized_from_the_catalog() {
    let snapshot = snapshot(CLAIM);
    let node = &snapshot.input.existing_nodes[0];
    let cpu = node.allocatable.get("cpu").expect("cpu");
    assert!(
        cpu < Quantity::parse("2").expect("2"),
        "m5.large less overhead: {cpu:?}"
    );
    assert_eq!(
        node.capacity.get("cpu").map(|q| q.to_string()).as_deref(),
        Some("2")
    );
}

#[test]
fn an_unlaunched_node_claim_with_several_instance_types_holds_what_each_of_them_can() {
    let yaml = CLAIM.replace(
        "values: [m5.large]",
        "values: [m5.large, m5.2xlarge, c5.xlarge]",
    );
    let snapshot = snapshot(&yaml);
    assert!(snapshot.warnings.is_empty(), "{:?}", snapshot.warnings);
    let node = &snapshot.input.existing_nodes[0];
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let settings = crate::catalog::AllocatableSettings::default();
    let allocatable = |name: &str| {
        catalog
            .instance_type(name, &settings)
            .expect("in the catalog")
            .allocatable()
    };
    assert_eq!(
        node.allocatable.cpu(),
        allocatable("m5.large").cpu(),
        "the smallest cpu"
    );
    assert_eq!(
        node.allocatable.memory(),
        allocatable("c5.xlarge").memory(),
        "the smallest memory"
    );
    assert_eq!(
        node.capacity.cpu(),
        Quantity::parse("8").expect("8"),
        "limits assume the largest"
    );
    assert!(
        !node.labels.contains_key(labels::INSTANCE_TYPE),
        "three values pin nothing"
    );
}

#[test]
fn a_node_claim_with_its_node_in_the_input_is_the_node() {
    let yaml = format!(
        "{CLAIM}status: {{nodeName: n1}}\n---\napiVersion: v1\nkind: Node\nmetadata: {{name: n1}}\nstatus: {{allocatable: {{cpu: '2'}}}}\n"
    );
    let snapshot = snapshot(&yaml);
    assert_eq!(snapshot.input.existing_nodes.len(), 1);
    let node = &snapshot.input.existing_nodes[0];
    assert_eq!(node.name, "n1");
    assert_eq!(node.node_claim.as_deref(), Some("claim-1"));
}

#[test]
fn pools_get_catalog_types_and_their_requirements() {
    let snapshot = snapshot(POOL);
    let pool = &snapshot.input.node_pools[0];
    assert_eq!(pool.name, "default");
    assert!(
        pool.instance_types.len() > 100,
        "{} types",
        pool.instance_types.len()
    );
    let generation = &pool.requirements[0];
    assert_eq!(
        (generation.operator, generation.values.as_slice()),
        (Operator::Gte, ["5".to_string()].as_slice())
    );
    let cpu = &pool.requirements[1];
    assert_eq!(
        (cpu.operator, cpu.values.as_slice()),
        (Operator::Lte, ["16".to_string()].as_slice())
    );
    assert!(
        snapshot
            .warnings
            .iter()
            .any(|w| w.contains("EC2NodeClass missing is not in the input")),
        "{:?}",
        snapshot.warnings
    );
    let m5 = pool
        .instance_types
        .iter()
        .find(|it| it.name == "m5.large")
        .expect("m5.large");
    assert!(
        m5.offerings
            .iter()
            .any(|o| o.capacity_type == CapacityType::Spot && o.available)
    );
}

#[test]
fn the_node_class_shapes_allocatable() {
    let class = "---\napiVersion: karpenter.k8s.aws/v1\nkind: EC2NodeClass\nmetadata: {name: missing}\nspec:\n  role: r\n  amiSelectorTerms: [{alias: al2023@latest}]\n  subnetSelectorTerms: [{id: subnet-1}]\n  securityGroupSelectorTerms: [{id: sg-1}]\n  kubelet: {maxPods: 7}\n";
    let snapshot = snapshot(&format!("{POOL}{class}"));
    assert!(snapshot.warnings.is_empty(), "{:?}", snapshot.warnings);
    let pool = &snapshot.input.node_pools[0];
    let m5 = pool
        .instance_types
        .iter()
        .find(|it| it.name == "m5.large")
        .expect("m5.large");
    assert_eq!(
        m5.capacity.get("pods").map(|q| q.to_string()).as_deref(),
        Some("7")
    );
}

#[test]
fn namespaces_carry_their_name_label() {
    let yaml = format!(
        "{}---\napiVersion: v1\nkind: Namespace\nmetadata: {{name: shop, labels: {{team: a}}}}\n",
        pod("p", "  namespace: jobs\n", "", "")
    );
    let snapshot = snapshot(&yaml);
    let namespaces = &snapshot.input.namespaces;
    assert_eq!(namespaces["jobs"]["kubernetes.io/metadata.name"], "jobs");
    assert_eq!(namespaces["shop"]["team"], "a");
    assert_eq!(namespaces["shop"]["kubernetes.io/metadata.name"], "shop");
}

#[test]
fn pods_bound_to_unknown_nodes_are_reported() {
    let snapshot = snapshot(&pod("stray", "", "  nodeName: gone\n", ""));
    assert!(snapshot.input.pods.is_empty());
    assert!(
        snapshot
            .warnings
            .iter()
            .any(|w| w.contains("default/stray (on gone)")),
        "{:?}",
        snapshot.warnings
    );
}

#[test]
fn pools_take_their_instance_types_from_the_source_once_per_class() {
    /// A source that records its calls and offers m5.large with spot unavailable.
    struct Recording<'c> {
        catalog: &'c Catalog,
        calls: Vec<(String, bool)>,
    }
    impl InstanceTypeSource for Recording<'_> {
        fn resolve(
            &mut self,
            class_name: &str,
            class: Option<&EC2NodeClass>,
            settings: &AllocatableSettings,
        ) -> std::sync::Arc<[InstanceType]> {
            self.calls.push((class_name.to_owned(), class.is_some()));
            let mut types: Vec<InstanceType> = self
                .catalog
                .instance_types(settings)
                .into_iter()
                .filter(|it| it.name == "m5.large")
                .collect();
            for offering in types.iter_mut().flat_map(|it| it.offerings.iter_mut()) {
                offering.available &= offering.capacity_type != CapacityType::Spot;
            }
            types.into()
        }
    }
    let second = POOL.replace("name: default}", "name: second}");
    let yaml = format!("{POOL}---\n{second}");
    let inventory = inventory(&parse_all(&yaml, "in.yaml").expect("parses")).expect("valid");
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let mut source = Recording {
        catalog: &catalog,
        calls: Vec::new(),
    };
    let snapshot =
        build_with(&inventory, ControllerSettings::default(), &mut source).expect("builds");
    assert_eq!(source.calls, vec![("missing".to_owned(), false)]);
    assert_eq!(snapshot.input.node_pools.len(), 2);
    let pools = &snapshot.input.node_pools;
    assert!(
        std::sync::Arc::ptr_eq(&pools[0].instance_types, &pools[1].instance_types),
        "NodePools of one class share its list"
    );
    for pool in &snapshot.input.node_pools {
        assert_eq!(pool.instance_types.len(), 1, "{}", pool.name);
        let offerings = &pool.instance_types[0].offerings;
        assert!(offerings.iter().any(|o| o.available));
        assert!(
            offerings
                .iter()
                .all(|o| o.capacity_type != CapacityType::Spot || !o.available)
        );
    }
}

/// A NodeClaim being deleted before it launched (insufficient capacity) lingers while its
/// termination finalizer is there; it is not capacity for the next solve.
#[test]
fn a_deleting_node_claim_without_a_provider_id_is_not_capacity() {
    let deleting = CLAIM.replace(
        "  name: claim-1\n",
        "  name: claim-1\n  deletionTimestamp: '2024-01-01T00:00:00Z'\n  finalizers: [karpenter.sh/termination]\n",
    );
    let snapshot = snapshot(&format!("{deleting}---\n{}", pod("pending", "", "", "")));
    assert!(
        snapshot.input.existing_nodes.is_empty(),
        "{:?}",
        snapshot.input.existing_nodes
    );
    assert_eq!(names(&snapshot.input.pods), ["default/pending"]);
}

#[test]
fn taking_the_pods_builds_the_same_snapshot_without_a_copy() {
    let yaml = [
        pod("pending", "  namespace: shop\n", "", ""),
        pod("bound", "", "  nodeName: n1\n", ""),
        pod("done", "  namespace: jobs\n", "", "status: {phase: Succeeded}\n"),
        pod("stray", "", "  nodeName: gone\n", ""),
        "---\napiVersion: v1\nkind: Node\nmetadata: {name: n1}\nstatus: {allocatable: {cpu: '2'}}\n".to_string(),
    ]
    .concat();
    let mut inventory = inventory(&parse_all(&yaml, "in.yaml").expect("parses")).expect("valid");
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let copied = build(&inventory, &catalog, ControllerSettings::default()).expect("builds");
    let taken =
        build_taking_pods(&mut inventory, &catalog, ControllerSettings::default()).expect("builds");
    assert!(
        inventory.pods.is_empty(),
        "the pods moved into the snapshot"
    );
    assert_eq!(taken.input.pods, copied.input.pods);
    assert_eq!(names(&taken.input.pods), ["shop/pending"]);
    let pods_of = |s: &Snapshot| -> Vec<Vec<Arc<LeanPod>>> {
        s.input
            .existing_nodes
            .iter()
            .map(|n| n.pods.clone())
            .collect()
    };
    assert_eq!(pods_of(&taken), pods_of(&copied));
    assert_eq!(names(&pods_of(&taken)[0]), ["default/bound"]);
    assert_eq!(taken.input.namespaces, copied.input.namespaces);
    assert!(
        taken.input.namespaces.contains_key("jobs"),
        "a finished pod's namespace counts"
    );
    assert_eq!(taken.warnings, copied.warnings);
}

#[test]
fn a_node_claim_of_a_type_only_the_source_has_is_sized_from_it_once_per_class() {
    /// The account's catalog: the embedded one and a type it lacks.
    struct Account {
        catalog: crate::catalog::CatalogSnapshot,
        calls: usize,
    }
    impl InstanceTypeSource for Account {
        fn resolve(
            &mut self,
            _class_name: &str,
            _class: Option<&EC2NodeClass>,
            settings: &AllocatableSettings,
        ) -> std::sync::Arc<[InstanceType]> {
            self.calls += 1;
            self.catalog.instance_types(settings, None).into()
        }
    }
    let embedded = Catalog::embedded("us-east-1").expect("catalog");
    let mut facts = embedded.snapshot().facts().clone();
    let mut added = embedded.info("m5.xlarge").expect("m5.xlarge").clone();
    added.name = "m9z.xlarge".to_owned();
    facts.infos.push(added);
    facts
        .offered
        .insert("m9z.xlarge".to_owned(), ["us-east-1b".to_owned()].into());
    facts.on_demand.insert("m9z.xlarge".to_owned(), 0.2);
    let mut source = Account {
        catalog: crate::catalog::CatalogSnapshot::new(facts, 1),
        calls: 0,
    };
    let pool = POOL.replace("name: missing", "name: default");
    let yaml = format!("{pool}---\n{}", CLAIM.replace("m5.large", "m9z.xlarge"));
    let inventory = inventory(&parse_all(&yaml, "in.yaml").expect("parses")).expect("valid");
    let snapshot =
        build_with(&inventory, ControllerSettings::default(), &mut source).expect("builds");
    assert_eq!(
        source.calls, 1,
        "the pool and the claim share their class's list"
    );
    let node = &snapshot.input.existing_nodes[0];
    assert_eq!(
        node.capacity.get("cpu").map(|q| q.to_string()).as_deref(),
        Some("4"),
        "sized as the account's m9z.xlarge"
    );
    assert!(!node.allocatable.is_empty());
}
