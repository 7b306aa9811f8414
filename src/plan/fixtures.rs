//! Realistic cluster dumps for tests and benchmarks: what `kubectl get
//! nodepools,ec2nodeclasses,nodes,nodeclaims,deploy,sts,ds,pods -A -o yaml` (or `-o json`)
//! prints for a cluster of a given size. Objects carry what real ones do and kerf must skip
//! — `managedFields`, owner references, status with conditions and container statuses,
//! default tolerations, projected service-account volumes, environment variables, probes,
//! node image lists — since a reader tested on hand-trimmed manifests says nothing about
//! real dumps. Pods belong to Deployments (zone spread, `ScheduleAnyway`: kerf's solver
//! today counts every catalog zone as a spread domain, not only the NodePool's, so a
//! `DoNotSchedule` spread over a zone-pinned pool leaves pods unplaced; some apps add
//! hostname anti-affinity) and
//! StatefulSets; DaemonSets run on every existing node; a share of the pods already runs on
//! existing Karpenter nodes, each with its NodeClaim, and the rest are pending.
//!
//! Generation is deterministic (names and UIDs derive from indices) and lazy: [`objects`]
//! yields one object at a time, so a 100,000-pod dump is written without being held.

use std::io::{self, Write};

use serde_json::{Value, json};

/// The cluster a dump describes.
#[derive(Clone, Copy, Debug)]
pub struct DumpShape {
    /// Application pods (Deployment and StatefulSet replicas), running and pending.
    pub pods: usize,
    /// Share of `pods` already running on existing nodes, in percent.
    pub running_percent: usize,
}

impl DumpShape {
    pub fn pending(pods: usize) -> Self {
        Self {
            pods,
            running_percent: 10,
        }
    }
}

/// Replicas per Deployment; one app in ten is a StatefulSet of [`STATEFUL_REPLICAS`].
const DEPLOYMENT_REPLICAS: usize = 50;
const STATEFUL_REPLICAS: usize = 10;
/// Running pods per existing node (m5.4xlarge: 16 vCPU; pods request 250m–500m).
const PODS_PER_NODE: usize = 30;
const NAMESPACES: usize = 8;
const ZONES: [&str; 3] = ["us-east-1a", "us-east-1b", "us-east-1c"];
const DAEMON_SETS: [&str; 3] = ["aws-node", "kube-proxy", "node-exporter"];
const TIMESTAMP: &str = "2026-11-20T08:15:42Z";

/// Output formats of `kubectl get -o`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpFormat {
    /// `-o json`: one `kind: List`.
    Json,
    /// `-o yaml`: one `kind: List`.
    Yaml,
    /// A multi-document YAML stream, one object per document.
    YamlStream,
}

/// One application: a Deployment or a StatefulSet and how many replicas it has.
struct App {
    index: usize,
    /// Position of its first pod among all application pods.
    first: usize,
    stateful: bool,
    replicas: usize,
}

impl App {
    fn name(&self) -> String {
        if self.stateful {
            format!("db-{}", self.index)
        } else {
            format!("web-{}", self.index)
        }
    }

    fn namespace(&self) -> String {
        format!("team-{}", self.index % NAMESPACES)
    }
}

fn apps(pods: usize) -> Vec<App> {
    let mut apps = Vec::new();
    let mut left = pods;
    while left > 0 {
        let index = apps.len();
        let stateful = index % 10 == 9;
        let size = if stateful {
            STATEFUL_REPLICAS
        } else {
            DEPLOYMENT_REPLICAS
        };
        let replicas = size.min(left);
        apps.push(App {
            index,
            first: pods - left,
            stateful,
            replicas,
        });
        left -= replicas;
    }
    apps
}

