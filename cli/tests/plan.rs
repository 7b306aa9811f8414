//! `kerf plan` end to end: the binary is run on manifests (files, directories, stdin) and its
//! JSON report is checked against the contract and against what upstream Karpenter would do
//! with the same input: where pods go, which instance types and offerings NodeClaims get,
//! which pods cannot be placed and why, and how invalid input is refused.

mod kerf_cli;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use kerf::catalog::{AllocatableSettings, Catalog};
use kerf_cli::text;
use serde_json::Value;

const ZONE: &str = "topology.kubernetes.io/zone";
const ARCH: &str = "kubernetes.io/arch";
const OS: &str = "kubernetes.io/os";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
const NODEPOOL: &str = "karpenter.sh/nodepool";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const CATEGORY: &str = "karpenter.k8s.aws/instance-category";
const GENERATION: &str = "karpenter.k8s.aws/instance-generation";
const FAMILY: &str = "karpenter.k8s.aws/instance-family";
const INSTANCE_CPU: &str = "karpenter.k8s.aws/instance-cpu";
const GPU_MANUFACTURER: &str = "karpenter.k8s.aws/instance-gpu-manufacturer";

// ---------------------------------------------------------------------------------------
// Harness

fn kerf(args: &[&str], stdin: Option<&str>) -> Output {
    kerf_cli::kerf(args, stdin.map(str::as_bytes))
}

/// Runs `kerf plan -o json` with `args`, insists on success and one JSON object on stdout.
fn plan_json(args: &[&str], stdin: Option<&str>) -> Value {
    let mut full = vec!["plan", "-o", "json"];
    full.extend_from_slice(args);
    let output = kerf(&full, stdin);
    assert!(
        output.status.success(),
        "kerf {full:?} failed: {}\n{}",
        output.status,
        text(&output.stderr)
    );
    let stdout = text(&output.stdout);
    let value: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("not one JSON value ({e}):\n{stdout}"));
    assert!(value.is_object(), "{value}");
    check_contract(&value);
    value
}

/// A scratch directory removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("kerf-plan-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch dir");
        Self(dir)
    }

    fn file(&self, name: &str, contents: &str) -> String {
        let path = self.0.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&path, contents).expect("write manifest");
        path.display().to_string()
    }

    fn path(&self) -> String {
        self.0.display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("cli/ is inside the workspace")
        .to_path_buf()
}

fn examples_dir() -> String {
    workspace_root().join("examples/plan").display().to_string()
}

/// Upstream's examples, vendored (tests/fixtures/upstream/README.md).
fn upstream_examples() -> PathBuf {
    workspace_root().join("tests/fixtures/upstream/examples")
}

fn upstream_example(name: &str) -> String {
    let path = upstream_examples().join(name);
    assert!(
        path.exists(),
        "upstream example {} is missing",
        path.display()
    );
    path.display().to_string()
}

/// Labels of every instance type in the embedded us-east-1 catalog: the oracle for what an
/// instance type is (arch, category, vCPUs, GPUs).
fn catalog_labels() -> &'static HashMap<String, BTreeMap<String, String>> {
    static LABELS: OnceLock<HashMap<String, BTreeMap<String, String>>> = OnceLock::new();
    LABELS.get_or_init(|| {
        let catalog = Catalog::embedded("us-east-1").expect("us-east-1 is embedded");
        catalog
            .instance_types(&AllocatableSettings::default())
            .into_iter()
            .map(|it| (it.name.clone(), it.labels.clone()))
            .collect()
    })
}

fn type_label(instance_type: &str, key: &str) -> String {
    catalog_labels()
        .get(instance_type)
        .unwrap_or_else(|| panic!("{instance_type} is not in the catalog"))
        .get(key)
        .cloned()
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------
// Report accessors

fn claims(report: &Value) -> &Vec<Value> {
    report["nodeClaims"].as_array().expect("nodeClaims array")
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("array expected: {value}"))
        .iter()
        .map(|v| {
            v.as_str()
                .unwrap_or_else(|| panic!("string expected: {v}"))
                .to_string()
        })
        .collect()
}

fn requirement<'a>(claim: &'a Value, key: &str) -> Option<&'a Value> {
    claim["requirements"]
        .as_array()?
        .iter()
        .find(|r| r["key"] == key)
}

/// The values of an `In` requirement on `key`.
fn in_values(claim: &Value, key: &str) -> Option<Vec<String>> {
    let requirement = requirement(claim, key)?;
    (requirement["operator"] == "In").then(|| strings(&requirement["values"]))
}

fn claim_of<'a>(report: &'a Value, pod: &str) -> Option<&'a Value> {
    claims(report)
        .iter()
        .find(|claim| strings(&claim["pods"]).iter().any(|p| p == pod))
}

fn unschedulable(report: &Value) -> BTreeMap<String, String> {
    report["unschedulable"]
        .as_array()
        .expect("unschedulable array")
        .iter()
        .map(|u| {
            (
                u["pod"].as_str().expect("pod").to_string(),
                u["reason"].as_str().expect("reason").to_string(),
            )
        })
        .collect()
}

fn quantity_milli(text: &str) -> f64 {
    let (number, factor) = match text.strip_suffix('m') {
        Some(number) => (number, 1.0),
        None => (text, 1000.0),
    };
    number
        .parse::<f64>()
        .unwrap_or_else(|_| panic!("plain quantity expected: {text}"))
        * factor
}

