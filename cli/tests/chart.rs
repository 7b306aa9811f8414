//! kerf's Helm chart (deploy/chart) through Helm v4's own engine (the PyPI package
//! helm-python-sdk, driven by scripts/helm-chart.py; scripts/test.sh installs it): it lints
//! clean, renders with defaults and with the upstream-style override files in
//! deploy/chart/ci, every rendered object is one the API accepts with strict field
//! validation, and `kerf controller` starts with the rendered Deployment's environment.
//! Its values keep every key and default of upstream Karpenter's values.yaml, and its
//! README says what kerf does with each.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Service, ServiceAccount};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kerf_loadtest::apiserver::{ApiServer, ServerConfig};
use serde_json::{Value, json};

mod aws_support;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn chart_dir() -> PathBuf {
    repo().join("deploy/chart")
}

/// The override files, as `helm install -f` would take them.
fn override_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("ci"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    files
}

/// One `helm lint` + `helm template` run.
struct Rendered {
    lint: Value,
    objects: Vec<Value>,
}

const RELEASE: &str = "karpenter";
const NAMESPACE: &str = "kube-system";

fn render(values: Option<&Path>, set: Value) -> Rendered {
    render_in(NAMESPACE, values, set)
}

fn render_in(namespace: &str, values: Option<&Path>, set: Value) -> Rendered {
    let mut cmd = Command::new("python3");
    cmd.arg(repo().join("scripts/helm-chart.py"))
        .arg("--chart")
        .arg(chart_dir())
        .args(["--release", RELEASE, "--namespace", namespace])
        .args(["--api-versions", "monitoring.coreos.com/v1"])
        .arg("--set-json")
        .arg(set.to_string());
    if let Some(file) = values {
        cmd.arg("-f").arg(file);
    }
    let out = cmd.output().expect("python3 runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("No module named 'helm_python'"),
        "the chart tests need helm-python-sdk: python3 -m pip install helm-python-sdk"
    );
    assert!(out.status.success(), "helm-chart.py failed: {stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut objects = Vec::new();
    for (template, text) in result["manifests"].as_object().unwrap() {
        if !template.ends_with(".yaml") {
            continue;
        }
        let docs: Vec<Value> = serde_saphyr::from_multiple(text.as_str().unwrap())
            .unwrap_or_else(|e| panic!("{template}: {e}"));
        objects.extend(docs.into_iter().filter(|d| !d.is_null()));
    }
    Rendered {
        lint: result["lint"].clone(),
        objects,
    }
}

/// Defaults (plus the one required value, as upstream's chart requires it) and each
/// override file.
fn every_render() -> Vec<(String, Rendered)> {
    let mut all = vec![(
        "defaults".to_owned(),
        render(None, json!({"settings": {"clusterName": "demo"}})),
    )];
    for file in override_files() {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        all.push((name, render(Some(&file), json!({}))));
    }
    all
}

fn of_kind<'a>(objects: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objects.iter().filter(|o| o["kind"] == kind).collect()
}