/// Every object of the dump, in `kubectl get` order of kinds.
pub fn objects(shape: DumpShape) -> impl Iterator<Item = Value> {
    let running = shape.pods * shape.running_percent.min(100) / 100;
    let nodes = running.div_ceil(PODS_PER_NODE);
    let apps = apps(shape.pods);
    let karpenter = [node_pool(), node_class()].into_iter();
    let node_objects = (0..nodes).flat_map(|n| [node(n), node_claim(n)]);
    let workloads: Vec<Value> = apps
        .iter()
        .map(workload)
        .chain(DAEMON_SETS.iter().map(|name| daemon_set(name, nodes)))
        .collect();
    let daemon_pods = (0..nodes).flat_map(|n| DAEMON_SETS.iter().map(move |d| daemon_pod(d, n)));
    let app_pods = apps.into_iter().flat_map(move |app| {
        (0..app.replicas).map(move |replica| {
            let ordinal = app.first + replica;
            let node = (ordinal < running).then_some(ordinal / PODS_PER_NODE);
            app_pod(&app, replica, node)
        })
    });
    karpenter
        .chain(node_objects)
        .chain(workloads)
        .chain(daemon_pods)
        .chain(app_pods)
}

/// Writes `objects` as `format`.
pub fn write(
    objects: impl Iterator<Item = Value>,
    format: DumpFormat,
    out: &mut dyn Write,
) -> io::Result<()> {
    match format {
        DumpFormat::Json => write_json_list(objects, out),
        DumpFormat::Yaml => write_yaml(objects, out, true),
        DumpFormat::YamlStream => write_yaml(objects, out, false),
    }
}

fn write_json_list(objects: impl Iterator<Item = Value>, out: &mut dyn Write) -> io::Result<()> {
    out.write_all(b"{\n    \"apiVersion\": \"v1\",\n    \"items\": [\n")?;
    for (index, object) in objects.enumerate() {
        if index > 0 {
            out.write_all(b",\n")?;
        }
        serde_json::to_writer_pretty(&mut *out, &object)?;
    }
    out.write_all(
        b"\n    ],\n    \"kind\": \"List\",\n    \"metadata\": {\n        \"resourceVersion\": \"\"\n    }\n}\n",
    )
}

fn write_yaml(
    objects: impl Iterator<Item = Value>,
    out: &mut dyn Write,
    as_list: bool,
) -> io::Result<()> {
    if as_list {
        out.write_all(b"apiVersion: v1\nitems:\n")?;
    }
    for object in objects {
        let text = serde_saphyr::to_string(&object).map_err(io::Error::other)?;
        if as_list {
            for (index, line) in text.lines().enumerate() {
                let prefix: &[u8] = if index == 0 { b"- " } else { b"  " };
                out.write_all(prefix)?;
                out.write_all(line.as_bytes())?;
                out.write_all(b"\n")?;
            }
        } else {
            out.write_all(b"---\n")?;
            out.write_all(text.as_bytes())?;
        }
    }
    if as_list {
        out.write_all(b"kind: List\nmetadata:\n  resourceVersion: \"\"\n")?;
    }
    Ok(())
}

fn uid(kind: &str, index: usize) -> String {
    let hash = (index as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(kind.len() as u64);
    format!(
        "{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        hash >> 32,
        (hash >> 16) & 0xffff,
        hash & 0xfff,
        (hash >> 20) & 0xfff,
        hash & 0xffff_ffff_ffff
    )
}

fn managed_fields(manager: &str, fields: Value, status: Option<Value>) -> Value {
    let mut entries = vec![json!({
        "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": fields,
        "manager": manager, "operation": "Update", "time": TIMESTAMP})];
    if let Some(status) = status {
        entries.push(json!({
            "apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": status,
            "manager": "kubelet", "operation": "Update", "subresource": "status", "time": TIMESTAMP}));
    }
    Value::Array(entries)
}

fn node_pool() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "generation": 1, "uid": uid("NodePool", 0),
            "annotations": {"karpenter.sh/nodepool-hash": "6821555240594823858",
                "karpenter.sh/nodepool-hash-version": "v3"},
            "managedFields": managed_fields("kubectl-client-side-apply",
                json!({"f:spec": {".": {}, "f:disruption": {}, "f:template": {}}}), None)},
        "spec": {
            "disruption": {"budgets": [{"nodes": "10%"}], "consolidateAfter": "0s",
                "consolidationPolicy": "WhenEmptyOrUnderutilized"},
            "template": {"spec": {
                "expireAfter": "720h",
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.k8s.aws/instance-category", "operator": "In", "values": ["c", "m", "r"]},
                    {"key": "karpenter.k8s.aws/instance-generation", "operator": "Gt", "values": ["4"]},
                    {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ZONES}]}}},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "", "lastTransitionTime": TIMESTAMP, "observedGeneration": 1}],
            "resources": {"cpu": "0", "memory": "0", "nodes": "0", "pods": "0"}}
    })
}

