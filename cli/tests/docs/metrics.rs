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
    let types = exported_types(&metrics);
    let well_known = well_known_labels();
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
         unchanged; kerf's own metrics carry the `kerf_` prefix. *Well-known labels* stands \
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
        } else {
            "upstream"
        };
        writeln!(
            out,
            "| `{name}` | {kind} | {} | {origin} | {} |",
            labels.join(", "),
            cell(&metric.help)
        )
        .unwrap();
    }
    out
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
        r#"((?:[ \t]*///[^\n]*\n)*)[ \t]*pub(?:\([a-z]+\))? const ([A-Z0-9_]+): &str =\s*"((?:karpenter|kerf|controller_runtime|workqueue|leader_election)_[a-z_]+)";"#,
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
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
        "spec": {"limits": {"cpu": "100"}, "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}}
    }))
    .unwrap();
    writers
        .nodepools
        .apply(ObjectKey::new(None, "default"), pool);
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "node-a", "labels": {"karpenter.sh/nodepool": "default"}},
        "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}
    }))
    .unwrap();
    writers.nodes.apply(ObjectKey::new(None, "node-a"), node);
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "web", "namespace": "default"},
        "spec": {"nodeName": "node-a", "containers": [{"name": "web",
            "resources": {"requests": {"cpu": "1"}}}]}
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
            "resources": {"requests": {"cpu": "100m"}}}]}
    }))
    .unwrap();
    writers
        .pods
        .apply(ObjectKey::new(Some("default"), "agent"), daemon);
    let text = kerf_actors::cluster_metrics::render(&state);
    let series = Regex::new(r"(?m)^([a-z_]+)\{([^}]*)\}").unwrap();
    let key = Regex::new(r#"([a-z_]+)="#).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for found in series.captures_iter(&text) {
        let labels = out.entry(found[1].to_owned()).or_default();
        labels.extend(key.captures_iter(&found[2]).map(|k| k[1].to_owned()));
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