#[test]
fn chart_lints_clean_and_renders_every_object_for_defaults_and_overrides() {
    for (case, rendered) in every_render() {
        let problems: Vec<&Value> = rendered.lint["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["severity"].as_i64().unwrap() >= 2)
            .collect();
        assert!(problems.is_empty(), "{case}: {problems:#?}");
        assert_eq!(rendered.lint["errors"], json!([]), "{case}");
        let kinds: BTreeSet<&str> = rendered
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        for kind in [
            "Deployment",
            "PodDisruptionBudget",
            "Service",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ] {
            assert!(kinds.contains(kind), "{case}: no {kind} in {kinds:?}");
        }
        let deployment = of_kind(&rendered.objects, "Deployment")[0];
        let pod = &deployment["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        assert_eq!(container["securityContext"]["runAsUser"], 65532, "{case}");
        assert_eq!(container["securityContext"]["runAsNonRoot"], true, "{case}");
        assert_eq!(
            container["readinessProbe"]["httpGet"]["port"], "http",
            "{case}"
        );
        assert_eq!(
            pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                [0]["matchExpressions"][0],
            json!({"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}),
            "{case}: kerf must stay off the nodes it manages"
        );
    }
}

#[test]
fn defaults_render_as_upstreams_chart_does() {
    let rendered = render(None, json!({"settings": {"clusterName": "demo"}}));
    let deployment = of_kind(&rendered.objects, "Deployment")[0];
    assert_eq!(deployment["metadata"]["name"], "karpenter");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["priorityClassName"], "system-cluster-critical");
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["serviceAccountName"], "karpenter");
    let selector = json!({"matchLabels": {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}});
    assert_eq!(
        pod["topologySpreadConstraints"][0]["labelSelector"],
        selector
    );
    assert_eq!(
        pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0]["labelSelector"],
        selector
    );
    let pdb = of_kind(&rendered.objects, "PodDisruptionBudget")[0];
    assert_eq!(pdb["spec"]["maxUnavailable"], 1);
    let env = env_of(deployment);
    assert_eq!(env_value(&env, "CLUSTER_NAME"), Some("demo"));
    assert_eq!(
        env_value(&env, "FEATURE_GATES"),
        Some(
            "ReservedCapacity=true,SpotToSpotConsolidation=false,NodeRepair=false,NodeOverlay=false,StaticCapacity=false,CapacityBuffer=false"
        )
    );
    // false settings are left out, as upstream's chart leaves them out.
    assert_eq!(env_value(&env, "ISOLATED_VPC"), None);
    assert!(of_kind(&rendered.objects, "ServiceMonitor").is_empty());
    assert!(of_kind(&rendered.objects, "ServiceAccount")[0]["metadata"]["annotations"].is_null());
}

#[test]
fn overrides_reach_the_objects_they_configure() {
    let files = override_files();
    let irsa = render(Some(&files[1]), json!({}));
    let sa = of_kind(&irsa.objects, "ServiceAccount")[0];
    assert_eq!(
        sa["metadata"]["annotations"]["eks.amazonaws.com/role-arn"],
        "arn:aws:iam::111122223333:role/KarpenterControllerRole-demo"
    );
    let env = env_of(of_kind(&irsa.objects, "Deployment")[0]);
    assert_eq!(env_value(&env, "INTERRUPTION_QUEUE"), Some("demo"));
    assert_eq!(env_value(&env, "BATCH_MAX_DURATION"), Some("20s"));
    let cpu = env.iter().find(|e| e["name"] == "CPU_REQUESTS").unwrap();
    assert_eq!(
        cpu["valueFrom"]["resourceFieldRef"]["resource"],
        "requests.cpu"
    );

    let monitoring = render(Some(&files[2]), json!({}));
    let monitor = of_kind(&monitoring.objects, "ServiceMonitor")[0];
    assert_eq!(
        monitor["metadata"]["labels"]["release"],
        "kube-prometheus-stack"
    );
    assert_eq!(monitor["spec"]["sampleLimit"], 100000);
    assert_eq!(monitor["spec"]["endpoints"][0]["interval"], "15s");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    let service = of_kind(&monitoring.objects, "Service")[0];
    assert_eq!(
        service["metadata"]["annotations"]["prometheus.io/scrape"],
        "true"
    );
    assert_eq!(service["metadata"]["annotations"]["owner"], "platform");

    let custom = render(Some(&files[0]), json!({}));
    assert!(of_kind(&custom.objects, "ServiceAccount").is_empty());
    let deployment = of_kind(&custom.objects, "Deployment")[0];
    assert_eq!(deployment["metadata"]["name"], "kerf");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "Default");
    assert_eq!(pod["serviceAccountName"], "karpenter-sa");
    assert_eq!(pod["containers"][1]["name"], "log-shipper");
    assert_eq!(
        pod["containers"][1]["volumeMounts"][0]["name"],
        "aws-iam-token"
    );
    assert!(
        pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
            ["podAffinityTerm"]["labelSelector"]
            .is_object()
    );
    let env = env_of(deployment);
    assert_eq!(env_value(&env, "CLUSTER_NAME"), Some("karpenter-cluster"));
    assert_eq!(env_value(&env, "ISOLATED_VPC"), Some("true"));
    for binding in of_kind(&custom.objects, "ClusterRoleBinding") {
        assert_eq!(binding["subjects"][0]["name"], "karpenter-sa");
    }
}