fn node_class() -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "generation": 1, "uid": uid("EC2NodeClass", 0),
            "finalizers": ["karpenter.k8s.aws/termination"],
            "managedFields": managed_fields("kubectl-client-side-apply",
                json!({"f:spec": {".": {}, "f:role": {}}}), None)},
        "spec": {
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "metadataOptions": {"httpEndpoint": "enabled", "httpProtocolIPv6": "disabled",
                "httpPutResponseHopLimit": 1, "httpTokens": "required"},
            "role": "KarpenterNodeRole-my-cluster",
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "my-cluster"}}]},
        "status": {"amis": [{"id": "ami-0123456789abcdef0", "name": "amazon-eks-node-al2023-x86_64-standard-1.33",
            "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}],
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                "lastTransitionTime": TIMESTAMP, "observedGeneration": 1}],
            "instanceProfile": "my-cluster_123456789"}
    })
}

fn node_name(index: usize) -> String {
    format!("ip-10-0-{}-{}.ec2.internal", index / 250, index % 250 + 1)
}

fn node(index: usize) -> Value {
    let zone = ZONES[index % ZONES.len()];
    let images: Vec<Value> = (0..20)
        .map(|i| json!({"names": [format!("public.ecr.aws/app/image-{i}@sha256:{:064x}", i * 7919 + index),
            format!("public.ecr.aws/app/image-{i}:v1.{i}.0")], "sizeBytes": 10_000_000 + i * 1_000_003}))
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": node_name(index), "uid": uid("Node", index), "resourceVersion": (1000 + index).to_string(),
            "creationTimestamp": TIMESTAMP,
            "annotations": {"alpha.kubernetes.io/provided-node-ip": "10.0.0.1",
                "karpenter.k8s.aws/ec2nodeclass-hash": "15535182697325354914",
                "karpenter.sh/nodepool-hash": "6821555240594823858",
                "node.alpha.kubernetes.io/ttl": "0", "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            "labels": {"beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "m5.4xlarge",
                "beta.kubernetes.io/os": "linux", "karpenter.k8s.aws/instance-category": "m",
                "karpenter.k8s.aws/instance-cpu": "16", "karpenter.k8s.aws/instance-family": "m5",
                "karpenter.k8s.aws/instance-generation": "5", "karpenter.k8s.aws/instance-size": "4xlarge",
                "karpenter.sh/capacity-type": "on-demand", "karpenter.sh/initialized": "true",
                "karpenter.sh/nodepool": "default", "karpenter.sh/registered": "true",
                "kubernetes.io/arch": "amd64", "kubernetes.io/hostname": node_name(index),
                "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m5.4xlarge",
                "topology.kubernetes.io/region": "us-east-1", "topology.kubernetes.io/zone": zone},
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "blockOwnerDeletion": true,
                "kind": "NodeClaim", "name": format!("default-{index:05}"), "uid": uid("NodeClaim", index)}],
            "managedFields": managed_fields("karpenter", json!({"f:metadata": {"f:labels": {
                "f:karpenter.sh/initialized": {}, "f:karpenter.sh/registered": {}}}}),
                Some(json!({"f:status": {"f:conditions": {"k:{\"type\":\"Ready\"}": {"f:lastHeartbeatTime": {}}},
                    "f:images": {}}})))},
        "spec": {"providerID": format!("aws:///{zone}/i-{:017x}", index + 1)},
        "status": {
            "addresses": [{"address": "10.0.0.1", "type": "InternalIP"},
                {"address": node_name(index), "type": "Hostname"}],
            "allocatable": {"cpu": "15890m", "ephemeral-storage": "95551679124", "memory": "57343120Ki", "pods": "234"},
            "capacity": {"cpu": "16", "ephemeral-storage": "104845292Ki", "memory": "64333328Ki", "pods": "234"},
            "conditions": (["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"].iter().map(|t| json!({
                "type": t, "status": if *t == "Ready" { "True" } else { "False" },
                "lastHeartbeatTime": TIMESTAMP, "lastTransitionTime": TIMESTAMP,
                "reason": format!("Kubelet{t}"), "message": "kubelet is posting ready status"})).collect::<Vec<_>>()),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": uid("boot", index), "containerRuntimeVersion": "containerd://1.7.27",
                "kernelVersion": "6.1.134-152.225.amzn2023.x86_64", "kubeProxyVersion": "v1.33.0-eks-802817d",
                "kubeletVersion": "v1.33.0-eks-802817d", "machineID": uid("machine", index),
                "operatingSystem": "linux", "osImage": "Amazon Linux 2023.7.20250527", "systemUUID": uid("system", index)}}
    })
}

