//! `kerf explain` against a live cluster: one `kerf simulate --kubeconfig-out` (with spot
//! capacity refused everywhere, so its controller's unavailable-offerings cache fills) is
//! shared by one check per `docs/troubleshooting.md` symptom a live cluster can show; each
//! creates what shows the symptom through the real kubectl (Debian's kubernetes-client,
//! installed by `scripts/test.sh`; the test is skipped with a note where it is missing) and
//! asserts that `kerf explain` names the cause and the entry (`documented("ID")`). The checks
//! run in one test, in sequence, since they share the cluster.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kerf::troubleshooting::{documented, entry};
use serde_json::Value;

#[path = "kerf_cli/serving.rs"]
mod serving;
#[path = "kerf_cli/kubectl.rs"]
mod session;

use session::{PATIENCE, Session, kubectl_binary};

/// The simulated cluster and its controller's metrics address.
struct Cluster {
    session: Session,
    controller: String,
}

impl Cluster {
    fn start(kubectl: String) -> Self {
        let session = Session::start(kubectl, "explain", 6, &["--ice", "*:*:spot"]);
        let controller = session
            .started
            .iter()
            .find_map(|l| l.strip_prefix("controller metrics: "))
            .and_then(|url| url.strip_suffix("/metrics"))
            .unwrap_or_else(|| panic!("no metrics address in {:?}", session.started))
            .to_owned();
        Self {
            session,
            controller,
        }
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut child = Command::new(&self.session.binary)
            .arg("--kubeconfig")
            .arg(&self.session.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        if let Some(text) = stdin {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .expect("stdin")
                .write_all(text.as_bytes())
                .expect("kubectl reads");
        }
        let out = child.wait_with_output().expect("kubectl finishes");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}{}",
            text(&out.stderr),
            text(&out.stdout)
        );
        text(&out.stdout)
    }

    fn apply(&self, manifests: &str) {
        self.kubectl(&["apply", "-f", "-"], Some(manifests));
    }

    /// `kerf explain ARGS` against the cluster and its controller: (status, stdout, stderr).
    fn try_explain(&self, args: &[&str], controller: &str) -> (bool, String, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_kerf"))
            .arg("explain")
            .args(args)
            .arg("--kubeconfig")
            .arg(&self.session.kubeconfig)
            .args(["--controller", controller])
            .stdin(Stdio::null())
            .output()
            .expect("kerf explain runs");
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.success(), text(&out.stdout), text(&out.stderr))
    }

    /// The table `kerf explain ARGS` prints.
    fn explain(&self, args: &[&str]) -> String {
        let (ok, stdout, stderr) = self.try_explain(args, &self.controller);
        assert!(ok, "kerf explain {args:?}: {stderr}");
        stdout
    }

    /// The JSON `kerf explain ARGS -o json` prints.
    fn explain_json(&self, args: &[&str]) -> Value {
        let mut full = args.to_vec();
        full.extend(["-o", "json"]);
        serde_json::from_str(&self.explain(&full)).expect("kerf explain prints JSON")
    }

    /// Polls `check` until it returns a value, or fails naming `what` after [`PATIENCE`].
    fn eventually<T>(&self, what: &str, mut check: impl FnMut(&Self) -> Option<T>) -> T {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(found) = check(self) {
                return found;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

/// A pod of `cpu` CPUs with `extra` appended to its spec.
fn pod(name: &str, requests: &str, extra: &str) -> String {
    format!(
        "---
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, labels: {{app: {name}}}}}
spec:
  containers: [{{name: app, image: pause, resources: {{requests: {requests}}}}}]
{extra}"
    )
}

/// A NodePool on the default EC2NodeClass (or `class`), tainted so only pods that ask for it
/// land there.
fn nodepool(name: &str, class: &str, extra_spec: &str) -> String {
    format!(
        "---
apiVersion: karpenter.sh/v1
kind: NodePool
metadata: {{name: {name}}}
spec:
{extra_spec}  template:
    spec:
      taints: [{{key: pool, value: {name}, effect: NoSchedule}}]
      requirements:
        - {{key: karpenter.k8s.aws/instance-category, operator: In, values: [c, m, r]}}
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: {class}}}
"
    )
}