fn env_of(deployment: &Value) -> Vec<Value> {
    deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone()
}

fn env_value<'a>(env: &'a [Value], name: &str) -> Option<&'a str> {
    env.iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str())
}

/// Fields of `original` the typed Kubernetes object does not know: deserialised into the
/// API's own type and serialised again, whatever is lost was never a field of the kind.
fn unknown_fields<K: serde::de::DeserializeOwned + serde::Serialize>(
    original: &Value,
) -> Vec<String> {
    let typed: K = serde_json::from_value(original.clone())
        .unwrap_or_else(|e| panic!("{}: {e}", original["metadata"]["name"]));
    let back = serde_json::to_value(typed).unwrap();
    let mut lost = Vec::new();
    missing_paths(original, &back, String::new(), &mut lost);
    lost
}

fn missing_paths(original: &Value, back: &Value, path: String, lost: &mut Vec<String>) {
    match (original, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (key, value) in a {
                let p = format!("{path}.{key}");
                match b.get(key) {
                    Some(other) => missing_paths(value, other, p, lost),
                    None => lost.push(p),
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                missing_paths(x, y, format!("{path}[{i}]"), lost);
            }
        }
        _ => {}
    }
}

fn strict_check(object: &Value) -> Vec<String> {
    match object["kind"].as_str().unwrap() {
        "Deployment" => unknown_fields::<Deployment>(object),
        "Service" => unknown_fields::<Service>(object),
        "ServiceAccount" => unknown_fields::<ServiceAccount>(object),
        "PodDisruptionBudget" => unknown_fields::<PodDisruptionBudget>(object),
        "ClusterRole" => unknown_fields::<ClusterRole>(object),
        "ClusterRoleBinding" => unknown_fields::<ClusterRoleBinding>(object),
        "Role" => unknown_fields::<Role>(object),
        "RoleBinding" => unknown_fields::<RoleBinding>(object),
        // The Prometheus Operator's kind: not in the API types; its fields are checked by
        // `overrides_reach_the_objects_they_configure`.
        "ServiceMonitor" => Vec::new(),
        other => panic!("the chart renders an unexpected kind {other}"),
    }
}