fn node_claim(index: usize) -> Value {
    let zone = ZONES[index % ZONES.len()];
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": format!("default-{index:05}"), "uid": uid("NodeClaim", index), "generation": 1,
            "creationTimestamp": TIMESTAMP, "finalizers": ["karpenter.sh/termination"],
            "annotations": {"karpenter.k8s.aws/ec2nodeclass-hash": "15535182697325354914",
                "karpenter.sh/nodepool-hash": "6821555240594823858"},
            "labels": {"karpenter.sh/nodepool": "default", "karpenter.sh/capacity-type": "on-demand",
                "node.kubernetes.io/instance-type": "m5.4xlarge", "topology.kubernetes.io/zone": zone,
                "kubernetes.io/arch": "amd64"},
            "ownerReferences": [{"apiVersion": "karpenter.sh/v1", "blockOwnerDeletion": true,
                "kind": "NodePool", "name": "default", "uid": uid("NodePool", 0)}],
            "managedFields": managed_fields("karpenter", json!({"f:spec": {"f:requirements": {}}}), None)},
        "spec": {
            "expireAfter": "720h",
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["m5.4xlarge"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}],
            "resources": {"requests": {"cpu": "7500m", "memory": "15Gi", "pods": "33"}}},
        "status": {
            "allocatable": {"cpu": "15890m", "ephemeral-storage": "17Gi", "memory": "57343120Ki", "pods": "234"},
            "capacity": {"cpu": "16", "ephemeral-storage": "20Gi", "memory": "64333328Ki", "pods": "234"},
            "conditions": (["Launched", "Registered", "Initialized", "Ready"].iter().map(|t| json!({
                "type": t, "status": "True", "reason": t, "message": "",
                "lastTransitionTime": TIMESTAMP, "observedGeneration": 1})).collect::<Vec<_>>()),
            "imageID": "ami-0123456789abcdef0", "nodeName": node_name(index),
            "providerID": format!("aws:///{zone}/i-{:017x}", index + 1)}
    })
}

fn env() -> Value {
    json!([
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.observability:4317"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}}},
        {"name": "DATABASE_URL", "valueFrom": {"secretKeyRef": {"key": "url", "name": "db-credentials"}}}
    ])
}

fn probe(path: &str) -> Value {
    json!({"failureThreshold": 3, "httpGet": {"path": path, "port": 8080, "scheme": "HTTP"},
        "periodSeconds": 10, "successThreshold": 1, "timeoutSeconds": 1})
}

