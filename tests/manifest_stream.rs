//! The manifest reader at the size of real cluster dumps: 100,000 objects in one YAML
//! stream, one YAML `List` or one JSON `List`, read without a hidden ceiling; the node limit
//! that remains is per document and reported in kerf's words; and a realistic `kubectl`
//! dump reads alike in YAML and JSON and plans.

use std::io::Write;

use kerf::manifest::{self, Limits, ManifestError, Object, stream};
use kerf::plan::fixtures::{self, DumpFormat, DumpShape};
use kerf::plan::inventory::Builder;
use kerf::plan::{self, PlanOptions};

const OBJECTS: usize = 100_000;

fn small_pod(index: usize) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("p-{index}"), "namespace": "ns",
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}]},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}})
}

/// `count` small pods written as `format`.
fn text(count: usize, format: DumpFormat) -> Vec<u8> {
    let mut out = Vec::new();
    fixtures::write((0..count).map(small_pod), format, &mut out).expect("written");
    out
}

/// Every object of `input`, and the error that ended it, if any.
fn read(input: &[u8], limits: Limits) -> (Vec<Object>, Option<ManifestError>) {
    let mut objects = Vec::new();
    let ended = stream::read(input, "dump", limits, &mut |object| {
        objects.push(object.expect("every object reads"))
    })
    .err();
    (objects, ended)
}

fn assert_all_read(objects: &[Object]) {
    assert_eq!(objects.len(), OBJECTS);
    for index in [0, 1, OBJECTS / 2, OBJECTS - 1] {
        assert_eq!(objects[index].display_name(), format!("Pod/p-{index}"));
        assert_eq!(objects[index].namespace.as_deref(), Some("ns"));
        assert!(
            objects[index].value["metadata"]
                .get("managedFields")
                .is_none(),
            "managedFields is skipped"
        );
    }
}

#[test]
fn a_yaml_stream_of_100k_documents_is_read() {
    let (objects, ended) = read(&text(OBJECTS, DumpFormat::YamlStream), Limits::default());
    assert!(ended.is_none(), "{ended:?}");
    assert_all_read(&objects);
    assert_eq!(objects[OBJECTS - 1].source.document, OBJECTS);
}

#[test]
fn a_yaml_list_of_100k_objects_is_read() {
    let (objects, ended) = read(&text(OBJECTS, DumpFormat::Yaml), Limits::default());
    assert!(ended.is_none(), "{ended:?}");
    assert_all_read(&objects);
    // Each item is located at its own line, not at the List's.
    assert_eq!(objects[0].source.line, Some(3));
    assert!(objects[1].source.line > objects[0].source.line);
}

#[test]
fn a_json_list_of_100k_objects_is_read() {
    let (objects, ended) = read(&text(OBJECTS, DumpFormat::Json), Limits::default());
    assert!(ended.is_none(), "{ended:?}");
    assert_all_read(&objects);
}

#[test]
fn the_node_limit_holds_per_document_and_is_named_in_kerfs_words() {
    let limits = Limits {
        max_yaml_nodes: 1_000,
    };
    // A stream of small documents: each is far below the limit, however many there are.
    let (objects, ended) = read(&text(5_000, DumpFormat::YamlStream), limits);
    assert!(ended.is_none(), "{ended:?}");
    assert_eq!(objects.len(), 5_000);
    // One List document above it stops with kerf's message.
    let (_, ended) = read(&text(5_000, DumpFormat::Yaml), limits);
    let error = ended.expect("the List is above the limit");
    assert!(
        matches!(error, ManifestError::TooManyNodes { limit: 1_000, .. }),
        "{error:?}"
    );
    assert_eq!(
        error.to_string(),
        "dump: the document has more than 1000 nodes; raise it with --max-yaml-nodes"
    );
}

#[test]
fn files_and_streams_read_alike() {
    let input = text(2_000, DumpFormat::Yaml);
    let dir = std::env::temp_dir().join(format!("kerf-manifest-stream-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("dump.yaml");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(&input))
        .expect("written");
    let mut from_file = Vec::new();
    manifest::read_file(&path, Limits::default(), &mut |o| {
        from_file.push(o.expect("reads"))
    })
    .expect("file reads");
    let _ = std::fs::remove_dir_all(&dir);
    let (from_stream, _) = read(&input, Limits::default());
    assert_eq!(from_file.len(), from_stream.len());
    for (a, b) in from_file.iter().zip(&from_stream) {
        assert_eq!((&a.value, a.source.line), (&b.value, b.source.line));
    }
}

#[test]
fn a_realistic_dump_reads_alike_in_yaml_and_json_and_plans() {
    let shape = DumpShape {
        pods: 600,
        running_percent: 20,
    };
    let mut by_format = Vec::new();
    for format in [DumpFormat::Yaml, DumpFormat::Json, DumpFormat::YamlStream] {
        let mut out = Vec::new();
        fixtures::write(fixtures::objects(shape), format, &mut out).expect("written");
        let (objects, ended) = read(&out, Limits::default());
        assert!(ended.is_none(), "{format:?}: {ended:?}");
        by_format.push(objects);
    }
    let values = |objects: &[Object]| objects.iter().map(|o| o.value.clone()).collect::<Vec<_>>();
    assert_eq!(
        values(&by_format[0]),
        values(&by_format[1]),
        "YAML and JSON"
    );
    assert_eq!(
        values(&by_format[0]),
        values(&by_format[2]),
        "List and stream"
    );

    let pod = by_format[0]
        .iter()
        .find(|o| {
            o.kind == "Pod"
                && o.namespace.as_deref() != Some("kube-system")
                && o.value["status"]["phase"] == "Running"
        })
        .expect("a running application pod");
    assert!(pod.value["spec"]["containers"][0].get("env").is_none());
    assert!(pod.value["status"].get("containerStatuses").is_none());
    assert_eq!(
        pod.value["spec"]["volumes"][0]["projected"],
        serde_json::json!({})
    );

    let mut builder = Builder::default();
    for object in by_format.swap_remove(0) {
        builder.add(object);
    }
    let inventory = builder.finish().expect("the dump is valid");
    let report = plan::plan_inventory(inventory, &PlanOptions::default())
        .expect("plans")
        .report;
    assert!(
        report.unschedulable.is_empty(),
        "{} unplaced, first: {:?}",
        report.unschedulable.len(),
        report.unschedulable.first()
    );
    let on_new: usize = report.node_claims.iter().map(|c| c.pods.len()).sum();
    let on_existing: usize = report.existing_nodes.iter().map(|n| n.pods.len()).sum();
    assert!(on_new > 0, "pending pods get NodeClaims");
    // Every pending pod is placed once; the running ones stay where they are.
    assert_eq!(on_new + on_existing, 600 - 120);
}