fn plural(kind: &str) -> String {
    match kind {
        "PodDisruptionBudget" => "poddisruptionbudgets".to_owned(),
        other => format!("{}s", other.to_lowercase()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rendered_object_is_accepted_by_the_api_with_strict_fields() {
    for (case, rendered) in every_render() {
        let server = ApiServer::start(ServerConfig::default()).await.unwrap();
        let cluster = server.cluster();
        for crd in std::fs::read_dir(chart_dir().join("crds")).unwrap() {
            let yaml = std::fs::read_to_string(crd.unwrap().path()).unwrap();
            cluster.apply_crd_yaml(&yaml).unwrap();
        }
        for object in &rendered.objects {
            let kind = object["kind"].as_str().unwrap();
            let unknown = strict_check(object);
            assert!(
                unknown.is_empty(),
                "{case}: {kind} has unknown fields {unknown:?}"
            );
            if kind == "ServiceMonitor" {
                continue;
            }
            let api_version = object["apiVersion"].as_str().unwrap();
            let created = cluster
                .create(api_version, &plural(kind), object.clone())
                .unwrap_or_else(|e| panic!("{case}: {kind} rejected: {e}"));
            assert_eq!(created["metadata"]["name"], object["metadata"]["name"]);
        }
        server.shutdown().await;
    }
}

/// The controller's integration suite (`actors/tests/controller`) and `kerf simulate` run
/// under the RBAC the chart renders, enforced by the API emulator; their copy of that
/// rendering (`deploy/chart-rbac.json`) must be today's.
#[test]
fn the_controller_suite_runs_under_the_charts_current_rbac() {
    let rendered = render_in(
        "karpenter",
        None,
        json!({"settings": {"clusterName": "test"}}),
    );
    let key = |o: &Value| {
        (
            o["kind"].as_str().unwrap_or("").to_owned(),
            o["metadata"]["namespace"].as_str().unwrap_or("").to_owned(),
            o["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        )
    };
    let mut current: Vec<Value> = rendered
        .objects
        .into_iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
            )
        })
        .collect();
    current.sort_by_key(key);
    let fixture = repo().join("deploy/chart-rbac.json");
    let mut tested: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&fixture).unwrap()).unwrap();
    tested.sort_by_key(key);
    assert!(
        current == tested,
        "{} is not the chart's RBAC any more; write this there (release karpenter, namespace karpenter):\n{}",
        fixture.display(),
        serde_json::to_string_pretty(&current).unwrap()
    );
}

#[test]
fn chart_crds_are_the_installed_crds() {
    let ours = repo().join("deploy/crds");
    for entry in std::fs::read_dir(&ours).unwrap() {
        let path = entry.unwrap().path();
        let in_chart = chart_dir().join("crds").join(path.file_name().unwrap());
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(&in_chart).unwrap_or_default(),
            "{} differs from {}",
            in_chart.display(),
            path.display()
        );
    }
}

/// Every leaf key path of a values document (`settings.featureGates.nodeRepair`), with
/// its value.
fn leaves(value: &Value, path: &str, out: &mut Vec<(String, Value)>) {
    match value.as_object() {
        Some(map) if !map.is_empty() => {
            for (key, sub) in map {
                let p = if path.is_empty() {
                    key.clone()
                } else {
                    format!("{path}.{key}")
                };
                leaves(sub, &p, out);
            }
        }
        _ => out.push((path.to_owned(), value.clone())),
    }
}

fn values_leaves(path: &Path) -> Vec<(String, Value)> {
    let doc: Value = serde_saphyr::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut out = Vec::new();
    leaves(&doc, "", &mut out);
    out
}

/// Upstream values whose default kerf sets on purpose, each said in the chart README:
/// `controller.resources` requests what the sizing table measured, where upstream leaves it
/// empty.
const DIVERGED_DEFAULTS: [&str; 1] = ["controller.resources"];