fn containers(app: &str, cpu: &str, memory: &str) -> Value {
    json!([
        {"name": app, "image": format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{app}:v2.14.3"),
            "imagePullPolicy": "IfNotPresent", "env": env(),
            "command": ["/app/server"], "args": ["--port=8080", "--metrics-port=9090"],
            "ports": [{"containerPort": 8080, "name": "http", "protocol": "TCP"},
                {"containerPort": 9090, "name": "metrics", "protocol": "TCP"}],
            "livenessProbe": probe("/healthz"), "readinessProbe": probe("/readyz"),
            "resources": {"limits": {"memory": memory}, "requests": {"cpu": cpu, "memory": memory}},
            "securityContext": {"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                "name": "kube-api-access", "readOnly": true}, {"mountPath": "/etc/app", "name": "config"}]},
        {"name": "log-shipper", "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32.2",
            "imagePullPolicy": "IfNotPresent",
            "env": [{"name": "AWS_REGION", "value": "us-east-1"}],
            "resources": {"limits": {"memory": "128Mi"}, "requests": {"cpu": "50m", "memory": "64Mi"}},
            "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
            "volumeMounts": [{"mountPath": "/var/log/app", "name": "logs"}]}
    ])
}

fn volumes() -> Value {
    json!([
        {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
            {"configMap": {"items": [{"key": "ca.crt", "path": "ca.crt"}], "name": "kube-root-ca.crt"}},
            {"downwardAPI": {"items": [{"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}, "path": "namespace"}]}}]}},
        {"name": "config", "configMap": {"defaultMode": 420, "name": "app-config"}},
        {"name": "logs", "emptyDir": {}}
    ])
}

fn default_tolerations() -> Value {
    json!([
        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
        {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300}
    ])
}

/// Request sizes vary by app so that bin-packing has work to do.
fn app_requests(app: &App) -> (&'static str, &'static str) {
    match app.index % 4 {
        0 => ("250m", "512Mi"),
        1 => ("500m", "1Gi"),
        2 => ("300m", "768Mi"),
        _ => ("400m", "2Gi"),
    }
}

fn pod_template(app: &App) -> Value {
    let name = app.name();
    let (cpu, memory) = app_requests(app);
    let mut spec = json!({
        "containers": containers(&name, cpu, memory),
        "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "schedulerName": "default-scheduler",
        "serviceAccountName": name, "terminationGracePeriodSeconds": 30,
        "securityContext": {"fsGroup": 1000},
        "topologySpreadConstraints": [{"labelSelector": {"matchLabels": {"app": name}},
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "ScheduleAnyway"}],
        "volumes": volumes()
    });
    if app.index % 5 == 1 {
        spec["affinity"] = json!({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": name}},
                "topologyKey": "kubernetes.io/hostname"}}]}});
    }
    json!({"metadata": {"labels": {"app": name, "team": app.namespace()},
        "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9090"}}, "spec": spec})
}

fn workload(app: &App) -> Value {
    let name = app.name();
    let kind = if app.stateful {
        "StatefulSet"
    } else {
        "Deployment"
    };
    let mut spec = json!({"replicas": app.replicas, "revisionHistoryLimit": 10,
        "selector": {"matchLabels": {"app": name}}, "template": pod_template(app)});
    if app.stateful {
        spec["serviceName"] = json!(name);
        spec["podManagementPolicy"] = json!("Parallel");
    } else {
        spec["strategy"] = json!({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}, "type": "RollingUpdate"});
    }
    json!({
        "apiVersion": "apps/v1", "kind": kind,
        "metadata": {"name": name, "namespace": app.namespace(), "uid": uid(kind, app.index), "generation": 3,
            "resourceVersion": (50_000 + app.index).to_string(), "creationTimestamp": TIMESTAMP,
            "annotations": {"deployment.kubernetes.io/revision": "3"},
            "labels": {"app": name},
            "managedFields": managed_fields("helm", json!({"f:spec": {"f:replicas": {}, "f:template": {
                "f:spec": {"f:containers": {format!("k:{{\"name\":\"{name}\"}}"): {"f:env": {}, "f:image": {}}}}}}}),
                Some(json!({"f:status": {"f:availableReplicas": {}, "f:conditions": {}}})))},
        "spec": spec,
        "status": {"availableReplicas": 0, "observedGeneration": 3, "replicas": app.replicas,
            "conditions": [{"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
                "lastTransitionTime": TIMESTAMP, "lastUpdateTime": TIMESTAMP,
                "message": "Deployment does not have minimum availability."}]}
    })
}

fn daemon_set(name: &str, nodes: usize) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": "kube-system", "uid": uid(name, 0), "generation": 1,
            "labels": {"k8s-app": name},
            "managedFields": managed_fields("eks", json!({"f:spec": {"f:template": {}}}), None)},
        "spec": {"selector": {"matchLabels": {"k8s-app": name}}, "template": {
            "metadata": {"labels": {"k8s-app": name}},
            "spec": {"containers": [{"name": name, "image": format!("602401143452.dkr.ecr.us-east-1.amazonaws.com/{name}:v1.19.0"),
                "env": env(), "resources": {"requests": {"cpu": "25m", "memory": "64Mi"}}}],
                "hostNetwork": true, "priorityClassName": "system-node-critical",
                "tolerations": [{"operator": "Exists"}]}},
            "updateStrategy": {"rollingUpdate": {"maxUnavailable": "10%"}, "type": "RollingUpdate"}},
        "status": {"currentNumberScheduled": nodes, "desiredNumberScheduled": nodes, "numberReady": nodes}
    })
}