/// What a pod needs to land in pool `name` only.
fn in_pool(name: &str) -> String {
    format!(
        "  nodeSelector: {{karpenter.sh/nodepool: {name}}}
  tolerations: [{{key: pool, operator: Equal, value: {name}, effect: NoSchedule}}]
"
    )
}

/// The verdict line of `pool` in a pod's table.
fn verdict<'a>(table: &'a str, pool: &str) -> &'a str {
    verdict_if_pending(table, pool)
        .unwrap_or_else(|| panic!("no verdict for nodepool {pool} in:\n{table}"))
}

/// The verdict line of `pool`, or nothing when the pod has none (it is bound).
fn verdict_if_pending<'a>(table: &'a str, pool: &str) -> Option<&'a str> {
    table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(pool))
}

/// The verdict of `pool` in a pod's JSON.
fn pool_verdict<'a>(json: &'a Value, pool: &str) -> &'a Value {
    json["nodePools"]
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["nodePool"] == pool))
        .map(|p| &p["verdict"])
        .unwrap_or_else(|| panic!("no verdict for nodepool {pool} in {json}"))
}

/// The pod's explanation names `id`'s troubleshooting entry.
fn names_entry(table: &str, id: &str) {
    let entry = entry(id).expect("documented");
    assert!(
        table.contains(&format!("see: {} ({})", entry.link, entry.title))
            || table.contains(&format!("SEE         {} ({})", entry.link, entry.title)),
        "{id}'s entry ({}) not named in:\n{table}",
        entry.link
    );
}

#[test]
fn kerf_explain_names_the_cause_and_the_entry_of_each_live_symptom() {
    let Some(kubectl) = kubectl_binary() else {
        eprintln!("note: kubectl is not installed (scripts/test.sh installs it); skipping");
        return;
    };
    let cluster = Cluster::start(kubectl);
    an_unreachable_controller_is_named_with_its_address(&cluster);
    a_pod_too_large_for_any_type_and_a_cpu_typo(&cluster);
    a_resource_no_instance_type_offers(&cluster);
    the_controllers_own_pod_refused_by_every_pool(&cluster);
    limits_that_leave_too_little_and_nothing(&cluster);
    a_nodeclass_that_is_not_ready(&cluster);
    spot_offerings_in_the_controllers_cache(&cluster);
    a_drain_held_by_a_pod_disruption_budget(&cluster);
    a_budget_window_and_the_pools_limits(&cluster);
    a_node_nominated_then_kept_for_a_pod_pinned_to_it(&cluster);
    a_spread_over_more_zones_than_the_pool_allows(&cluster);
}

fn an_unreachable_controller_is_named_with_its_address(cluster: &Cluster) {
    let nodes = cluster.kubectl(&["get", "nodes", "-o", "name"], None);
    let node = nodes
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("node/"))
        .expect("a node");
    let (ok, table, _) = cluster.try_explain(&["node", node], "http://127.0.0.1:9");
    assert!(ok, "explains from the snapshot alone");
    assert!(
        table.contains("controller at http://127.0.0.1:9/explain: NOT reached"),
        "{table}"
    );
    assert!(table.contains("DISRUPTION"), "{table}");
    let reached = cluster.explain(&["node", node]);
    assert!(reached.contains("reached (leader)"), "{reached}");
}

fn a_pod_too_large_for_any_type_and_a_cpu_typo(cluster: &Cluster) {
    cluster.apply(&(pod("huge", "{cpu: '500'}", "") + &pod("typo", "{cpu: 2M}", "")));
    let huge = cluster.explain(&["pod", "default/huge"]);
    assert!(huge.contains("STATE      pending"), "{huge}");
    assert!(
        verdict(&huge, "default").contains(documented("largest-allowed")),
        "{huge}"
    );
    names_entry(&huge, "largest-allowed");
    let json = cluster.explain_json(&["pod", "huge"]);
    assert_eq!(
        pool_verdict(&json, "default")["cause"],
        "resources",
        "{json}"
    );
    let typo = cluster.explain(&["pod", "typo"]);
    assert!(
        verdict(&typo, "default").contains(documented("cpu-typo")),
        "{typo}"
    );
    // The kube-scheduler's own word comes along.
    let scheduler = cluster.eventually("the kube-scheduler's verdict on huge", |c| {
        let json = c.explain_json(&["pod", "huge"]);
        json["schedulerMessage"].as_str().map(str::to_owned)
    });
    assert!(scheduler.contains("Insufficient cpu"), "{scheduler}");
}

