//! The metrics page. Where each metric is recorded is read from the controller's sources
//! (actors/ and aws/): every `metrics::counter!`, `gauge!` and `histogram!` call gives a
//! name (a literal or a `const` of the same crates, whose doc comment describes it) and
//! its label names; the gauges computed from cluster state at scrape time are read from
//! `cluster_metrics::render` over a small cluster. Each recorded metric is then emitted once
//! through the controller's own recorder (`kerf_actors::metrics`), whose exposition gives
//! the type Prometheus sees (a histogram without buckets is exported as a summary).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::{Node, Pod};
use kerf_actors::state::{ClusterState, ObjectKey};
use regex::Regex;

use super::reference::GENERATED;
use super::{cell, repo};

/// One metric: how it is recorded, its label names and its description.
#[derive(Default)]
struct Metric {
    kind: String,
    labels: BTreeSet<String>,
    help: String,
}

pub fn page() -> String {
    let (consts, docs) = constants();
    let mut metrics: BTreeMap<String, Metric> = BTreeMap::new();
    let call = Regex::new(r"metrics::(counter|gauge|histogram)!\(").unwrap();
    let label = Regex::new(r#""([a-z_]+)"\s*=>"#).unwrap();
    for text in controller_sources() {
        for found in call.captures_iter(&text) {
            let args = arguments(&text[found.get(0).unwrap().end()..]);
            let first = args.split(',').next().unwrap().trim();
            let name = match first.strip_prefix('"') {
                Some(literal) => literal.trim_end_matches('"').to_owned(),
                None => {
                    let ident = first.rsplit("::").next().unwrap();
                    if !is_const_name(ident) {
                        // A name chosen at run time (one call for several kinds' metrics):
                        // documented from what the trackers record, below.
                        continue;
                    }
                    consts
                        .get(ident)
                        .unwrap_or_else(|| panic!("no const {ident}"))
                        .clone()
                }
            };
            let metric = metrics.entry(name.clone()).or_default();
            metric.kind = found[1].to_owned();
            metric
                .labels
                .extend(label.captures_iter(&args).map(|c| c[1].to_owned()));
            metric.help = docs.get(&name).cloned().unwrap_or_default();
        }
    }
    let mut types = exported_types(&metrics);
    let well_known = well_known_labels();
    let upstream: BTreeSet<String> = upstream_reference().into_iter().map(|(n, _)| n).collect();
    for (name, (kind, labels)) in tracked_metrics() {
        let metric = metrics.entry(name.clone()).or_default();
        metric.kind = kind.clone();
        metric.labels = labels;
        metric.help = docs.get(&name).cloned().unwrap_or_default();
        types.insert(name, kind);
    }
    for (name, labels) in scrape_time_gauges(&consts) {
        let metric = metrics.entry(name.clone()).or_default();
        metric.kind = "gauge".to_owned();
        metric.labels = labels;
        metric.help = docs.get(&name).cloned().unwrap_or_default();
    }
    let mut out = format!(
        "{GENERATED}\n\n# Metrics\n\n\
         The controller serves these on `/metrics` (port `METRICS_PORT`, 8080). Names and \
         labels are upstream Karpenter's (and controller-runtime's and client-go's, which \
         upstream's dashboards also read), so upstream's Grafana dashboards chart kerf \
         unchanged; kerf's own metrics carry the `kerf_` prefix. The origin says whether a \
         name is in upstream v1.14's metrics reference ([coverage](#coverage-of-upstream-v114)). \
         *Well-known labels* stands \
         for the node labels upstream copies onto its node metrics: {}.\n\n\
         | name | type | labels | origin | what it measures |\n|---|---|---|---|---|\n",
        well_known
            .iter()
            .map(|l| format!("`{l}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    for (name, metric) in &metrics {
        let kind = types
            .get(name)
            .cloned()
            .unwrap_or_else(|| metric.kind.clone());
        let all_well_known = well_known.is_subset(&metric.labels);
        let mut labels: Vec<String> = metric
            .labels
            .iter()
            .filter(|l| !(all_well_known && well_known.contains(*l)))
            .map(|l| format!("`{l}`"))
            .collect();
        if all_well_known {
            labels.push("*well-known labels*".to_owned());
        }
        let origin = if name.starts_with("kerf_") {
            "kerf"
        } else if upstream.contains(name) {
            "upstream"
        } else {
            "upstream's prefix, not in v1.14"
        };
        writeln!(
            out,
            "| `{name}` | {kind} | {} | {origin} | {} |",
            labels.join(", "),
            cell(&metric.help)
        )
        .unwrap();
    }
    out.push_str(&coverage(&metrics));
    out
}

/// The section on upstream v1.14's reference: how many of its names kerf records, and each
/// divergence with its reason (deploy/metrics/, checked against a run by
/// cli/tests/dashboards.rs).
fn coverage(metrics: &BTreeMap<String, Metric>) -> String {
    let upstream = upstream_reference();
    let divergences = entries("deploy/metrics/divergences.txt");
    let recorded = upstream
        .iter()
        .filter(|(name, _)| metrics.contains_key(name))
        .count();
    let count = |prefix: &str| {
        let all = upstream
            .iter()
            .filter(|(n, _)| n.starts_with(prefix))
            .count();
        let kerf = upstream
            .iter()
            .filter(|(n, _)| n.starts_with(prefix) && metrics.contains_key(n))
            .count();
        format!("| `{prefix}*` | {all} | {kerf} |\n")
    };
    let mut out = format!(
        "\n## Coverage of upstream v1.14\n\n\
         Upstream's v1.14 metrics reference names {} metrics (vendored with their types, \
         labels and buckets in `deploy/metrics/upstream-v1.14.txt`); kerf records {recorded} \
         of them. A `kerf simulate --scale-down` run exports each with upstream's type and \
         labels except where listed below (`deploy/metrics/divergences.txt`; \
         `cli/tests/dashboards.rs` fails if a listed metric or label is exported after all).\n\n\
         | prefix | upstream | kerf |\n|---|---|---|\n",
        upstream.len()
    );
    for prefix in [
        "karpenter_",
        "operator_",
        "controller_runtime_",
        "workqueue_",
        "leader_election_",
        "client_go_",
        "aws_sdk_go_",
    ] {
        out.push_str(&count(prefix));
    }
    let beyond: Vec<String> = metrics
        .keys()
        .filter(|n| !n.starts_with("kerf_") && !upstream.iter().any(|(u, _)| u == *n))
        .map(|n| format!("`{n}`"))
        .collect();
    write!(
        out,
        "\nkerf also records {} metrics under upstream's prefixes that v1.14's reference does \
         not list (their origin above says so): {}.\n",
        beyond.len(),
        beyond.join(", ")
    )
    .unwrap();
    out.push_str("\n| metric | divergence | why |\n|---|---|---|\n");
    for (name, reason) in divergences {
        let (name, what) = match name.strip_prefix('~') {
            Some(event) => (event.to_owned(), "exported once it happens"),
            None if name.contains('{') => (name.clone(), "label not exported"),
            None => (name.clone(), "not exported"),
        };
        writeln!(out, "| `{name}` | {what} | {} |", cell(&reason)).unwrap();
    }
    out
}

/// The `name | rest` lines of a file under deploy/metrics/, comments and blank lines left out.
fn entries(path: &str) -> Vec<(String, String)> {
    std::fs::read_to_string(repo().join(path))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (name, rest) = l.split_once('|').unwrap_or((l, ""));
            (name.trim().to_owned(), rest.trim().to_owned())
        })
        .collect()
}

/// Upstream v1.14's metrics reference, as vendored: each name with its type and labels.
fn upstream_reference() -> Vec<(String, String)> {
    entries("deploy/metrics/upstream-v1.14.txt")
}

/// The text inside the parentheses that start `rest`'s macro call.
fn arguments(rest: &str) -> String {
    let mut depth = 1;
    for (i, c) in rest.char_indices() {
        depth += match c {
            '(' => 1,
            ')' => -1,
            _ => 0,
        };
        if depth == 0 {
            return rest[..i].to_owned();
        }
    }
    panic!("unclosed macro call: {rest:.80}");
}

/// The non-test sources of the controller's crates (actors/, aws/): each file up to its
/// inline `mod tests`; files of tests only are left out.
fn controller_sources() -> Vec<String> {
    let root = repo();
    super::settings::rust_sources(&[root.join("actors/src"), root.join("aws/src")])
        .into_iter()
        .filter(|(path, _)| !path.ends_with("tests.rs") && !path.iter().any(|p| p == "tests"))
        .map(|(_, text)| match text.find("#[cfg(test)]\nmod tests {") {
            Some(at) => text[..at].to_owned(),
            None => text,
        })
        .collect()
}

/// `const NAME: &str = "metric_name";` of the controller's crates: NAME → metric name, and
/// metric name → the first sentence of the constant's doc comment.
fn constants() -> (HashMap<String, String>, HashMap<String, String>) {
    let decl = Regex::new(
        r#"((?:[ \t]*///[^\n]*\n)*)[ \t]*pub(?:\([a-z]+\))? const ([A-Z0-9_]+): &str =\s*"((?:karpenter|kerf|controller_runtime|workqueue|leader_election|operator)_[a-z0-9_]+)";"#,
    )
    .unwrap();
    let mut names = HashMap::new();
    let mut docs = HashMap::new();
    for text in controller_sources() {
        for found in decl.captures_iter(&text) {
            let doc: Vec<&str> = found[1]
                .lines()
                .map(|l| l.trim().trim_start_matches("///").trim())
                .collect();
            let earlier = names.insert(found[2].to_owned(), found[3].to_owned());
            assert!(
                earlier.is_none_or(|e| e == found[3]),
                "two metric constants are named {}: the docs cannot tell which a call means",
                &found[2]
            );
            let doc = doc.join(" ").replace("[`", "`").replace("`]", "`");
            docs.insert(found[3].to_owned(), first_sentence(&doc));
        }
    }
    (names, docs)
}

/// Whether `ident` is written as a constant (`NODES_CREATED`), not a variable or a field.
fn is_const_name(ident: &str) -> bool {
    !ident.is_empty()
        && ident
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

/// The metrics the watch trackers record (condition transitions, termination durations):
/// name → (type, label names), from feeding each tracker an object that changes and goes.
fn tracked_metrics() -> BTreeMap<String, (String, BTreeSet<String>)> {
    use kerf_actors::cluster_metrics::ConditionTracker;
    use kerf_actors::state::Change;
    kerf_actors::metrics::handle();
    let meta = |deleting: bool| {
        let mut meta = serde_json::json!({"name": "docs-tracked", "labels": {
            "karpenter.sh/nodepool": "docs", "karpenter.k8s.aws/ec2nodeclass": "docs",
            "karpenter.sh/initialized": "true"}});
        if deleting {
            meta["deletionTimestamp"] = serde_json::json!("2026-01-01T00:01:00Z");
        }
        meta
    };
    let condition = |status: &str, at: &str| {
        serde_json::json!([{"type": "Ready", "status": status, "reason": status,
            "message": "", "lastTransitionTime": at}])
    };
    let versions = [
        (false, "Unknown", "2026-01-01T00:00:00Z"),
        (false, "True", "2026-01-01T00:00:30Z"),
        (true, "True", "2026-01-01T00:00:30Z"),
    ];
    let mut claims = ConditionTracker::<kerf::api::NodeClaim>::default();
    let mut pools = ConditionTracker::<kerf::api::NodePool>::default();
    let mut nodes = ConditionTracker::<Node>::default();
    let mut classes = ConditionTracker::<kerf::api::EC2NodeClass>::default();
    for (deleting, status, at) in versions {
        let claim: kerf::api::NodeClaim = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta(deleting),
            "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
                "name": "docs"}, "requirements": []},
            "status": {"conditions": condition(status, at)}
        }))
        .unwrap();
        claims.observe(&claim, Change::Applied);
        let pool: kerf::api::NodePool = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": meta(deleting),
            "spec": {"template": {"spec": {"nodeClassRef": {"group": "karpenter.k8s.aws",
                "kind": "EC2NodeClass", "name": "docs"}, "requirements": []}}},
            "status": {"conditions": condition(status, at)}
        }))
        .unwrap();
        pools.observe(&pool, Change::Applied);
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": meta(deleting), "status": {"conditions": condition(status, at)}
        }))
        .unwrap();
        nodes.observe(&node, Change::Applied);
        let class: kerf::api::EC2NodeClass = serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass", "metadata": meta(deleting),
            "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "docs",
                "subnetSelectorTerms": [{"tags": {"a": "b"}}],
                "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
            "status": {"conditions": condition(status, at)}
        }))
        .unwrap();
        classes.observe(&class, Change::Applied);
        if deleting {
            claims.observe(&claim, Change::Deleted);
            pools.observe(&pool, Change::Deleted);
            nodes.observe(&node, Change::Deleted);
            classes.observe(&class, Change::Deleted);
        }
    }
    let text = kerf_actors::metrics::render();
    let types: HashMap<String, String> = Regex::new(r"(?m)^# TYPE (operator_\S+) (\S+)$")
        .unwrap()
        .captures_iter(&text)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect();
    let series = Regex::new(r"(?m)^(operator_[a-z0-9_]+)\{([^}]*)\}").unwrap();
    let key = Regex::new(r#"([a-z0-9_]+)="#).unwrap();
    let mut out: BTreeMap<String, (String, BTreeSet<String>)> = BTreeMap::new();
    for found in series.captures_iter(&text) {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| found[1].strip_suffix(s).filter(|f| types.contains_key(*f)))
            .unwrap_or(&found[1])
            .to_owned();
        let Some(kind) = types.get(&family) else {
            continue;
        };
        let entry = out
            .entry(family)
            .or_insert_with(|| (kind.clone(), BTreeSet::new()));
        entry.1.extend(
            key.captures_iter(&found[2])
                .map(|k| k[1].to_owned())
                .filter(|k| k != "le"),
        );
    }
    assert!(
        out.len() >= 15,
        "the trackers recorded too few metrics: {out:#?}"
    );
    out
}