/// The JSON contract every report must honour, whatever the input.
fn check_contract(report: &Value) {
    let keys: Vec<&str> = report
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        ["nodeClaims", "existingNodes", "unschedulable", "summary"],
        "{report}"
    );
    let mut placed = 0;
    let mut cost = 0.0;
    for claim in claims(report) {
        let pool = claim["nodePool"].as_str().expect("nodePool");
        let types = strings(&claim["instanceTypes"]);
        assert!(!types.is_empty() && types.len() <= 600, "{claim}");
        let pods = strings(&claim["pods"]);
        assert!(
            !pods.is_empty() || claim["replica"] == true,
            "a NodeClaim is created for pods, or for a static pool's replicas: {claim}"
        );
        placed += pods.len();
        for requirement in claim["requirements"].as_array().expect("requirements") {
            assert!(
                requirement["key"].is_string() && requirement["operator"].is_string(),
                "{requirement}"
            );
            assert!(requirement["values"].is_array(), "{requirement}");
        }
        assert_eq!(
            in_values(claim, NODEPOOL),
            Some(vec![pool.to_string()]),
            "{claim}"
        );
        let type_requirement = in_values(claim, INSTANCE_TYPE).expect("instance-type requirement");
        assert!(
            types.iter().all(|t| type_requirement.contains(t)),
            "{claim}"
        );
        // A static pool's replica requests what lands on it (DaemonSets, pods), maybe nothing.
        if claim["replica"] != true || !pods.is_empty() {
            let requested_pods = claim["requests"]["pods"].as_str().expect("pods request");
            assert!(
                requested_pods.parse::<usize>().expect("integer") >= pods.len(),
                "{claim}"
            );
            assert!(claim["requests"]["cpu"].is_string(), "{claim}");
        }
        let launch = &claim["launch"];
        let launched = launch["instanceType"]
            .as_str()
            .expect("launch.instanceType");
        assert!(
            types.iter().any(|t| t == launched),
            "launch type among the options: {claim}"
        );
        let zone = launch["zone"].as_str().expect("launch.zone");
        if let Some(zones) = in_values(claim, ZONE) {
            assert!(zones.iter().any(|z| z == zone), "{claim}");
        }
        let capacity = launch["capacityType"]
            .as_str()
            .expect("launch.capacityType");
        if let Some(capacities) = in_values(claim, CAPACITY_TYPE) {
            assert!(capacities.iter().any(|c| c == capacity), "{claim}");
        }
        let price = launch["price"].as_f64().expect("launch.price");
        assert!(price > 0.0, "{claim}");
        cost += price;
    }
    for node in report["existingNodes"].as_array().expect("existingNodes") {
        assert!(node["name"].is_string(), "{node}");
        let pods = strings(&node["pods"]);
        assert!(
            !pods.is_empty(),
            "only nodes that receive pods are listed: {node}"
        );
        placed += pods.len();
    }
    let unplaced = unschedulable(report);
    assert!(
        unplaced.values().all(|reason| !reason.is_empty()),
        "{report}"
    );
    let summary = &report["summary"];
    assert_eq!(summary["scheduled"], placed, "{report}");
    assert_eq!(summary["pods"], placed + unplaced.len(), "{report}");
    assert_eq!(summary["nodeClaims"], claims(report).len(), "{report}");
    let hourly = summary["hourlyCost"].as_f64().expect("hourlyCost");
    assert!(
        (hourly - cost).abs() < 1e-6,
        "hourlyCost {hourly} is the sum of launch prices {cost}"
    );
}

// ---------------------------------------------------------------------------------------
// Manifests used by several tests

const NODEPOOL_ALL: &str = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand", "spot"]
        - key: kubernetes.io/arch
          operator: In
          values: ["amd64", "arm64"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m", "r"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;

fn deployment(name: &str, replicas: u32, cpu: &str, memory: &str, extra_pod_spec: &str) -> String {
    let extra = extra_pod_spec
        .lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| format!("      {line}\n"))
        .collect::<String>();
    format!(
        r#"---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
    spec:
{extra}      containers:
        - name: app
          image: pause
          resources:
            requests:
              cpu: "{cpu}"
              memory: {memory}
"#
    )
}

fn zone_spread(app: &str) -> String {
    format!(
        r#"topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: topology.kubernetes.io/zone
    whenUnsatisfiable: DoNotSchedule
    labelSelector:
      matchLabels:
        app: {app}"#
    )
}

// ---------------------------------------------------------------------------------------
// Contract and bundled examples

#[test]
fn bundled_examples_plan_as_documented() {
    let report = plan_json(&["-f", &examples_dir()], None);

    // Zone spread: the three web pods land in three different zones.
    let web_zones: BTreeSet<String> = (0..3)
        .map(|i| {
            let claim = claim_of(&report, &format!("default/web-{i}")).expect("web pod placed");
            let zones = in_values(claim, ZONE).expect("zone requirement");
            assert_eq!(
                zones.len(),
                1,
                "a spread pod pins its NodeClaim's zone: {claim}"
            );
            zones[0].clone()
        })
        .collect();
    assert_eq!(web_zones.len(), 3, "{report}");

    // Anti-affinity on hostname: each cache pod gets its own NodeClaim.
    let cache_0 = claim_of(&report, "default/cache-0").expect("cache-0 placed");
    let cache_1 = claim_of(&report, "default/cache-1").expect("cache-1 placed");
    assert!(
        !std::ptr::eq(cache_0, cache_1),
        "anti-affine pods share a NodeClaim"
    );

    // Graviton API pods.
    for i in 0..4 {
        let claim = claim_of(&report, &format!("shop/api-{i}")).expect("api pod placed");
        for instance_type in strings(&claim["instanceTypes"]) {
            assert_eq!(type_label(&instance_type, ARCH), "arm64", "{instance_type}");
        }
    }

    // The GPU job goes to the gpu NodePool, on an NVIDIA instance type.
    let train = claim_of(&report, "default/train-0").expect("train pod placed");
    assert_eq!(train["nodePool"], "gpu");
    let launched = train["launch"]["instanceType"].as_str().expect("type");
    assert_eq!(type_label(launched, GPU_MANUFACTURER), "nvidia");
    assert_eq!(train["requests"]["nvidia.com/gpu"], "1", "{train}");

    // No other pod lands in the tainted gpu pool.
    for claim in claims(&report) {
        if claim["nodePool"] == "gpu" {
            assert_eq!(strings(&claim["pods"]), ["default/train-0"]);
        }
    }

    // The daemonset's requests are in every default-pool NodeClaim's requests.
    for claim in claims(&report)
        .iter()
        .filter(|c| c["nodePool"] == "default")
    {
        let pods = strings(&claim["pods"]).len();
        assert_eq!(
            claim["requests"]["pods"],
            (pods + 1).to_string(),
            "pods + log-shipper: {claim}"
        );
    }

    // The deliberately oversized pod is reported with a reason.
    let unplaced = unschedulable(&report);
    assert_eq!(
        unplaced.keys().collect::<Vec<_>>(),
        ["default/too-big"],
        "{report}"
    );
    assert_eq!(report["summary"]["pods"], 3 + 2 + 4 + 1 + 1);
}

#[test]
fn bundled_existing_capacity_example_fills_existing_nodes_first() {
    let dir = workspace_root()
        .join("examples/plan-existing-capacity")
        .display()
        .to_string();
    let report = plan_json(&["-f", &dir], None);
    let existing: BTreeMap<String, usize> = report["existingNodes"]
        .as_array()
        .expect("existingNodes")
        .iter()
        .map(|n| {
            (
                n["name"].as_str().expect("name").to_string(),
                strings(&n["pods"]).len(),
            )
        })
        .collect();
    let expected = BTreeMap::from([
        ("ip-10-0-1-17.ec2.internal".to_string(), 2),
        ("default-x7k2p".to_string(), 2),
    ]);
    assert_eq!(existing, expected, "{report}");
    assert_eq!(claims(&report).len(), 1, "{report}");
    assert_eq!(strings(&claims(&report)[0]["pods"]).len(), 2);
    assert_eq!(
        report["summary"]["pods"], 6,
        "the running billing pod is not pending"
    );
}