fn a_resource_no_instance_type_offers(cluster: &Cluster) {
    cluster.apply(&pod("trunk", "{cpu: '1', nvidia.com/gpu: '1'}", ""));
    let table = cluster.explain(&["pod", "trunk"]);
    assert!(
        verdict(&table, "default").contains(documented("missing-resource")),
        "{table}"
    );
    names_entry(&table, "missing-resource");
}

fn the_controllers_own_pod_refused_by_every_pool(cluster: &Cluster) {
    let affinity = "  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
          - matchExpressions:
              - {key: karpenter.sh/nodepool, operator: DoesNotExist}
";
    cluster.apply(&pod("kerf-controller", "{cpu: '1'}", affinity));
    let table = cluster.explain(&["pod", "kerf-controller"]);
    assert!(
        verdict(&table, "default").contains(documented("controller-self")),
        "{table}"
    );
    let json = cluster.explain_json(&["pod", "kerf-controller"]);
    assert_eq!(
        pool_verdict(&json, "default")["cause"],
        "requirements",
        "{json}"
    );
    names_entry(&table, "controller-self");
}

fn limits_that_leave_too_little_and_nothing(cluster: &Cluster) {
    cluster.apply(
        &(nodepool("small", "default", "  limits: {cpu: '2'}\n")
            + &nodepool("none-left", "default", "  limits: {cpu: '0'}\n")),
    );
    cluster.apply(
        &(pod("big", "{cpu: '3'}", &in_pool("small"))
            + &pod("starved", "{cpu: '1'}", &in_pool("none-left"))),
    );
    let big = cluster.explain(&["pod", "big"]);
    assert!(
        verdict(&big, "small").contains(documented("limits-shortfall")),
        "{big}"
    );
    // The other pools refuse it for their own first reasons, each on its line.
    assert!(verdict(&big, "default").contains("cannot: "), "{big}");
    assert!(verdict(&big, "none-left").contains("cannot: "), "{big}");
    names_entry(&big, "limits-shortfall");
    let starved = cluster.explain(&["pod", "starved"]);
    assert!(
        verdict(&starved, "none-left").contains(documented("limits-exhausted")),
        "{starved}"
    );
    names_entry(&starved, "limits-exhausted");
    let json = cluster.explain_json(&["nodepool", "small"]);
    assert_eq!(json["limits"]["cpu"], "2", "{json}");
    assert_eq!(json["remaining"]["cpu"], "2", "{json}");
}

fn a_nodeclass_that_is_not_ready(cluster: &Cluster) {
    let class = "---
apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata: {name: elsewhere}
spec:
  role: KarpenterNodeRole-kerf-sim
  amiSelectorTerms: [{alias: al2023@latest}]
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: another-cluster}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: kerf-sim}}]
";
    cluster.apply(&(class.to_owned() + &nodepool("elsewhere", "elsewhere", "")));
    cluster.apply(&pod("stranded", "{cpu: '1'}", &in_pool("elsewhere")));
    let table = cluster.eventually("the EC2NodeClass resolved not Ready", |c| {
        let table = c.explain(&["pod", "stranded"]);
        verdict(&table, "elsewhere")
            .contains("NodeClassReady=False")
            .then_some(table)
    });
    let line = verdict(&table, "elsewhere");
    assert!(line.contains(documented("nodeclass-not-ready")), "{table}");
    assert!(line.contains("SubnetsReady=False"), "{table}");
    names_entry(&table, "nodeclass-not-ready");
    let pool = cluster.explain_json(&["nodepool", "elsewhere"]);
    assert_eq!(pool["nodeClass"]["ready"], "False", "{pool}");
}