/// Up to the first full stop followed by a capital letter (not "e.g. `x`").
fn first_sentence(text: &str) -> String {
    let end = Regex::new(r"\. [A-Z]").unwrap();
    match end.find(text) {
        Some(found) => text[..=found.start()].to_owned(),
        None => text.to_owned(),
    }
}

/// Each recorded metric emitted once through the controller's recorder, and the type its
/// exposition gives it.
fn exported_types(metrics: &BTreeMap<String, Metric>) -> HashMap<String, String> {
    kerf_actors::metrics::handle();
    for (name, metric) in metrics {
        let labels: Vec<metrics::Label> = metric
            .labels
            .iter()
            .map(|l| metrics::Label::new(l.clone(), "docs"))
            .collect();
        match metric.kind.as_str() {
            "counter" => metrics::counter!(name.clone(), labels).increment(1),
            "gauge" => metrics::gauge!(name.clone(), labels).set(1.0),
            _ => metrics::histogram!(name.clone(), labels).record(1.0),
        }
    }
    let text = kerf_actors::metrics::render();
    let line = Regex::new(r"(?m)^# TYPE (\S+) (\S+)$").unwrap();
    line.captures_iter(&text)
        .map(|c| (c[1].to_owned(), c[2].to_owned()))
        .collect()
}

