use super::*;
use crate::manifest::parse_all;
use crate::pods::{LeanPod, PodLike};

fn read(yaml: &str) -> Result<Inventory, Vec<ObjectProblem>> {
    inventory(&parse_all(yaml, "in.yaml").expect("parses"))
}

fn problems(yaml: &str) -> Vec<String> {
    read(yaml)
        .expect_err("invalid")
        .iter()
        .map(ToString::to_string)
        .collect()
}

const POOL: &str = "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      requirements: []\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n";

#[test]
fn sorts_objects_by_kind_and_expands_workloads() {
    let yaml = format!(
        "{POOL}---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web}}
spec:
  replicas: 2
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: agent, namespace: kube-system}}
spec:
  selector: {{matchLabels: {{app: agent}}}}
  template:
    metadata: {{labels: {{app: agent}}}}
    spec: {{containers: [{{name: c, image: x}}]}}
---
apiVersion: v1
kind: Node
metadata: {{name: n1}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: pdb}}
spec: {{minAvailable: 1, selector: {{matchLabels: {{app: web}}}}}}
---
apiVersion: v1
kind: Namespace
metadata: {{name: shop, labels: {{team: a}}}}
---
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {{name: gp3}}
provisioner: ebs.csi.aws.com
---
apiVersion: v1
kind: ConfigMap
metadata: {{name: settings}}
"
    );
    let inventory = read(&yaml).expect("valid");
    let names: Vec<_> = inventory
        .pods
        .iter()
        .map(|p| p.meta().name.expect("named").to_owned())
        .collect();
    assert_eq!(names, ["web-0", "web-1"]);
    assert_eq!(inventory.daemon_pods.len(), 1);
    assert_eq!(inventory.nodes.len(), 1);
    assert_eq!(inventory.node_pools.len(), 1);
    assert_eq!(inventory.disruption_budgets.len(), 1);
    assert_eq!(inventory.namespaces.len(), 1);
    assert_eq!(inventory.storage_classes.len(), 1);
    assert_eq!(inventory.ignored, ["in.yaml: ConfigMap/settings"]);
    assert_eq!(
        inventory.disruption_budgets[0]
            .metadata
            .namespace
            .as_deref(),
        Some("default"),
        "namespaced objects default to the default namespace"
    );
}

#[test]
fn a_missing_selector_defaults_to_the_template_labels() {
    let yaml = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  template:\n    metadata: {labels: {app: web}}\n    spec: {containers: [{name: c, image: x}]}\n";
    assert_eq!(read(yaml).expect("valid").pods.len(), 1);
}

#[test]
fn given_pods_get_a_namespace_a_uid_and_requests_from_limits() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, image: x, resources: {limits: {cpu: 2}}}]\n";
    let pod = &read(yaml).expect("valid").pods[0];
    assert_eq!(pod.meta().namespace, Some("default"));
    assert!(pod.meta().uid.is_some_and(|uid| !uid.is_empty()));
    let requests = pod.spec().expect("spec").containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .expect("requests");
    assert_eq!(requests["cpu"].0, "2");
}

#[test]
fn problems_name_file_object_and_field() {
    let yaml =
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec:\n  replicas: 1\n";
    assert_eq!(
        problems(yaml),
        ["in.yaml: Deployment/web: spec.template: required field is missing"]
    );
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: c, resources: {requests: {memory: 1x}}}]\n";
    let found = problems(yaml);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("in.yaml: Pod/p: spec.containers[0].resources.requests.memory: "),
        "{found:?}"
    );
    let yaml =
        "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec: {template: 3}\n";
    assert_eq!(
        problems(yaml),
        ["in.yaml: StatefulSet/db: spec.template: must be an object, not integer"]
    );
    let yaml = "apiVersion: v1\nkind: Node\nmetadata: {labels: {a: b}}\n";
    assert_eq!(
        problems(yaml),
        ["in.yaml: Node/<unnamed>: metadata.name: required field is missing"]
    );
}

#[test]
fn karpenter_objects_are_held_to_the_validate_rules() {
    let yaml = POOL.replace(
        "requirements: []",
        "requirements: [{key: kubernetes.io/arch, operator: Has}]",
    );
    let found = problems(&yaml);
    assert!(
        found.iter().any(|p| p
            .starts_with("in.yaml: NodePool/default: spec.template.spec.requirements[0].operator")),
        "{found:?}"
    );
}

#[test]
fn every_invalid_object_is_reported() {
    let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: b}\nspec: {containers: []}\n";
    let found = problems(yaml);
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn a_later_duplicate_replaces_the_earlier_one_with_a_warning() {
    let yaml = format!("{POOL}---\n{POOL}");
    let inventory = read(&yaml).expect("valid");
    assert_eq!(inventory.node_pools.len(), 1);
    assert_eq!(inventory.warnings.len(), 1, "{:?}", inventory.warnings);
}