fn daemon_pod(daemon_set: &str, node: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("{daemon_set}-{node:05}"), "namespace": "kube-system",
            "uid": uid(daemon_set, node + 1), "labels": {"k8s-app": daemon_set},
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true,
                "kind": "DaemonSet", "name": daemon_set, "uid": uid(daemon_set, 0)}],
            "managedFields": managed_fields("kube-controller-manager", json!({"f:spec": {}}), None)},
        "spec": {"nodeName": node_name(node), "containers": [{"name": daemon_set, "image": "x",
            "env": env(), "resources": {"requests": {"cpu": "25m", "memory": "64Mi"}}}],
            "priority": 2_000_001_000, "priorityClassName": "system-node-critical",
            "tolerations": [{"operator": "Exists"}]},
        "status": {"phase": "Running", "qosClass": "Burstable"}
    })
}

fn app_pod(app: &App, replica: usize, node: Option<usize>) -> Value {
    let name = app.name();
    let template = pod_template(app);
    let (pod_name, owner_kind, owner_name) = if app.stateful {
        (format!("{name}-{replica}"), "StatefulSet", name.clone())
    } else {
        let replica_set = format!("{name}-6c9f8d7b5");
        (
            format!("{replica_set}-{:05x}", replica * 7 + app.index),
            "ReplicaSet",
            replica_set,
        )
    };
    let ordinal = app.first + replica;
    let mut labels = template["metadata"]["labels"].clone();
    labels["pod-template-hash"] = json!("6c9f8d7b5");
    let mut spec = template["spec"].clone();
    spec["tolerations"] = default_tolerations();
    spec["priority"] = json!(0);
    spec["enableServiceLinks"] = json!(true);
    spec["preemptionPolicy"] = json!("PreemptLowerPriority");
    spec["serviceAccount"] = json!(name);
    let status = match node {
        Some(node) => {
            spec["nodeName"] = json!(node_name(node));
            running_status(&name)
        }
        None => pending_status(),
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": pod_name, "generateName": format!("{name}-"), "namespace": app.namespace(),
            "uid": uid("Pod", ordinal), "resourceVersion": (100_000 + ordinal).to_string(),
            "creationTimestamp": TIMESTAMP, "labels": labels,
            "annotations": template["metadata"]["annotations"].clone(),
            "ownerReferences": [{"apiVersion": "apps/v1", "blockOwnerDeletion": true, "controller": true,
                "kind": owner_kind, "name": owner_name, "uid": uid(owner_kind, app.index)}],
            "managedFields": managed_fields("kube-controller-manager", json!({
                "f:metadata": {"f:generateName": {}, "f:labels": {".": {}, "f:app": {}, "f:pod-template-hash": {}},
                    "f:ownerReferences": {".": {}, "k:{\"uid\":\"x\"}": {}}},
                "f:spec": {"f:containers": {format!("k:{{\"name\":\"{name}\"}}"): {
                    ".": {}, "f:env": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                    "f:ports": {}, "f:resources": {"f:limits": {}, "f:requests": {}}}},
                    "f:dnsPolicy": {}, "f:restartPolicy": {}, "f:schedulerName": {}, "f:volumes": {}}}),
                Some(json!({"f:status": {"f:conditions": {"k:{\"type\":\"PodScheduled\"}": {
                    ".": {}, "f:lastProbeTime": {}, "f:message": {}, "f:reason": {}, "f:status": {}, "f:type": {}}}}})))},
        "spec": spec,
        "status": status
    })
}