/// The gauges computed from cluster state at scrape time, with their label names, from
/// rendering a cluster of one NodePool, one Node and two pods (one a DaemonSet's).
fn scrape_time_gauges(consts: &HashMap<String, String>) -> BTreeMap<String, BTreeSet<String>> {
    let (state, mut writers) = ClusterState::new();
    let pool = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
        "spec": {"limits": {"cpu": "100"}, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}
    }))
    .unwrap();
    writers
        .nodepools
        .apply(ObjectKey::new(None, "default"), pool);
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-a", "labels": {"karpenter.sh/nodepool": "default"},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
            "creationTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"},
            "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    writers.nodes.apply(ObjectKey::new(None, "node-a"), node);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "web",
            "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}]}
    }))
    .unwrap();
    writers
        .pods
        .apply(ObjectKey::new(Some("default"), "web"), pod);
    let daemon: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "agent", "namespace": "default", "ownerReferences": [{
            "apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "1",
            "controller": true}]},
        "spec": {"nodeName": "node-a", "containers": [{"name": "agent",
            "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}}]}
    }))
    .unwrap();
    writers
        .pods
        .apply(ObjectKey::new(Some("default"), "agent"), daemon);
    let claim = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "claim-a", "deletionTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass",
            "name": "default"}, "requirements": []},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    writers
        .nodeclaims
        .apply(ObjectKey::new(None, "claim-a"), claim);
    for (name, placed) in [("pending-a", None), ("pending-b", Some(true))] {
        let pending: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default",
                "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"containers": [{"name": "web"}]}, "status": {"phase": "Pending"}
        }))
        .unwrap();
        writers
            .pods
            .apply(ObjectKey::new(Some("default"), name), pending);
        let key = ObjectKey::new(Some("default"), name);
        state.scheduling.ack(&key);
        if let Some(placed) = placed {
            state.scheduling.decided(&key, placed);
        }
    }
    let class = serde_json::from_value(serde_json::json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": "default", "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"amiSelectorTerms": [{"alias": "al2023@latest"}], "role": "docs",
            "subnetSelectorTerms": [{"tags": {"a": "b"}}],
            "securityGroupSelectorTerms": [{"tags": {"a": "b"}}]},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready",
            "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    }))
    .unwrap();
    writers
        .nodeclasses
        .apply(ObjectKey::new(None, "default"), class);
    state.scheduling.solve_started(1);
    let catalog = kerf::catalog::Catalog::embedded("us-east-1").unwrap();
    let types = catalog.instance_types(&kerf::catalog::AllocatableSettings::default());
    let types: std::sync::Arc<[kerf::catalog::InstanceType]> = types.into();
    let text = kerf_actors::cluster_metrics::render(&state, &[("default".to_owned(), types)], true);
    let series = Regex::new(r"(?m)^([a-z_0-9]+)(?:\{([^}]*)\})? ").unwrap();
    let key = Regex::new(r#"([a-z0-9_]+)="#).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for found in series.captures_iter(&text) {
        let labels = out.entry(found[1].to_owned()).or_default();
        if let Some(set) = found.get(2) {
            labels.extend(key.captures_iter(set.as_str()).map(|k| k[1].to_owned()));
        }
    }
    let family = Regex::new(r"Family::new\(\s*([A-Z0-9_]+),").unwrap();
    for text in controller_sources() {
        for found in family.captures_iter(&text) {
            let name = &consts[&found[1]];
            assert!(
                out.contains_key(name),
                "{name} is computed at scrape time but the docs' small cluster renders no \
                 series of it: give that cluster what it needs (cli/tests/docs/metrics.rs)"
            );
        }
    }
    out
}

/// The metric labels copied from a node's well-known labels: the `(labels::KEY, "label")`
/// pairs of the node metrics' source.
fn well_known_labels() -> BTreeSet<String> {
    let pair = Regex::new(r#"\(\s*labels::[A-Z_]+,\s*"([a-z_]+)",?\s*\)"#).unwrap();
    controller_sources()
        .iter()
        .flat_map(|text| {
            pair.captures_iter(text)
                .map(|c| c[1].to_owned())
                .collect::<Vec<_>>()
        })
        .collect()
}