#[test]
fn values_keep_every_upstream_key_and_default_and_the_readme_covers_each() {
    let upstream = values_leaves(&repo().join("tests/fixtures/upstream/helm-values.yaml"));
    let diverged = |key: &str| {
        DIVERGED_DEFAULTS
            .iter()
            .any(|d| key == *d || key.starts_with(&format!("{d}.")))
    };
    let mut ours: std::collections::BTreeMap<String, Value> =
        values_leaves(&chart_dir().join("values.yaml"))
            .into_iter()
            .collect();
    ours.retain(|key, _| !diverged(key));
    let readme = std::fs::read_to_string(chart_dir().join("README.md")).unwrap();
    assert!(upstream.len() > 60, "{}", upstream.len());
    for (key, default) in &upstream {
        if diverged(key) {
            assert!(
                readme.contains(&format!("`{key}` | as upstream, but")),
                "the chart README does not say how kerf's `{key}` default differs"
            );
            continue;
        }
        let Some(mine) = ours.get(key) else {
            panic!("values.yaml lacks upstream's key {key}");
        };
        if !key.starts_with("controller.image.") {
            assert_eq!(mine, default, "{key}: default differs from upstream's");
        }
        assert!(
            readme.contains(&format!("`{key}`")),
            "the chart README does not say what kerf does with `{key}`"
        );
    }
    assert_eq!(
        ours.len(),
        upstream.iter().filter(|(key, _)| !diverged(key)).count(),
        "values.yaml has keys upstream's lacks"
    );
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The value the kubelet would give an env entry: literal values as they are, the
/// downward API's namespace and resource fields resolved for this pod.
fn resolve_env(entry: &Value, container: &Value) -> Option<String> {
    if let Some(value) = entry["value"].as_str() {
        return Some(value.to_owned());
    }
    let from = &entry["valueFrom"];
    if from["fieldRef"]["fieldPath"] == "metadata.namespace" {
        return Some(NAMESPACE.to_owned());
    }
    let resource = from["resourceFieldRef"]["resource"].as_str()?;
    let (section, name) = resource.split_once('.')?;
    // Unset: the kubelet gives the node's allocatable; any number stands for it here.
    let quantity = container["resources"][section][name]
        .as_str()
        .unwrap_or("1");
    Some(quantity.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kerf_controller_starts_with_the_rendered_deployment_environment() {
    let files = override_files();
    for values in [None, Some(files[0].as_path())] {
        let (metrics, health) = (free_port(), free_port());
        let ports =
            json!({"controller": {"metrics": {"port": metrics}, "healthProbe": {"port": health}}});
        let set = match values {
            None => json!({"settings": {"clusterName": "demo"}, "controller": ports["controller"]}),
            Some(_) => ports,
        };
        let rendered = render(values, set);
        let container = &of_kind(&rendered.objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"]
            [0];
        run_controller_with(container, metrics).await;
    }
}

/// Runs `kerf controller` with exactly the container's environment (plus where the API
/// and AWS are) and waits until it has synced and leads; a setting it refused would have
/// stopped it at start-up.
async fn run_controller_with(container: &Value, metrics_port: u16) {
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let cluster = server.cluster();
    for crd in std::fs::read_dir(chart_dir().join("crds")).unwrap() {
        cluster
            .apply_crd_yaml(&std::fs::read_to_string(crd.unwrap().path()).unwrap())
            .unwrap();
    }
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-chart-{}-{metrics_port}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kerf"));
    cmd.env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("PATH", std::env::var_os("PATH").unwrap_or_default());
    aws_support::aws_env(&mut cmd, aws_support::moto().endpoint());
    for entry in container["env"].as_array().unwrap() {
        let value = resolve_env(entry, container).unwrap();
        cmd.env(entry["name"].as_str().unwrap(), value);
    }
    let mut child = cmd
        .arg("controller")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines_tx.send(line).is_err() {
                break;
            }
        }
    });
    let (mut synced, mut leading) = (false, false);
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while !(synced && leading) {
            let Some(line) = lines.recv().await else {
                break;
            };
            match serde_json::from_str::<Value>(&line)
                .ok()
                .and_then(|e| e["message"].as_str().map(str::to_owned))
                .as_deref()
            {
                Some("cluster state synced") => synced = true,
                Some("acquired leader lease") => leading = true,
                _ => {}
            }
        }
    })
    .await;
    let metrics = reqwest_metrics(metrics_port);
    let _ = child.kill();
    let output = child.wait_with_output().unwrap();
    assert!(
        waited.is_ok() && synced && leading,
        "controller did not sync and lead with the chart's env (synced {synced}, leading {leading}): {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        metrics.contains("# TYPE"),
        "no metrics on the chart's metrics port: {metrics}"
    );
    server.shutdown().await;
}

/// GET /metrics on the port the chart told the controller to use.
fn reqwest_metrics(port: u16) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ =
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n");
    let mut body = String::new();
    let _ = stream.read_to_string(&mut body);
    body
}