fn spot_offerings_in_the_controllers_cache(cluster: &Cluster) {
    let spot = "  nodeSelector: {karpenter.sh/capacity-type: spot}\n";
    cluster.apply(&pod("spot-only", "{cpu: '1'}", spot));
    // The controller tries the pod's spot offerings, EC2 refuses them, the cache keeps them.
    let (json, entries) = cluster.eventually("spot offerings in the cache", |c| {
        let json = c.explain_json(&["pod", "spot-only"]);
        let verdict = pool_verdict(&json, "default").clone();
        let entries = verdict["unavailable"]
            .as_array()
            .or_else(|| verdict["avoided"].as_array())
            .filter(|e| !e.is_empty())?
            .clone();
        Some((json, entries))
    });
    let now = k8s_openapi::jiff::Timestamp::now();
    for entry in &entries {
        assert_eq!(entry["capacityType"], "spot", "{entry}");
        let expires: k8s_openapi::jiff::Timestamp = entry["expires"]
            .as_str()
            .expect("expiry")
            .parse()
            .expect("a time");
        assert!(expires > now, "{entry} expired already");
    }
    assert_eq!(json["troubleshooting"]["id"], "spot-ice", "{json}");
    assert!(documented("spot-ice").contains("InsufficientCapacity"));
    // While a NodeClaim for it is in flight the pod fits there; between two, the table
    // names the cache entries.
    cluster.eventually("the cache entries in the table", |c| {
        let table = c.explain(&["pod", "spot-only"]);
        verdict(&table, "default")
            .contains("unavailable until")
            .then_some(())
    });
}

fn a_drain_held_by_a_pod_disruption_budget(cluster: &Cluster) {
    let pdb = "---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: held, namespace: default}
spec:
  minAvailable: 1
  selector: {matchLabels: {app: held}}
";
    cluster.apply(&(pdb.to_owned() + &pod("held", "{cpu: '1'}", &in_pool("small"))));
    let node = cluster.eventually("the held pod bound", |c| {
        let json = c.explain_json(&["pod", "held"]);
        let bound = json["state"]["phase"] == "bound";
        json["state"]["node"]
            .as_str()
            .filter(|_| bound)
            .map(str::to_owned)
    });
    let claim = cluster.explain_json(&["node", &node])["nodeClaim"]
        .as_str()
        .expect("a NodeClaim")
        .to_owned();
    cluster.kubectl(&["delete", "nodeclaim", &claim, "--wait=false"], None);
    let json = cluster.eventually("the drain held by the PDB", |c| {
        let json = c.explain_json(&["node", &claim]);
        (json["verdict"]["verdict"] == "deleting").then_some(json)
    });
    let drain = &json["drain"];
    assert_eq!(
        drain["podsLeft"],
        serde_json::json!(["default/held"]),
        "{json}"
    );
    let blocked = drain["blockedBy"][0].as_str().expect("a block");
    assert!(
        blocked.contains("PodDisruptionBudget default/held"),
        "{json}"
    );
    assert_eq!(json["troubleshooting"]["id"], "pdb-eviction", "{json}");
    assert!(documented("pdb-eviction").contains("PodDisruptionBudget"));
    let table = cluster.explain(&["node", &node]);
    assert!(
        table.contains("held by: PodDisruptionBudget default/held"),
        "{table}"
    );
}

fn a_budget_window_and_the_pools_limits(cluster: &Cluster) {
    let budgets = "  disruption:
    consolidateAfter: 1m
    budgets:
      - {nodes: '0', schedule: '0 9 * * mon-fri', duration: 8h}
      - {nodes: '10%'}
";
    cluster.apply(&nodepool("business", "default", budgets));
    let json = cluster.explain_json(&["nodepool", "business"]);
    let window = &json["windows"][0];
    assert_eq!(window["schedule"], "0 9 * * mon-fri", "{json}");
    assert_eq!(window["duration"], "8h0m0s", "{json}");
    let until: k8s_openapi::jiff::Timestamp = window["until"]
        .as_str()
        .expect("a time the window opens or closes")
        .parse()
        .expect("a time");
    let now = k8s_openapi::jiff::Timestamp::now();
    assert!(until > now, "{json}");
    let allowed = json["allowed"].as_array().expect("budgets per reason");
    assert_eq!(allowed.len(), 3, "{json}");
    if window["open"] == true {
        assert!(allowed.iter().all(|a| a["nodes"] == 0), "{json}");
    }
    let pool = cluster.explain_json(&["nodepool", "default"]);
    assert!(pool["nodes"].as_u64().expect("a count") >= 1, "{pool}");
    assert_eq!(pool["nodeClass"]["ready"], "True", "{pool}");
    assert!(!pool["disruption"].as_array().expect("its nodes").is_empty());
}