fn pending_status() -> Value {
    json!({"phase": "Pending", "qosClass": "Burstable", "conditions": [{"type": "PodScheduled",
        "status": "False", "reason": "Unschedulable", "lastProbeTime": null, "lastTransitionTime": TIMESTAMP,
        "message": "0/12 nodes are available: 12 Insufficient cpu. preemption: 0/12 nodes are available: 12 No preemption victims found for incoming pod."}]})
}

fn running_status(app: &str) -> Value {
    let container_status = |name: &str| {
        json!({"name": name, "ready": true, "restartCount": 0, "started": true,
        "containerID": format!("containerd://{:064x}", name.len() * 31337),
        "image": format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{name}:v2.14.3"),
        "imageID": format!("123456789012.dkr.ecr.us-east-1.amazonaws.com/{name}@sha256:{:064x}", name.len()),
        "lastState": {}, "state": {"running": {"startedAt": TIMESTAMP}},
        "volumeMounts": [{"mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "name": "kube-api-access", "readOnly": true, "recursiveReadOnly": "Disabled"}]})
    };
    json!({"phase": "Running", "qosClass": "Burstable", "hostIP": "10.0.0.1", "podIP": "10.0.1.2",
        "hostIPs": [{"ip": "10.0.0.1"}], "podIPs": [{"ip": "10.0.1.2"}], "startTime": TIMESTAMP,
        "conditions": (["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
            .iter().map(|t| json!({"type": t, "status": "True", "lastProbeTime": null,
                "lastTransitionTime": TIMESTAMP})).collect::<Vec<_>>()),
        "containerStatuses": [container_status(app), container_status("log-shipper")]})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_counts_pods_nodes_and_workloads() {
        let all: Vec<Value> = objects(DumpShape {
            pods: 1000,
            running_percent: 30,
        })
        .collect();
        let count = |kind: &str| all.iter().filter(|o| o["kind"] == kind).count();
        let nodes = 300usize.div_ceil(PODS_PER_NODE);
        assert_eq!(count("Node"), nodes);
        assert_eq!(count("NodeClaim"), nodes);
        assert_eq!(count("DaemonSet"), DAEMON_SETS.len());
        assert_eq!(count("Pod"), 1000 + nodes * DAEMON_SETS.len());
        let bound = all
            .iter()
            .filter(|o| o["kind"] == "Pod" && o["spec"]["nodeName"].is_string())
            .count();
        assert_eq!(bound, 300 + nodes * DAEMON_SETS.len());
        let stateful: usize = all
            .iter()
            .filter(|o| o["kind"] == "StatefulSet")
            .map(|o| o["spec"]["replicas"].as_u64().unwrap_or(0) as usize)
            .sum();
        let deployed: usize = all
            .iter()
            .filter(|o| o["kind"] == "Deployment")
            .map(|o| o["spec"]["replicas"].as_u64().unwrap_or(0) as usize)
            .sum();
        assert_eq!(stateful + deployed, 1000);
        assert!(
            all.iter()
                .all(|o| o["metadata"]["managedFields"].is_array())
        );
    }
}