#[test]
fn a_given_claim_wins_over_the_one_a_stateful_set_would_create() {
    let yaml = "apiVersion: v1\nkind: PersistentVolumeClaim\nmetadata: {name: data-db-0}\nspec: {volumeName: pv-1}\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: c, image: x}]}\n  volumeClaimTemplates: [{metadata: {name: data}, spec: {resources: {requests: {storage: 1Gi}}}}]\n";
    let inventory = read(yaml).expect("valid");
    assert_eq!(inventory.claims.len(), 2);
    let given = &inventory.claims[0];
    assert_eq!(
        given.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
        Some("pv-1")
    );
    assert_eq!(
        inventory.claims[1].metadata.name.as_deref(),
        Some("data-db-1")
    );
}

#[test]
fn running_replicas_from_a_cluster_dump_are_not_planned_again() {
    let yaml = "apiVersion: v1
kind: List
items:
  - apiVersion: apps/v1
    kind: Deployment
    metadata: {name: web, namespace: shop}
    spec:
      replicas: 3
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: c, image: x}]}
  - apiVersion: apps/v1
    kind: ReplicaSet
    metadata:
      name: web-5d8f
      namespace: shop
      ownerReferences: [{apiVersion: apps/v1, kind: Deployment, name: web, uid: d1, controller: true}]
    spec:
      replicas: 3
      selector: {matchLabels: {app: web}}
      template:
        metadata: {labels: {app: web}}
        spec: {containers: [{name: c, image: x}]}
  - apiVersion: v1
    kind: Pod
    metadata:
      name: web-5d8f-abcde
      namespace: shop
      labels: {app: web}
      ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8f, uid: r1, controller: true}]
    spec: {nodeName: n1, containers: [{name: c, image: x}]}
  - apiVersion: v1
    kind: Pod
    metadata:
      name: web-5d8f-fghij
      namespace: shop
      labels: {app: web}
      ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web-5d8f, uid: r1, controller: true}]
    spec: {containers: [{name: c, image: x}]}
";
    let inventory = read(yaml).expect("valid");
    let names: Vec<_> = inventory
        .pods
        .iter()
        .map(|p| p.meta().name.expect("named").to_owned())
        .collect();
    assert_eq!(
        names,
        ["web-5d8f-abcde", "web-5d8f-fghij", "web-0"],
        "one replica is missing"
    );
    let specs: Vec<_> = inventory
        .pods
        .iter()
        .map(|p| p.shared_spec().expect("a spec"))
        .collect();
    assert!(
        specs.iter().all(|s| Arc::ptr_eq(s, specs[0])),
        "replicas, bound, pending or made from the template, share one spec"
    );
    assert_eq!(inventory.pods[0].node_name(), Some("n1"));
}

#[test]
fn pods_keep_only_what_a_plan_reads() {
    let spec = "{containers: [{name: c, image: x, imagePullPolicy: Always, command: [serve],
        env: [{name: LOG, value: info}], livenessProbe: {httpGet: {port: 80}},
        volumeMounts: [{name: config, mountPath: /etc/app}],
        resources: {requests: {cpu: 100m}}, ports: [{containerPort: 80, hostPort: 80}]}], volumes: [
        {name: token, projected: {sources: []}}, {name: config, configMap: {name: app}},
        {name: scratch, emptyDir: {}}, {name: data, persistentVolumeClaim: {claimName: data}},
        {name: cache, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce],
            resources: {requests: {storage: 1Gi}}}}}},
        {name: old, awsElasticBlockStore: {volumeID: vol-1}}]}";
    let yaml = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: given}}\nspec: {spec}\n---
apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}
spec: {{replicas: 1, template: {{metadata: {{labels: {{app: web}}}}, spec: {spec}}}}}\n---
apiVersion: v1\nkind: Pod\nmetadata: {{name: plain}}
spec: {{containers: [{{name: c, image: x}}], volumes: [{{name: token, projected: {{sources: []}}}}]}}\n"
    );
    let inventory = read(&yaml).expect("valid");
    let volume_names = |pod: &LeanPod| -> Option<Vec<String>> {
        let volumes = pod.spec()?.volumes.as_ref()?;
        Some(volumes.iter().map(|v| v.name.clone()).collect())
    };
    let kept = Some(vec!["data".to_string(), "cache".into(), "old".into()]);
    assert_eq!(inventory.pods.len(), 3);
    for pod in &inventory.pods {
        let expected = if pod.meta().name == Some("plain") {
            None
        } else {
            kept.clone()
        };
        assert_eq!(volume_names(pod), expected, "{:?}", pod.meta().name);
        let container = &pod.spec().expect("spec").containers[0];
        assert_eq!(container.name, "c");
        assert_eq!(
            (&container.image, &container.image_pull_policy),
            (&None, &None)
        );
        assert_eq!(container.command, None, "what it runs goes");
        assert_eq!(container.env, None);
        assert_eq!(container.liveness_probe, None);
        assert_eq!(container.volume_mounts, None);
    }
    let web = inventory
        .pods
        .iter()
        .find(|p| p.meta().name == Some("web-0"))
        .and_then(|p| p.spec())
        .map(|spec| &spec.containers[0])
        .expect("the Deployment's pod");
    let requests = web.resources.as_ref().and_then(|r| r.requests.as_ref());
    assert_eq!(requests.map(|r| r["cpu"].0.as_str()), Some("100m"));
    let ports = web.ports.as_ref().expect("ports");
    assert_eq!(ports[0].host_port, Some(80));
}