/// The blocking reason and troubleshooting entry `kerf explain node NAME` gives, once it
/// gives a block.
fn blocked(cluster: &Cluster, name: &str) -> Option<(String, String)> {
    let json = cluster.explain_json(&["node", name]);
    (json["verdict"]["verdict"] == "blocked").then(|| {
        (
            json["verdict"]["reason"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            json["troubleshooting"]["id"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        )
    })
}

fn a_node_nominated_then_kept_for_a_pod_pinned_to_it(cluster: &Cluster) {
    let consolidating = "  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 0s
";
    cluster.apply(&nodepool("pinned", "default", consolidating));
    cluster.apply(&pod("seed", "{cpu: '1'}", &in_pool("pinned")));
    // From its Node's initialization, the node launched for the seed stays nominated for
    // it (20 s): no disruption method takes it.
    let claim = cluster.eventually("the seed's NodeClaim", |c| {
        let names = c.kubectl(
            &[
                "get",
                "nodeclaims",
                "-l",
                "karpenter.sh/nodepool=pinned",
                "-o",
                "name",
            ],
            None,
        );
        names
            .lines()
            .next()
            .map(|n| n.trim_start_matches("nodeclaim.karpenter.sh/").to_owned())
    });
    let nominated = cluster.eventually("the seed's node nominated", |c| {
        let found = blocked(c, &claim);
        eprintln!("kerf explain node {claim}: {found:?}");
        found.filter(|(reason, _)| reason == documented("nominated-node"))
    });
    assert_eq!(nominated.1, "nominated-node");
    let node = cluster.explain_json(&["node", &claim])["node"]
        .as_str()
        .expect("its Node")
        .to_owned();
    // A pod pinned to that node by its hostname, and the seed gone: emptying the node
    // would leave the pinned pod nowhere to go, and a replacement has another hostname.
    let pinned = format!(
        "{}  nodeSelector: {{kubernetes.io/hostname: {node}}}
  tolerations: [{{key: pool, operator: Equal, value: pinned, effect: NoSchedule}}]
",
        pod("pinned", "{cpu: 100m}", "")
    );
    cluster.apply(&pinned);
    cluster.kubectl(&["delete", "pod", "seed", "--wait=false"], None);
    let (reason, entry) = cluster.eventually("the node kept for its pinned pod", |c| {
        blocked(c, &node)
            .filter(|(reason, _)| reason.contains(documented("consolidation-constraints")))
    });
    assert_eq!(entry, "consolidation-constraints", "{reason}");
    assert!(
        reason.contains("default/pinned"),
        "the pod is named: {reason}"
    );
}

fn a_spread_over_more_zones_than_the_pool_allows(cluster: &Cluster) {
    let two_zones = nodepool("twozones", "default", "").replace(
        "      requirements:\n",
        "      requirements:\n        - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a, us-east-1b]}\n",
    );
    let spread = format!(
        "{}  topologySpreadConstraints:
    - {{maxSkew: 1, minDomains: 3, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {{matchLabels: {{app: spread}}}}}}
",
        in_pool("twozones")
    );
    let pods: String = (0..3)
        .map(|i| pod(&format!("spread-{i}"), "{cpu: '1'}", &spread))
        .collect::<String>()
        .replace("labels: {app: spread-", "labels: {app: spread, index: i");
    cluster.apply(&(two_zones + &pods));
    // Two zones hold one pod each; whichever of the three is left waits for a third zone, and
    // the two that are bound have no verdicts to read.
    let table = cluster.eventually("a spread pod refused for its zones", |c| {
        (0..3).find_map(|i| {
            let table = c.explain(&["pod", &format!("default/spread-{i}")]);
            verdict_if_pending(&table, "twozones")
                .is_some_and(|line| line.contains(documented("spread-zones")))
                .then_some(table)
        })
    });
    names_entry(&table, "spread-zones");
}
