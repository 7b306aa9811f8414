//! The columns the real API server prints for built-in kinds (its `printers.go`), computed
//! from the object the same way, so `kubectl get` reads as it does against EKS: nodes'
//! STATUS (Ready / NotReady, `SchedulingDisabled` when cordoned) and ROLES, pods' READY
//! (`1/1`), STATUS (the container's waiting or terminated reason before the phase,
//! `Terminating` once deleted) and RESTARTS, deployments' READY / UP-TO-DATE / AVAILABLE,
//! events' LAST SEEN (`5s (x3 over 2m)`), TYPE, REASON, OBJECT (`pod/web-1`) and MESSAGE.
//! Columns of priority 1 appear with `-o wide`. A kind without a printer here gets NAME and
//! AGE.

use std::time::SystemTime;

use serde_json::{Value, json};

use super::{Column, Source, age, lookup};
use crate::apiserver::resources::ResourceType;

/// The columns for a built-in kind.
pub(crate) fn columns(rt: &ResourceType) -> Vec<Column> {
    match (rt.group.as_str(), rt.kind.as_str()) {
        ("", "Node") => node(),
        ("", "Pod") => pod(),
        ("apps", "Deployment") => deployment(),
        ("apps", "ReplicaSet") => replica_set(),
        ("", "Event") | ("events.k8s.io", "Event") => event(),
        ("", "Namespace") => vec![name(), text("Status", 0, ".status.phase"), age_column()],
        ("policy", "PodDisruptionBudget") => vec![
            name(),
            text("Min Available", 0, ".spec.minAvailable"),
            text("Max Unavailable", 0, ".spec.maxUnavailable"),
            text("Allowed Disruptions", 0, ".status.disruptionsAllowed"),
            age_column(),
        ],
        _ => vec![name(), age_column()],
    }
}

/// The object's name.
pub(crate) fn name() -> Column {
    Column {
        name: "Name".to_owned(),
        kind: "string".to_owned(),
        format: "name".to_owned(),
        priority: 0,
        source: Source::Path(".metadata.name".to_owned()),
    }
}

fn age_column() -> Column {
    Column {
        name: "Age".to_owned(),
        kind: "string".to_owned(),
        format: String::new(),
        priority: 0,
        source: Source::AgeAt(".metadata.creationTimestamp".to_owned()),
    }
}

/// The value at a printer-column path as text, `<none>` when absent.
fn text(name: &str, priority: u64, path: &str) -> Column {
    Column {
        name: name.to_owned(),
        kind: "string".to_owned(),
        format: String::new(),
        priority,
        source: Source::Path(path.to_owned()),
    }
}

fn str_at<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object
        .pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
}

fn or_none(text: &str) -> Value {
    if text.is_empty() {
        json!("<none>")
    } else {
        json!(text)
    }
}

fn node() -> Vec<Column> {
    vec![
        name(),
        Column::computed("Status", 0, |n, _| json!(node_status(n))),
        Column::computed("Roles", 0, |n, _| json!(node_roles(n))),
        age_column(),
        Column::computed("Version", 0, |n, _| {
            json!(str_at(n, "/status/nodeInfo/kubeletVersion"))
        }),
        Column::computed("Internal-IP", 1, |n, _| or_none(&address(n, "InternalIP"))),
        Column::computed("External-IP", 1, |n, _| or_none(&address(n, "ExternalIP"))),
        Column::computed("OS-Image", 1, |n, _| {
            or_none(str_at(n, "/status/nodeInfo/osImage"))
        }),
        Column::computed("Kernel-Version", 1, |n, _| {
            or_none(str_at(n, "/status/nodeInfo/kernelVersion"))
        }),
        Column::computed("Container-Runtime", 1, |n, _| {
            or_none(str_at(n, "/status/nodeInfo/containerRuntimeVersion"))
        }),
    ]
}