#[test]
fn table_output_is_the_default() {
    let output = kerf(&["plan", "-f", &examples_dir()], None);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stdout = text(&output.stdout);
    assert!(
        stdout
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("NODEPOOL")),
        "{stdout}"
    );
    assert!(stdout.contains("UNSCHEDULABLE POD"), "{stdout}");
    assert!(
        stdout.lines().any(|l| l.starts_with("default/too-big")),
        "{stdout}"
    );
    let summary = stdout.lines().last().expect("summary line");
    assert!(
        summary.starts_with("11 pending pods, 10 scheduled"),
        "{summary}"
    );
}

#[test]
fn cheapest_types_come_first_and_launch_is_the_cheapest_offering() {
    let input = format!("{NODEPOOL_ALL}{}", deployment("inflate", 1, "1", "1Gi", ""));
    let report = plan_json(&["-f", "-"], Some(&input));
    let claim = &claims(&report)[0];
    let catalog = Catalog::embedded("us-east-1").expect("catalog");
    let cheapest = |name: &str| {
        catalog
            .offerings(name)
            .iter()
            .filter(|o| o.available)
            .map(|o| o.price)
            .fold(f64::INFINITY, f64::min)
    };
    let prices: Vec<f64> = strings(&claim["instanceTypes"])
        .iter()
        .map(|t| cheapest(t))
        .collect();
    assert!(
        prices.windows(2).all(|w| w[0] <= w[1]),
        "instance types sorted by price: {prices:?}"
    );
    let launch_price = claim["launch"]["price"].as_f64().expect("price");
    assert!(
        (launch_price - prices[0]).abs() < 1e-9,
        "launch {launch_price} vs cheapest {}",
        prices[0]
    );
}

// ---------------------------------------------------------------------------------------
// Where pods go