/// `Ready` when the Ready condition is true, `NotReady` when it is anything else, `Unknown`
/// without one; `,SchedulingDisabled` when cordoned.
fn node_status(node: &Value) -> String {
    let ready =
        lookup(node, r#".status.conditions[?(@.type=="Ready")].status"#).and_then(Value::as_str);
    let mut status = match ready {
        Some("True") => "Ready",
        Some(_) => "NotReady",
        None => "Unknown",
    }
    .to_owned();
    if node.pointer("/spec/unschedulable") == Some(&json!(true)) {
        status.push_str(",SchedulingDisabled");
    }
    status
}

/// The roles in `node-role.kubernetes.io/ROLE` labels and `kubernetes.io/role`, sorted.
fn node_roles(node: &Value) -> String {
    let mut roles: Vec<&str> = node
        .pointer("/metadata/labels")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter_map(
            |(key, value)| match key.strip_prefix("node-role.kubernetes.io/") {
                Some(role) if !role.is_empty() => Some(role),
                _ if key == "kubernetes.io/role" => value.as_str(),
                _ => None,
            },
        )
        .collect();
    roles.sort_unstable();
    roles.dedup();
    if roles.is_empty() {
        "<none>".to_owned()
    } else {
        roles.join(",")
    }
}

fn address(node: &Value, kind: &str) -> String {
    lookup(
        node,
        &format!(r#".status.addresses[?(@.type=="{kind}")].address"#),
    )
    .and_then(Value::as_str)
    .unwrap_or_default()
    .to_owned()
}

fn pod() -> Vec<Column> {
    vec![
        name(),
        Column::computed("Ready", 0, |p, _| json!(pod_ready(p))),
        Column::computed("Status", 0, |p, _| json!(pod_status(p))),
        Column::computed("Restarts", 0, |p, _| json!(pod_restarts(p))),
        age_column(),
        Column::computed("IP", 1, |p, _| or_none(str_at(p, "/status/podIP"))),
        Column::computed("Node", 1, |p, _| or_none(str_at(p, "/spec/nodeName"))),
        Column::computed("Nominated Node", 1, |p, _| {
            or_none(str_at(p, "/status/nominatedNodeName"))
        }),
        Column::computed("Readiness Gates", 1, |p, _| {
            let gates = p.pointer("/spec/readinessGates").and_then(Value::as_array);
            match gates.map(Vec::len) {
                None | Some(0) => json!("<none>"),
                Some(n) => json!(format!("0/{n}")),
            }
        }),
    ]
}

fn container_statuses(pod: &Value) -> &[Value] {
    pod.pointer("/status/containerStatuses")
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// Ready containers over containers: `1/2`.
fn pod_ready(pod: &Value) -> String {
    let total = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let ready = container_statuses(pod)
        .iter()
        .filter(|c| c["ready"] == json!(true))
        .count();
    format!("{ready}/{total}")
}

/// The reason a user sees first: `Terminating` once deleted, else a container's waiting or
/// terminated reason (`ContainerCreating`, `CrashLoopBackOff`, `Completed`), else the
/// pod's reason (`Evicted`) or phase.
fn pod_status(pod: &Value) -> String {
    if pod.pointer("/metadata/deletionTimestamp").is_some() {
        return "Terminating".to_owned();
    }
    let phase = str_at(pod, "/status/phase");
    let reason = str_at(pod, "/status/reason");
    let container_reason = container_statuses(pod).iter().rev().find_map(|c| {
        let waiting = c.pointer("/state/waiting/reason").and_then(Value::as_str);
        let terminated = c
            .pointer("/state/terminated/reason")
            .and_then(Value::as_str);
        waiting.or(terminated).filter(|r| !r.is_empty())
    });
    match (reason, container_reason) {
        ("", Some(container)) => container.to_owned(),
        ("", None) if phase.is_empty() => "Pending".to_owned(),
        ("", None) => phase.to_owned(),
        (reason, _) => reason.to_owned(),
    }
}

fn pod_restarts(pod: &Value) -> u64 {
    container_statuses(pod)
        .iter()
        .filter_map(|c| c["restartCount"].as_u64())
        .sum()
}

/// Containers, images and the selector, as `-o wide` shows them for workloads.
fn workload_wide() -> [Column; 3] {
    [
        Column::computed("Containers", 1, |w, _| {
            or_none(&template_containers(w, "name"))
        }),
        Column::computed("Images", 1, |w, _| {
            or_none(&template_containers(w, "image"))
        }),
        Column::computed("Selector", 1, |w, _| {
            let labels = w
                .pointer("/spec/selector/matchLabels")
                .and_then(Value::as_object);
            let pairs: Vec<String> = labels
                .into_iter()
                .flatten()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect();
            or_none(&pairs.join(","))
        }),
    ]
}

fn template_containers(workload: &Value, field: &str) -> String {
    workload
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c[field].as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn count_at(object: &Value, pointer: &str) -> u64 {
    object.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn deployment() -> Vec<Column> {
    let mut columns = vec![
        name(),
        Column::computed("Ready", 0, |d, _| {
            json!(format!(
                "{}/{}",
                count_at(d, "/status/readyReplicas"),
                count_at(d, "/spec/replicas")
            ))
        }),
        Column::computed("Up-to-date", 0, |d, _| {
            json!(count_at(d, "/status/updatedReplicas"))
        }),
        Column::computed("Available", 0, |d, _| {
            json!(count_at(d, "/status/availableReplicas"))
        }),
        age_column(),
    ];
    columns.extend(workload_wide());
    columns
}

fn replica_set() -> Vec<Column> {
    let mut columns = vec![
        name(),
        Column::computed("Desired", 0, |r, _| json!(count_at(r, "/spec/replicas"))),
        Column::computed("Current", 0, |r, _| json!(count_at(r, "/status/replicas"))),
        Column::computed("Ready", 0, |r, _| {
            json!(count_at(r, "/status/readyReplicas"))
        }),
        age_column(),
    ];
    columns.extend(workload_wide());
    columns
}

fn event() -> Vec<Column> {
    vec![
        Column::computed("Last Seen", 0, |e, now| json!(event_last_seen(e, now))),
        Column::computed("Type", 0, |e, _| json!(str_at(e, "/type"))),
        Column::computed("Reason", 0, |e, _| json!(str_at(e, "/reason"))),
        Column::computed("Object", 0, |e, _| {
            let (kind, name) = event_object(e);
            json!(format!("{}/{name}", kind.to_lowercase()))
        }),
        Column::computed("Subobject", 1, |e, _| {
            json!(str_at(e, "/involvedObject/fieldPath"))
        }),
        Column::computed("Source", 1, |e, _| json!(event_source(e))),
        Column::computed("Message", 0, |e, _| {
            json!(match str_at(e, "/message") {
                "" => str_at(e, "/note"),
                message => message,
            })
        }),
        Column::computed("First Seen", 1, |e, now| {
            json!(age(first_timestamp(e), now))
        }),
        Column::computed("Count", 1, |e, _| json!(event_count(e))),
        Column::computed("Name", 1, |e, _| json!(str_at(e, "/metadata/name"))),
    ]
}

/// The involved object of a core/v1 Event (`involvedObject`) or an events.k8s.io one
/// (`regarding`).
fn event_object(event: &Value) -> (&str, &str) {
    let object = event
        .get("involvedObject")
        .or_else(|| event.get("regarding"))
        .unwrap_or(&Value::Null);
    (
        object["kind"].as_str().unwrap_or_default(),
        object["name"].as_str().unwrap_or_default(),
    )
}

fn event_source(event: &Value) -> String {
    let component = match str_at(event, "/source/component") {
        "" => str_at(event, "/reportingController"),
        component => component,
    };
    match str_at(event, "/source/host") {
        "" => component.to_owned(),
        host => format!("{component}, {host}"),
    }
}

fn event_count(event: &Value) -> u64 {
    event["count"]
        .as_u64()
        .or_else(|| event.pointer("/series/count").and_then(Value::as_u64))
        .unwrap_or(1)
}

/// The first time of the first of `fields` that is set (`firstTimestamp`, `eventTime`, or
/// creation).
fn first_set<'a>(event: &'a Value, fields: &[&str]) -> Option<&'a str> {
    fields
        .iter()
        .filter_map(|f| event.pointer(f).and_then(Value::as_str))
        .find(|t| !t.is_empty())
}

fn first_timestamp(event: &Value) -> Option<&str> {
    first_set(
        event,
        &[
            "/firstTimestamp",
            "/eventTime",
            "/metadata/creationTimestamp",
        ],
    )
}

/// `5s`, or `5s (x3 over 2m)` for an event seen more than once.
fn event_last_seen(event: &Value, now: SystemTime) -> String {
    let last = first_set(
        event,
        &[
            "/lastTimestamp",
            "/series/lastObservedTime",
            "/eventTime",
            "/firstTimestamp",
            "/metadata/creationTimestamp",
        ],
    );
    let seen = age(last, now);
    match event_count(event) {
        count if count > 1 => {
            format!(
                "{seen} (x{count} over {})",
                age(first_timestamp(event), now)
            )
        }
        _ => seen,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn cells(columns: &[Column], object: &Value, now: SystemTime) -> Vec<(String, Value)> {
        columns
            .iter()
            .map(|c| (c.name.clone(), c.cell(object, now)))
            .collect()
    }

    fn at(columns: &[Column], object: &Value, name: &str) -> Value {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_100);
        cells(columns, object, now)
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("no column {name}"))
    }

    #[test]
    fn nodes_show_status_roles_version_and_wide_addresses() {
        let node = json!({
            "metadata": {"name": "ip-10-0-1-5.ec2.internal",
                "labels": {"node-role.kubernetes.io/worker": "", "kubernetes.io/role": "spot"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.1.5"}],
                "nodeInfo": {"kubeletVersion": "v1.33.0", "osImage": "Amazon Linux 2023"}},
        });
        let columns = super::node();
        assert_eq!(at(&columns, &node, "Status"), "Ready,SchedulingDisabled");
        assert_eq!(at(&columns, &node, "Roles"), "spot,worker");
        assert_eq!(at(&columns, &node, "Version"), "v1.33.0");
        assert_eq!(at(&columns, &node, "Internal-IP"), "10.0.1.5");
        assert_eq!(at(&columns, &node, "External-IP"), "<none>");
        let wide: Vec<&str> = columns
            .iter()
            .filter(|c| c.priority > 0)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            wide,
            [
                "Internal-IP",
                "External-IP",
                "OS-Image",
                "Kernel-Version",
                "Container-Runtime"
            ]
        );
        assert_eq!(at(&columns, &json!({}), "Status"), "Unknown");
        assert_eq!(at(&columns, &json!({}), "Roles"), "<none>");
    }

    #[test]
    fn pods_show_ready_containers_the_reason_first_and_restarts() {
        let pod = json!({
            "metadata": {"name": "web-1"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Pending", "podIP": "100.64.0.9", "containerStatuses": [
                {"name": "a", "ready": true, "restartCount": 2, "state": {"running": {}}},
                {"name": "b", "ready": false, "restartCount": 1,
                    "state": {"waiting": {"reason": "ContainerCreating"}}}]},
        });
        let columns = super::pod();
        assert_eq!(at(&columns, &pod, "Ready"), "1/2");
        assert_eq!(at(&columns, &pod, "Status"), "ContainerCreating");
        assert_eq!(at(&columns, &pod, "Restarts"), 3);
        assert_eq!(at(&columns, &pod, "IP"), "100.64.0.9");
        assert_eq!(at(&columns, &pod, "Node"), "n1");
        let mut evicted = pod.clone();
        evicted["status"]["reason"] = json!("Evicted");
        assert_eq!(at(&columns, &evicted, "Status"), "Evicted");
        let mut deleting = pod;
        deleting["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
        assert_eq!(at(&columns, &deleting, "Status"), "Terminating");
        assert_eq!(at(&columns, &json!({}), "Status"), "Pending");
    }

    #[test]
    fn deployments_show_ready_up_to_date_and_available() {
        let deployment = json!({
            "spec": {"replicas": 5, "selector": {"matchLabels": {"app": "web"}},
                "template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}},
            "status": {"readyReplicas": 3, "updatedReplicas": 5, "availableReplicas": 3},
        });
        let columns = super::deployment();
        assert_eq!(at(&columns, &deployment, "Ready"), "3/5");
        assert_eq!(at(&columns, &deployment, "Up-to-date"), 5);
        assert_eq!(at(&columns, &deployment, "Available"), 3);
        assert_eq!(at(&columns, &deployment, "Images"), "nginx:1.27");
        assert_eq!(at(&columns, &deployment, "Selector"), "app=web");
    }

    #[test]
    fn events_show_last_seen_with_repeats_and_the_object_by_kind() {
        let event = json!({
            "metadata": {"name": "web-1.17a"},
            "involvedObject": {"kind": "Pod", "name": "web-1"},
            "type": "Normal", "reason": "Nominated", "message": "Pod should schedule on: nodeclaim/default-x",
            "firstTimestamp": "2023-11-14T22:10:00Z", "lastTimestamp": "2023-11-14T22:14:30Z",
            "count": 3, "source": {"component": "karpenter"},
        });
        let columns = super::event();
        let shown: Vec<&str> = columns
            .iter()
            .filter(|c| c.priority == 0)
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(shown, ["Last Seen", "Type", "Reason", "Object", "Message"]);
        assert_eq!(at(&columns, &event, "Last Seen"), "30s (x3 over 5m)");
        assert_eq!(at(&columns, &event, "Object"), "pod/web-1");
        assert_eq!(at(&columns, &event, "Source"), "karpenter");
        assert_eq!(at(&columns, &event, "Count"), 3);
    }
}