#[test]
fn zone_spread_creates_one_node_claim_per_zone() {
    let input = format!(
        "{NODEPOOL_ALL}{}",
        deployment("web", 3, "1", "1Gi", &zone_spread("web"))
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert_eq!(claims(&report).len(), 3, "{report}");
    let zones: BTreeSet<String> = claims(&report)
        .iter()
        .map(|claim| {
            let zones = in_values(claim, ZONE).expect("zone requirement");
            assert_eq!(zones.len(), 1, "{claim}");
            assert_eq!(claim["launch"]["zone"], zones[0].as_str());
            zones[0].clone()
        })
        .collect();
    assert_eq!(zones.len(), 3, "{report}");
}

#[test]
fn a_pool_limited_to_two_zones_leaves_the_third_spread_pod_unschedulable() {
    let pool = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: two-zones
spec:
  template:
    spec:
      requirements:
        - key: topology.kubernetes.io/zone
          operator: In
          values: ["us-east-1a", "us-east-1b"]
        - key: karpenter.k8s.aws/instance-category
          operator: In
          values: ["c", "m"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;
    let input = format!(
        "{pool}{}",
        deployment("web", 3, "1", "1Gi", &zone_spread("web"))
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    let placed_zones: BTreeSet<String> = claims(&report)
        .iter()
        .flat_map(|claim| in_values(claim, ZONE).expect("zone requirement"))
        .collect();
    assert_eq!(
        placed_zones,
        BTreeSet::from(["us-east-1a".to_string(), "us-east-1b".to_string()])
    );
    assert_eq!(report["summary"]["scheduled"], 2, "{report}");
    let unplaced = unschedulable(&report);
    assert_eq!(unplaced.len(), 1, "{report}");
    let (pod, reason) = unplaced.iter().next().expect("one");
    assert!(pod.starts_with("default/web-"), "{pod}");
    assert!(
        reason.contains("unsatisfiable topology constraint for topology spread")
            && reason.contains("us-east-1c: 0"),
        "{reason}"
    );
}

#[test]
fn an_existing_node_in_a_third_zone_counts_as_a_spread_domain() {
    // As in a real cluster: a system node in us-east-1c that the pool cannot launch into
    // still counts for the spread, so a third replica in 1a or 1b would exceed maxSkew.
    let pool = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: two-zones
spec:
  template:
    spec:
      requirements:
        - key: topology.kubernetes.io/zone
          operator: In
          values: ["us-east-1a", "us-east-1b"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
apiVersion: v1
kind: Node
metadata:
  name: system-c
  labels:
    topology.kubernetes.io/zone: us-east-1c
spec:
  taints:
    - {key: CriticalAddonsOnly, effect: NoSchedule}
status:
  allocatable: {cpu: "2", memory: 4Gi, pods: "20"}
"#;
    let input = format!(
        "{pool}{}",
        deployment("web", 3, "1", "1Gi", &zone_spread("web"))
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert_eq!(report["summary"]["scheduled"], 2, "{report}");
    let unplaced = unschedulable(&report);
    assert_eq!(unplaced.len(), 1, "{report}");
    let reason = unplaced.values().next().expect("one");
    assert!(
        reason.contains("topology"),
        "the reason names the spread: {reason}"
    );
    assert!(
        report["existingNodes"]
            .as_array()
            .expect("array")
            .is_empty()
    );
}

#[test]
fn an_arm64_workload_gets_graviton_instance_types() {
    let input = format!(
        "{NODEPOOL_ALL}{}",
        deployment(
            "api",
            2,
            "500m",
            "512Mi",
            "nodeSelector:\n  kubernetes.io/arch: arm64"
        )
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert!(!claims(&report).is_empty());
    for claim in claims(&report) {
        assert_eq!(
            in_values(claim, ARCH),
            Some(vec!["arm64".to_string()]),
            "{claim}"
        );
        for instance_type in strings(&claim["instanceTypes"]) {
            assert_eq!(type_label(&instance_type, ARCH), "arm64", "{instance_type}");
        }
    }
}

#[test]
fn pods_are_packed_onto_few_node_claims() {
    let input = format!(
        "{NODEPOOL_ALL}{}",
        deployment("inflate", 10, "1", "1Gi", "")
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert_eq!(report["summary"]["scheduled"], 10);
    assert_eq!(
        claims(&report).len(),
        1,
        "ten 1-cpu pods fit one large instance: {report}"
    );
    let claim = &claims(&report)[0];
    assert_eq!(claim["requests"]["cpu"], "10");
    assert_eq!(claim["requests"]["memory"], "10Gi");
    assert_eq!(claim["requests"]["pods"], "10");
    for instance_type in strings(&claim["instanceTypes"]) {
        let cpus: u32 = type_label(&instance_type, INSTANCE_CPU)
            .parse()
            .expect("vcpus");
        assert!(
            cpus > 10,
            "{instance_type} cannot hold 10 cpus of requests plus overhead"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Existing capacity

const NODE_A: &str = r#"
apiVersion: v1
kind: Node
metadata:
  name: node-a
  labels:
    kubernetes.io/hostname: node-a
    kubernetes.io/arch: amd64
    kubernetes.io/os: linux
    topology.kubernetes.io/zone: us-east-1a
    node.kubernetes.io/instance-type: m5.xlarge
status:
  capacity: {cpu: "4", memory: 16Gi, pods: "58"}
  allocatable: {cpu: 3920m, memory: 15Gi, pods: "58"}
---
apiVersion: v1
kind: Pod
metadata:
  name: resident
spec:
  nodeName: node-a
  containers:
    - name: app
      image: pause
      resources:
        requests: {cpu: 2500m, memory: 1Gi}
"#;

#[test]
fn existing_nodes_absorb_pods_before_new_node_claims() {
    let input = format!(
        "{NODEPOOL_ALL}---{NODE_A}{}",
        deployment("web", 2, "1", "1Gi", "")
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    let existing = report["existingNodes"].as_array().expect("existingNodes");
    assert_eq!(existing.len(), 1, "{report}");
    assert_eq!(existing[0]["name"], "node-a");
    assert_eq!(
        strings(&existing[0]["pods"]).len(),
        1,
        "1.42 cpu left on node-a holds one pod: {report}"
    );
    assert_eq!(claims(&report).len(), 1, "{report}");
    assert_eq!(
        report["summary"]["pods"], 2,
        "the bound pod is not pending: {report}"
    );
    assert_eq!(report["summary"]["scheduled"], 2);
}

#[test]
fn existing_nodes_alone_need_no_node_pool() {
    let input = format!("{NODE_A}{}", deployment("small", 3, "250m", "256Mi", ""));
    let report = plan_json(&["-f", "-"], Some(&input));
    assert!(claims(&report).is_empty(), "{report}");
    assert_eq!(
        strings(&report["existingNodes"][0]["pods"]).len(),
        3,
        "{report}"
    );
}

#[test]
fn in_flight_node_claims_are_used_by_name() {
    let node_claim = r#"
apiVersion: karpenter.sh/v1
kind: NodeClaim
metadata:
  name: default-x7k2p
  labels:
    karpenter.sh/nodepool: default
spec:
  nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: ["m5.2xlarge"]
    - key: topology.kubernetes.io/zone
      operator: In
      values: ["us-east-1c"]
    - key: karpenter.sh/capacity-type
      operator: In
      values: ["on-demand"]
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "58"}
  allocatable: {cpu: 7910m, memory: 30Gi, pods: "58"}
"#;
    let input = format!(
        "{NODEPOOL_ALL}---{node_claim}{}",
        deployment("web", 2, "1", "1Gi", "")
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert!(claims(&report).is_empty(), "{report}");
    let existing = &report["existingNodes"][0];
    assert_eq!(existing["name"], "default-x7k2p", "{report}");
    assert_eq!(strings(&existing["pods"]).len(), 2);
}

#[test]
fn pods_that_do_not_tolerate_a_nodes_taint_do_not_go_there() {
    let tainted = NODE_A.replacen(
        "status:\n",
        "spec:\n  taints:\n    - {key: dedicated, value: db, effect: NoSchedule}\nstatus:\n",
        1,
    );
    assert_ne!(tainted, NODE_A);
    let input = format!(
        "{NODEPOOL_ALL}---{tainted}{}",
        deployment("web", 1, "100m", "128Mi", "")
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    assert!(
        report["existingNodes"]
            .as_array()
            .expect("array")
            .is_empty(),
        "{report}"
    );
    assert_eq!(claims(&report).len(), 1);
}

// ---------------------------------------------------------------------------------------
// Input handling

#[test]
fn reads_directories_recursively_and_several_paths() {
    let scratch = Scratch::new("dirs");
    scratch.file("pools/nodepool.yaml", NODEPOOL_ALL);
    scratch.file(
        "apps/team-a/web.yaml",
        &deployment("web", 2, "1", "1Gi", ""),
    );
    scratch.file("apps/notes.txt", "not a manifest: skipped");
    let other = Scratch::new("dirs-extra");
    let extra = other.file("job.json", r#"{"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "batch"},
        "spec": {"parallelism": 2, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "1"}}}]}}}}"#);
    let report = plan_json(&["-f", &scratch.path(), "-f", &extra], None);
    let pods: BTreeSet<String> = claims(&report)
        .iter()
        .flat_map(|c| strings(&c["pods"]))
        .collect();
    let expected: BTreeSet<String> = [
        "default/web-0",
        "default/web-1",
        "default/batch-0",
        "default/batch-1",
    ]
    .map(String::from)
    .into();
    assert_eq!(pods, expected, "{report}");
}

#[test]
fn reads_stdin_with_json_lists() {
    let list = serde_json::json!({
        "apiVersion": "v1", "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo", "namespace": "jobs"},
             "spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}}]}}
        ]
    });
    let input = format!("{NODEPOOL_ALL}---\n{list}\n");
    let report = plan_json(&["-f", "-"], Some(&input));
    let claim = claim_of(&report, "jobs/solo").expect("pod placed");
    assert_eq!(
        claim["requests"]["cpu"], "2",
        "limits stand in for missing requests: {claim}"
    );
}

#[test]
fn other_kinds_are_listed_as_ignored() {
    let service = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports: [{port: 80}]\n";
    let input = format!("{NODEPOOL_ALL}{service}");
    let output = kerf(&["plan", "-o", "json", "-f", "-"], Some(&input));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("Service/web") && stderr.contains("ignored"),
        "{stderr}"
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    assert_eq!(report["summary"]["pods"], 0);
}

#[test]
fn daemonset_pods_and_finished_pods_are_not_pending() {
    let daemon_pod = r#"---
apiVersion: v1
kind: Pod
metadata:
  name: shipper-abc
  ownerReferences: [{apiVersion: apps/v1, kind: DaemonSet, name: shipper, uid: u1, controller: true}]
spec:
  containers: [{name: c, image: x}]
---
apiVersion: v1
kind: Pod
metadata:
  name: done
spec:
  containers: [{name: c, image: x}]
status:
  phase: Succeeded
"#;
    let input = format!("{NODEPOOL_ALL}{daemon_pod}");
    let report = plan_json(&["-f", "-"], Some(&input));
    assert_eq!(report["summary"]["pods"], 0, "{report}");
}

// ---------------------------------------------------------------------------------------
// Invalid input

fn plan_fails(input: &str) -> String {
    let scratch = Scratch::new(&format!("bad-{:x}", input.len()));
    let file = scratch.file("bad.yaml", input);
    let output = kerf(&["plan", "-o", "json", "-f", &file], None);
    assert_eq!(
        output.status.code(),
        Some(1),
        "invalid input exits 1: {}",
        text(&output.stderr)
    );
    assert!(
        output.stdout.is_empty(),
        "nothing on stdout: {}",
        text(&output.stdout)
    );
    let stderr = text(&output.stderr);
    assert!(stderr.contains(&file), "the file is named: {stderr}");
    stderr
}

#[test]
fn a_bad_quantity_is_refused_naming_file_object_and_field() {
    let stderr = plan_fails(&format!(
        "{NODEPOOL_ALL}{}",
        deployment("web", 1, "1x", "1Gi", "")
    ));
    assert!(stderr.contains("Deployment/web"), "{stderr}");
    assert!(
        stderr.contains("spec.template.spec.containers[0].resources.requests.cpu"),
        "{stderr}"
    );
    assert!(stderr.contains("1x"), "{stderr}");
}

#[test]
fn a_deployment_without_template_is_refused() {
    let input =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: hollow\nspec:\n  replicas: 2\n";
    let stderr = plan_fails(input);
    assert!(
        stderr.contains("Deployment/hollow: spec.template"),
        "{stderr}"
    );
}

#[test]
fn a_pod_without_containers_is_refused() {
    let stderr = plan_fails(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: empty\nspec:\n  containers: []\n",
    );
    assert!(stderr.contains("Pod/empty: spec.containers"), "{stderr}");
}

#[test]
fn an_invalid_node_pool_is_refused_with_the_validate_rules() {
    let pool = NODEPOOL_ALL.replace(
        "operator: In\n          values: [\"c\", \"m\", \"r\"]",
        "operator: Has\n          values: [\"c\"]",
    );
    assert_ne!(pool, NODEPOOL_ALL);
    let stderr = plan_fails(&format!("{pool}{}", deployment("web", 1, "1", "1Gi", "")));
    assert!(stderr.contains("NodePool/default"), "{stderr}");
    assert!(
        stderr.contains("spec.template.spec.requirements[2].operator"),
        "{stderr}"
    );
}

#[test]
fn every_problem_is_reported_at_once() {
    let input = format!(
        "{}{}",
        deployment("one", 1, "1x", "1Gi", ""),
        deployment("two", 1, "1", "lots", "")
    );
    let stderr = plan_fails(&input);
    assert!(
        stderr.contains("Deployment/one") && stderr.contains("Deployment/two"),
        "{stderr}"
    );
}

#[test]
fn an_unknown_region_is_refused() {
    let output = kerf(
        &["plan", "--region", "mars-north-1", "-f", "-"],
        Some(NODEPOOL_ALL),
    );
    assert_eq!(output.status.code(), Some(1));
    assert!(output.stdout.is_empty());
    assert!(
        text(&output.stderr).contains("mars-north-1"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn another_region_uses_its_zones() {
    let input = format!(
        "{NODEPOOL_ALL}{}",
        deployment("web", 3, "1", "1Gi", &zone_spread("web"))
    );
    let report = plan_json(&["--region", "eu-west-1", "-f", "-"], Some(&input));
    for claim in claims(&report) {
        let zone = claim["launch"]["zone"].as_str().expect("zone");
        assert!(zone.starts_with("eu-west-1"), "{zone}");
    }
}

// ---------------------------------------------------------------------------------------
// Upstream examples combined with a workload

/// The NodePool's `In` requirements hold on every NodeClaim of the pool.
fn assert_claims_honour_pool(report: &Value, pool: &str, allowed: &[(&str, &[&str])]) {
    let pool_claims: Vec<&Value> = claims(report)
        .iter()
        .filter(|c| c["nodePool"] == pool)
        .collect();
    assert!(!pool_claims.is_empty(), "no NodeClaim for {pool}: {report}");
    for claim in pool_claims {
        for (key, values) in allowed {
            if let Some(claimed) = in_values(claim, key) {
                assert!(
                    claimed.iter().all(|v| values.contains(&v.as_str())),
                    "{key} {claimed:?} ⊄ {values:?}"
                );
            }
        }
        for instance_type in strings(&claim["instanceTypes"]) {
            for (key, values) in allowed {
                let label = type_label(&instance_type, key);
                if !label.is_empty() {
                    assert!(
                        values.contains(&label.as_str()),
                        "{instance_type}: {key}={label} ∉ {values:?}"
                    );
                }
            }
            let generation: u32 = type_label(&instance_type, GENERATION).parse().unwrap_or(0);
            assert!(generation > 2, "{instance_type} generation {generation}");
        }
        let capacity = claim["launch"]["capacityType"].as_str().expect("capacity");
        if let Some((_, values)) = allowed.iter().find(|(k, _)| *k == CAPACITY_TYPE) {
            assert!(values.contains(&capacity), "launch capacity {capacity}");
        }
    }
}

const AMD64_ON_DEMAND_CMR: &[(&str, &[&str])] = &[
    (ARCH, &["amd64"]),
    (CAPACITY_TYPE, &["on-demand"]),
    (CATEGORY, &["c", "m", "r"]),
];

#[test]
fn upstream_general_purpose_style_pools_plan_on_demand_amd64_cmr() {
    for (example, pool) in [
        ("general-purpose.yaml", "general-purpose"),
        ("al2023-custom-userdata.yaml", "default"),
        ("bottlerocket.yaml", "default"),
        ("max-node-lifetime.yaml", "default"),
    ] {
        let workload = deployment("inflate", 5, "1", "1Gi", "");
        let report = plan_json(
            &["-f", &upstream_example(example), "-f", "-"],
            Some(&workload),
        );
        assert_eq!(report["summary"]["scheduled"], 5, "{example}: {report}");
        assert_claims_honour_pool(&report, pool, AMD64_ON_DEMAND_CMR);
        for claim in claims(&report) {
            assert_eq!(
                in_values(claim, OS),
                Some(vec!["linux".to_string()]),
                "{example}: {claim}"
            );
        }
    }
}

#[test]
fn upstream_cpu_limit_is_respected() {
    let workload = deployment("inflate", 30, "4", "4Gi", "");
    let report = plan_json(
        &["-f", &upstream_example("100-cpu-limit.yaml"), "-f", "-"],
        Some(&workload),
    );
    assert_claims_honour_pool(&report, "limitcpu100", AMD64_ON_DEMAND_CMR);
    // Upstream counts a NodeClaim against the limit at the largest of its instance types.
    let committed: u32 = claims(&report)
        .iter()
        .map(|claim| {
            strings(&claim["instanceTypes"])
                .iter()
                .map(|t| type_label(t, INSTANCE_CPU).parse::<u32>().expect("vcpus"))
                .max()
                .expect("types")
        })
        .sum();
    assert!(
        committed <= 100,
        "NodeClaims commit {committed} vCPUs against a limit of 100"
    );
    let requested: f64 = claims(&report)
        .iter()
        .map(|c| quantity_milli(c["requests"]["cpu"].as_str().expect("cpu")))
        .sum();
    assert!(requested <= 100_000.0);
    assert!(
        !unschedulable(&report).is_empty(),
        "120 cpus of pods cannot fit in 100: {report}"
    );
}

#[test]
fn upstream_arm64_deployment_lands_on_the_arm64_pool() {
    let report = plan_json(
        &[
            "-f",
            &upstream_example("arm64.yaml"),
            "-f",
            &upstream_example("multiple-arch.yaml"),
        ],
        None,
    );
    assert_eq!(report["summary"]["scheduled"], 1, "{report}");
    assert_claims_honour_pool(
        &report,
        "arm64",
        &[
            (ARCH, &["arm64"]),
            (CAPACITY_TYPE, &["on-demand"]),
            (CATEGORY, &["c", "a"]),
        ],
    );
}

#[test]
fn upstream_multiple_arch_routes_amd64_pods_to_the_amd64_pool() {
    let workload = deployment(
        "x86",
        2,
        "1",
        "1Gi",
        "nodeSelector:\n  kubernetes.io/arch: amd64",
    );
    let report = plan_json(
        &["-f", &upstream_example("multiple-arch.yaml"), "-f", "-"],
        Some(&workload),
    );
    assert_claims_honour_pool(&report, "amd64", AMD64_ON_DEMAND_CMR);
    assert!(
        claims(&report).iter().all(|c| c["nodePool"] == "amd64"),
        "{report}"
    );
}

#[test]
fn upstream_spot_deployment_launches_spot() {
    let spot = std::fs::read_to_string(upstream_example("spot.yaml")).expect("spot.yaml");
    assert!(
        spot.contains("replicas: 0"),
        "upstream ships it scaled to zero"
    );
    let scaled = spot.replace("replicas: 0", "replicas: 4");
    let input = format!("{NODEPOOL_ALL}---\n{scaled}");
    let report = plan_json(&["-f", "-"], Some(&input));
    assert_eq!(report["summary"]["scheduled"], 4, "{report}");
    for claim in claims(&report) {
        assert_eq!(claim["launch"]["capacityType"], "spot", "{claim}");
        assert_eq!(
            in_values(claim, CAPACITY_TYPE),
            Some(vec!["spot".to_string()]),
            "{claim}"
        );
    }
    // As upstream ships it, the deployment has no pods: nothing to plan.
    let report = plan_json(
        &["-f", &upstream_example("spot.yaml"), "-f", "-"],
        Some(NODEPOOL_ALL),
    );
    assert_eq!(report["summary"]["pods"], 0);
}

#[test]
fn upstream_min_values_keeps_enough_families() {
    let workload = deployment("inflate", 3, "1", "1Gi", "");
    let report = plan_json(
        &["-f", &upstream_example("min-values-family.yaml"), "-f", "-"],
        Some(&workload),
    );
    assert_claims_honour_pool(
        &report,
        "spot",
        &[
            (ARCH, &["amd64"]),
            (CAPACITY_TYPE, &["spot"]),
            (CATEGORY, &["c", "m", "r"]),
        ],
    );
    for claim in claims(&report) {
        let families: BTreeSet<String> = strings(&claim["instanceTypes"])
            .iter()
            .map(|t| type_label(t, FAMILY))
            .collect();
        assert!(
            families.len() >= 5,
            "minValues 5 on instance-family: {families:?}"
        );
        let family = requirement(claim, FAMILY).expect("instance-family requirement");
        assert_eq!(family["minValues"], 5, "{claim}");
    }
}

#[test]
fn upstream_windows_pool_plans_windows_nodes() {
    let workload = deployment(
        "iis",
        2,
        "1",
        "2Gi",
        "nodeSelector:\n  kubernetes.io/os: windows",
    );
    let report = plan_json(
        &["-f", &upstream_example("windows-2022.yaml"), "-f", "-"],
        Some(&workload),
    );
    assert_eq!(report["summary"]["scheduled"], 2, "{report}");
    assert_claims_honour_pool(&report, "windows2022", AMD64_ON_DEMAND_CMR);
    for claim in claims(&report) {
        assert_eq!(
            in_values(claim, OS),
            Some(vec!["windows".to_string()]),
            "{claim}"
        );
    }
}

#[test]
fn upstream_disruption_budget_example_is_read_and_planned() {
    let output = kerf(
        &[
            "plan",
            "-o",
            "json",
            "-f",
            &upstream_example("disruption-budget.yaml"),
            "-f",
            &upstream_example("general-purpose.yaml"),
        ],
        None,
    );
    assert!(output.status.success(), "{}", text(&output.stderr));
    assert!(
        !text(&output.stderr).contains("PodDisruptionBudget/pdb: ignored"),
        "PDBs are read"
    );
    let report: Value = serde_json::from_slice(&output.stdout).expect("json");
    check_contract(&report);
    assert_eq!(report["summary"]["scheduled"], 10, "{report}");
    assert_claims_honour_pool(&report, "general-purpose", AMD64_ON_DEMAND_CMR);
}

#[test]
fn every_upstream_example_is_accepted() {
    let dir = upstream_examples();
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).expect("examples dir") {
        let path = entry.expect("entry").path();
        let output = kerf(
            &["plan", "-o", "json", "-f", &path.display().to_string()],
            None,
        );
        assert!(
            output.status.success(),
            "{}: {}",
            path.display(),
            text(&output.stderr)
        );
        let report: Value = serde_json::from_slice(&output.stdout).expect("json");
        check_contract(&report);
        seen += 1;
    }
    assert!(seen >= 11, "{seen} examples");
}

#[test]
fn warns_where_upstream_logs_errors_or_users_get_surprised() {
    let long_role =
        "KarpenterNodeRole-".to_owned() + &"a-very-long-generated-cluster-name-".repeat(2);
    let manifests = format!(
        r#"{NODEPOOL_ALL}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {{name: default}}
spec:
  role: {long_role}
  amiSelectorTerms: [{{alias: al2023@latest}}]
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  kubelet: {{maxPods: 200}}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: west}}
spec:
  template:
    spec:
      requirements:
        - {{key: topology.kubernetes.io/zone, operator: In, values: [us-west-2a]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: gp2}}
provisioner: kubernetes.io/aws-ebs
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: huge, namespace: kube-system}}
spec:
  selector: {{matchLabels: {{app: huge}}}}
  template:
    metadata: {{labels: {{app: huge}}}}
    spec:
      containers: [{{name: c, image: x, resources: {{requests: {{cpu: "4000"}}}}}}]
{}"#,
        deployment("web", 1, "1", "1Gi", "")
    );
    let output = kerf(&["plan", "-f", "-"], Some(&manifests));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let stderr = text(&output.stderr);
    for expected in [
        "warning: StorageClass/gp2: .spec.provisioner kubernetes.io/aws-ebs is an in-tree storage plugin",
        "ebs.csi.aws.com",
        "warning: EC2NodeClass/default: spec.role is 88 characters; IAM role names are at most 64",
        "warning: NodePool/default: EC2NodeClass/default sets kubelet maxPods=200, above the VPC CNI's IP limit",
        "warning: NodePool/west: requires zone(s) us-west-2a outside --region us-east-1",
        "warning: DaemonSet kube-system/huge: its pod requests {cpu: 4k}, more than any instance type",
    ] {
        assert!(stderr.contains(expected), "{expected:?} in:\n{stderr}");
    }
    assert!(!stderr.contains("no NodePool in the input"), "{stderr}");

    let pod_only = kerf(
        &["plan", "-f", "-"],
        Some(&deployment("web", 1, "1", "1Gi", "")),
    );
    assert!(
        text(&pod_only.stderr).contains("warning: no NodePool in the input"),
        "{}",
        text(&pod_only.stderr)
    );
}

#[test]
fn one_round_is_said_plainly_and_rounds_plan_what_the_controller_would_place_later() {
    let pool = NODEPOOL_ALL.replace("  template:\n", "  limits:\n    cpu: \"64\"\n  template:\n");
    let spread = "affinity:\n  podAntiAffinity:\n    requiredDuringSchedulingIgnoredDuringExecution:\n      - topologyKey: kubernetes.io/hostname\n        labelSelector:\n          matchLabels:\n            app: spread\n";
    let input = format!("{pool}{}", deployment("spread", 3, "1", "1Gi", spread));

    let one = kerf(&["plan", "-f", "-"], Some(&input));
    let table = text(&one.stdout);
    let summary = table.lines().last().expect("summary line");
    assert!(summary.contains("2 unschedulable"), "{summary}");
    assert!(
        summary.contains("one provisioning round (NodePool limits charged at each new NodeClaim's largest instance type"),
        "{summary}"
    );
    assert!(
        table.contains(r#"all available instance types exceed limits for nodepool: "default""#),
        "{table}"
    );

    let rounds = plan_json(&["-f", "-", "--rounds", "5"], Some(&input));
    assert!(unschedulable(&rounds).is_empty(), "{rounds}");
    assert_eq!(claims(&rounds).len(), 3);
    assert_eq!(
        rounds["summary"]["rounds"], 2,
        "round 2 sees the first NodeClaim at its cheapest type and places both others"
    );
    check_contract(&rounds);

    let refused = kerf(&["plan", "-f", "-", "--rounds", "0"], Some(&input));
    assert!(!refused.status.success());
    assert!(
        text(&refused.stderr).contains("--rounds"),
        "{}",
        text(&refused.stderr)
    );
}

#[test]
fn reservations_in_the_node_class_status_are_launched_into_first() {
    let input = format!(
        r#"---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["reserved", "on-demand"]
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["m5.xlarge", "m5.2xlarge"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms: [{{alias: al2023@latest}}]
  role: KarpenterNodeRole
  subnetSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  securityGroupSelectorTerms: [{{tags: {{karpenter.sh/discovery: demo}}}}]
  capacityReservationSelectorTerms: [{{id: cr-0123456789abcdef0}}]
status:
  capacityReservations:
    - id: cr-0123456789abcdef0
      instanceType: m5.2xlarge
      availabilityZone: us-east-1b
      instanceMatchCriteria: targeted
      ownerID: "123456789012"
{}"#,
        deployment("train", 2, "6", "8Gi", "")
    );
    let report = plan_json(&["-f", "-"], Some(&input));
    check_contract(&report);
    let launches: Vec<(String, String, String)> = claims(&report)
        .iter()
        .map(|claim| {
            let launch = &claim["launch"];
            (
                launch["capacityType"]
                    .as_str()
                    .expect("capacity type")
                    .to_owned(),
                launch["instanceType"].as_str().expect("type").to_owned(),
                launch["zone"].as_str().expect("zone").to_owned(),
            )
        })
        .collect();
    assert_eq!(launches.len(), 2, "{report}");
    for launch in &launches {
        assert_eq!(
            launch,
            &(
                "reserved".to_owned(),
                "m5.2xlarge".to_owned(),
                "us-east-1b".to_owned()
            ),
            "{report}"
        );
    }
    // The status has no instance counts: the plan says what it assumed.
    let output = kerf(&["plan", "-f", "-", "-o", "json"], Some(&input));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cr-0123456789abcdef0") && stderr.contains("assumes room"),
        "{stderr}"
    );
    // With the gate off the controller neither resolves nor launches into reservations, and
    // the plan follows it.
    let args = [
        "plan",
        "-f",
        "-",
        "-o",
        "json",
        "--feature-gates",
        "ReservedCapacity=false",
    ];
    let output = kerf(&args, Some(&input));
    assert!(output.status.success(), "{}", text(&output.stderr));
    let off: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let capacity_types: Vec<&Value> = claims(&off)
        .iter()
        .map(|claim| &claim["launch"]["capacityType"])
        .collect();
    let on_demand = Value::from("on-demand");
    assert_eq!(capacity_types, [&on_demand, &on_demand], "{off}");
    assert!(
        !text(&output.stderr).contains("assumes room"),
        "{}",
        text(&output.stderr)
    );
}

#[test]
fn a_static_pool_is_planned_to_its_replicas_under_the_gate_and_pods_use_its_nodes() {
    let pools = r#"
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: fixed
spec:
  replicas: 3
  limits:
    nodes: "2"
  template:
    spec:
      requirements:
        - key: node.kubernetes.io/instance-type
          operator: In
          values: ["m5.xlarge"]
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  template:
    spec:
      requirements: []
      nodeClassRef:
        group: karpenter.k8s.aws
        kind: EC2NodeClass
        name: default
"#;
    let input = format!("{pools}{}", deployment("web", 2, "1", "1Gi", ""));
    let report = plan_json(
        &["-f", "-", "--feature-gates", "StaticCapacity=true"],
        Some(&input),
    );
    let fixed: Vec<&Value> = claims(&report)
        .iter()
        .filter(|c| c["nodePool"] == "fixed")
        .collect();
    assert_eq!(fixed.len(), 2, "replicas 3, but limits.nodes 2: {report:#}");
    assert!(fixed.iter().all(|c| c["replica"] == true), "{report:#}");
    assert!(
        fixed
            .iter()
            .all(|c| strings(&c["instanceTypes"]) == ["m5.xlarge"]),
        "{report:#}"
    );
    assert_eq!(
        claims(&report)
            .iter()
            .filter(|c| c["nodePool"] == "default")
            .count(),
        0,
        "the pods fit on the static nodes: {report:#}"
    );
    assert_eq!(report["summary"]["scheduled"], 2, "{report:#}");

    let output = kerf(&["plan", "-o", "json", "-f", "-"], Some(&input));
    assert!(output.status.success());
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains(
            "NodePool fixed: spec.replicas is ignored with the StaticCapacity feature gate off"
        ),
        "{stderr}"
    );
    let off: Value = serde_json::from_str(&text(&output.stdout)).expect("JSON");
    assert!(
        claims(&off).iter().all(|c| c["nodePool"] == "default"),
        "no NodeClaim of the static pool without the gate: {off:#}"
    );
}

// ---------------------------------------------------------------------------------------
// NodeOverlays and CapacityBuffers as input

const OVERLAY_M5_LARGE: &str = r#"---
apiVersion: karpenter.sh/v1alpha1
kind: NodeOverlay
metadata:
  name: savings-plan
spec:
  weight: 10
  requirements:
    - key: node.kubernetes.io/instance-type
      operator: In
      values: ["m5.large"]
  price: "0.001"
"#;

#[test]
fn an_overlay_in_the_input_reprices_the_launch() {
    let plain = format!("{NODEPOOL_ALL}{}", deployment("inflate", 1, "1", "1Gi", ""));
    let before = plan_json(&["-f", "-"], Some(&plain));
    let launched = |report: &Value| {
        let launch = &claims(report)[0]["launch"];
        (
            launch["instanceType"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            launch["price"].as_f64().unwrap_or_default(),
        )
    };
    assert_ne!(launched(&before).0, "m5.large", "{before}");
    let overlaid = format!("{plain}{OVERLAY_M5_LARGE}");
    let after = plan_json(&["-f", "-"], Some(&overlaid));
    assert_eq!(launched(&after), ("m5.large".to_owned(), 0.001), "{after}");
    assert_eq!(
        strings(&claims(&after)[0]["instanceTypes"])[0],
        "m5.large",
        "cheapest first, at the overlay's price"
    );
}

#[test]
fn a_capacity_buffer_in_the_input_reserves_room() {
    let buffer = r#"---
apiVersion: v1
kind: PodTemplate
metadata:
  name: slot
  namespace: default
template:
  metadata:
    labels:
      app: slot
  spec:
    containers:
      - name: app
        image: pause
        resources:
          requests:
            cpu: "2"
            memory: 2Gi
---
apiVersion: autoscaling.x-k8s.io/v1beta1
kind: CapacityBuffer
metadata:
  name: headroom
  namespace: default
spec:
  podTemplateRef:
    name: slot
  replicas: 3
"#;
    let input = format!("{NODEPOOL_ALL}{buffer}");
    let report = plan_json(&["-f", "-"], Some(&input));
    let placed: Vec<String> = claims(&report)
        .iter()
        .flat_map(|c| strings(&c["pods"]))
        .collect();
    assert_eq!(
        placed
            .iter()
            .filter(|p| p.starts_with("default/capacity-buffer-headroom-"))
            .count(),
        3,
        "room for three 2-CPU placeholder pods: {report}"
    );
}

/// A pool per EC2NodeClass over the same EFA-capable family: `plain` (weight 10) whose class
/// lists only a primary interface, so its nodes have no EFA; `efa` (weight 1) whose class
/// lists none, so EFA-capable types advertise their EFA interfaces, as upstream.
const EFA_POOLS: &str = r#"
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: plain
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {discovery: test}}]
  securityGroupSelectorTerms: [{tags: {discovery: test}}]
  networkInterfaces:
    - {networkCardIndex: 0, deviceIndex: 0, interfaceType: interface}
---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  role: KarpenterNodeRole
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {discovery: test}}]
  securityGroupSelectorTerms: [{tags: {discovery: test}}]
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: plain
spec:
  weight: 10
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["c5n"]}
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: plain}
---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: efa
spec:
  weight: 1
  template:
    spec:
      requirements:
        - {key: karpenter.k8s.aws/instance-family, operator: In, values: ["c5n"]}
        - {key: karpenter.sh/capacity-type, operator: In, values: ["on-demand"]}
      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
---
apiVersion: v1
kind: Pod
metadata:
  name: mpi-0
  namespace: default
spec:
  containers:
    - name: worker
      image: pause
      resources:
        requests: {cpu: "1", vpc.amazonaws.com/efa: "1"}
        limits: {vpc.amazonaws.com/efa: "1"}
"#;

#[test]
fn an_efa_pod_lands_only_on_types_whose_class_gives_them_efa() {
    let input = format!("{EFA_POOLS}{}", deployment("web", 1, "1", "1Gi", ""));
    let report = plan_json(&["-f", "-"], Some(&input));
    assert!(unschedulable(&report).is_empty(), "{report}");
    let efa_of = |name: &str| {
        Catalog::embedded("us-east-1")
            .expect("us-east-1 is embedded")
            .instance_types(&AllocatableSettings::default())
            .into_iter()
            .find(|it| it.name == name)
            .and_then(|it| it.capacity.get("vpc.amazonaws.com/efa"))
            .map_or(0, |q| q.value())
    };
    // The heavier pool takes the plain pod; the EFA pod skips it (its class attaches no
    // EFA) for the pool whose types have EFA, and only such types.
    let web = claims(&report)
        .iter()
        .find(|c| {
            strings(&c["pods"])
                .iter()
                .any(|p| p.starts_with("default/web-"))
        })
        .expect("web placed");
    assert_eq!(web["nodePool"], "plain", "{web}");
    let mpi = claim_of(&report, "default/mpi-0").expect("mpi placed");
    assert_eq!(mpi["nodePool"], "efa", "{mpi}");
    assert_eq!(mpi["requests"]["vpc.amazonaws.com/efa"], "1", "{mpi}");
    let types = strings(&mpi["instanceTypes"]);
    assert!(!types.is_empty());
    for instance_type in &types {
        assert!(efa_of(instance_type) > 0, "{instance_type} has no EFA");
    }
    assert!(
        types.len()
            < catalog_labels()
                .keys()
                .filter(|t| t.starts_with("c5n."))
                .count(),
        "c5n types without EFA are left out: {types:?}"
    );
}
