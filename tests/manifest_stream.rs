//! The manifest reader at the size of real cluster dumps: 100,000 objects in one YAML
//! stream, one YAML `List` or one JSON `List`, read without a hidden ceiling; the node limit
//! that remains is per document and reported in kerf's words; and a realistic `kubectl`
//! dump reads alike in YAML and JSON and plans.

use std::io::Write;

use kerf::cluster::inventory::Builder;
use kerf::manifest::{self, Limits, ManifestError, Object, stream};
use kerf::plan::fixtures::{self, DumpFormat, DumpShape};
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

/// Every object was read, in input order (items are parsed on several threads).
fn assert_all_read(objects: &[Object]) {
    assert_eq!(objects.len(), OBJECTS);
    for (index, object) in objects.iter().enumerate() {
        assert_eq!(object.name.as_deref(), Some(format!("p-{index}").as_str()));
    }
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
        ..Limits::default()
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

#[test]
fn typed_pods_read_as_the_value_path_reads_them_and_plan_alike() {
    let shape = DumpShape {
        pods: 600,
        running_percent: 20,
    };
    let typed = Limits {
        typed_pods: true,
        ..Limits::default()
    };
    for format in [DumpFormat::Yaml, DumpFormat::Json] {
        let mut out = Vec::new();
        fixtures::write(fixtures::objects(shape), format, &mut out).expect("written");
        let (as_values, _) = read(&out, Limits::default());
        let (as_typed, ended) = read(&out, typed);
        assert!(ended.is_none(), "{format:?}: {ended:?}");
        assert_eq!(as_values.len(), as_typed.len(), "{format:?}");
        let mut pods = 0;
        for (value, typed) in as_values.iter().zip(&as_typed) {
            assert_eq!(
                (&typed.display_name(), &typed.namespace, &typed.source),
                (&value.display_name(), &value.namespace, &value.source)
            );
            match &typed.pod {
                Some(pod) => {
                    pods += 1;
                    let via_value: k8s_openapi::api::core::v1::Pod =
                        serde_json::from_value(value.value.clone()).expect("a pod");
                    assert_eq!(**pod, via_value, "{format:?}: {}", value.display_name());
                }
                None => assert_eq!(typed.value, value.value),
            }
        }
        let given = as_values.iter().filter(|o| o.kind == "Pod").count();
        assert_eq!(
            pods, given,
            "{format:?}: every pod of the List is read typed"
        );
        let plan = |objects: Vec<Object>| {
            let mut builder = Builder::default();
            objects.into_iter().for_each(|object| builder.add(object));
            let inventory = builder.finish().expect("the dump is valid");
            plan::plan_inventory(inventory, &PlanOptions::default()).expect("plans")
        };
        assert_eq!(plan(as_typed), plan(as_values), "{format:?}");
    }
}

#[test]
fn broken_pods_read_typed_are_reported_as_before() {
    let pod = |name: &str, spec: serde_json::Value| {
        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "managedFields": [{"manager": "m"}]}, "spec": spec})
    };
    let container = |resources: serde_json::Value| {
        serde_json::json!({"containers": [{"name": "c", "env": [{"name": "E"}],
            "resources": resources}]})
    };
    let broken = [
        serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "no-spec"}}),
        pod("null-spec", serde_json::Value::Null),
        pod("", container(serde_json::json!({}))),
        pod("containers-text", serde_json::json!({"containers": "x"})),
        pod(
            "bad-cpu",
            container(serde_json::json!({"requests": {"cpu": "lots"}})),
        ),
        pod(
            "port-text",
            serde_json::json!({"containers": [{"name": "c",
            "ports": [{"containerPort": "http"}]}]}),
        ),
        pod(
            "good",
            container(serde_json::json!({"requests": {"cpu": "1"}})),
        ),
    ];
    for format in [DumpFormat::Yaml, DumpFormat::Json] {
        let mut out = Vec::new();
        fixtures::write(broken.iter().cloned(), format, &mut out).expect("written");
        let problems = |limits: Limits| {
            let (objects, ended) = read(&out, limits);
            assert!(ended.is_none(), "{ended:?}");
            let mut builder = Builder::default();
            objects.into_iter().for_each(|object| builder.add(object));
            let problems = builder.finish().expect_err("broken pods");
            problems.iter().map(ToString::to_string).collect::<Vec<_>>()
        };
        let before = problems(Limits::default());
        assert_eq!(before.len(), broken.len() - 1, "{format:?}: {before:#?}");
        let typed = Limits {
            typed_pods: true,
            ..Limits::default()
        };
        assert_eq!(problems(typed), before, "{format:?}");
    }
}

/// Every object of a YAML text, or the error that ended it.
fn read_text(text: &str) -> Result<Vec<Object>, ManifestError> {
    let mut objects = Vec::new();
    stream::read(
        text.as_bytes(),
        "t.yaml",
        Limits::default(),
        &mut |object| objects.push(object),
    )?;
    objects.into_iter().collect()
}

/// A `List`'s items as serde-saphyr reads the whole document.
fn whole_items(text: &str) -> Vec<serde_json::Value> {
    let document: serde_json::Value = serde_saphyr::from_str(text).expect("valid YAML");
    document["items"].as_array().expect("items").clone()
}

#[test]
fn lists_read_item_by_item_as_the_whole_document_reads() {
    let lists = [
        // Block scalars holding what looks like item starts, markers and keys.
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: a}\n  data:\n    s: |\n      - not an item\n      --- not a marker\n      items:\n\n      x\n    f: >-\n      folded\n      text\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n",
        // Flow style items, a multi-line flow item and comments between items.
        "kind: List\napiVersion: v1\nitems:\n# first\n- {apiVersion: v1, kind: Pod, metadata: {name: a}}\n# second, at column 0\n- {apiVersion: v1, kind: Pod,\n   metadata: {name: b}}   # trailing\n\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: c\n    annotations: {x: \"a # not a comment\", y: '- z'}\nmetadata:\n  resourceVersion: \"\"\n",
        // Indented items, and the List's own fields after them.
        "apiVersion: v1\nitems:\n  - apiVersion: v1\n    kind: Pod\n    metadata:\n      name: a\n  -   apiVersion: v1\n      kind: Pod\n      metadata: {name: b}\nkind: List\n",
        // An anchor and its alias inside one item; a multi-line plain scalar.
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata:\n    name: a\n    labels: &l {app: a}\n    annotations: *l\n  spec:\n    note: one\n      two\n",
    ];
    for text in lists {
        let objects = read_text(text).expect("reads");
        let values: Vec<_> = objects.iter().map(|o| o.value.clone()).collect();
        assert_eq!(values, whole_items(text), "{text}");
        // CRLF line ends read alike, at the same lines.
        let crlf = read_text(&text.replace('\n', "\r\n")).expect("reads with CRLF");
        let lines = |objects: &[Object]| objects.iter().map(|o| o.source.line).collect::<Vec<_>>();
        assert_eq!(lines(&crlf), lines(&objects), "{text}");
        assert_eq!(
            crlf.iter().map(|o| &o.value).collect::<Vec<_>>(),
            values.iter().collect::<Vec<_>>()
        );
    }
}

#[test]
fn items_and_documents_keep_their_lines() {
    let text = "# dump\n---\napiVersion: v1\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a}\n\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\nkind: List\n---\napiVersion: v1\nkind: Node\nmetadata: {name: node-1}\n";
    let objects = read_text(text).expect("reads");
    let found: Vec<_> = objects
        .iter()
        .map(|o| (o.display_name(), o.source.document, o.source.line))
        .collect();
    assert_eq!(
        found,
        [
            ("Pod/a".to_owned(), 1, Some(5)),
            ("Pod/b".to_owned(), 1, Some(9)),
            ("Node/node-1".to_owned(), 2, Some(14)),
        ]
    );
}

#[test]
fn errors_inside_items_and_after_them_name_the_inputs_line() {
    let list = |tail: &str| {
        format!(
            "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {{name: a}}\n{tail}"
        )
    };
    let unclosed = read_text(&list(
        "- apiVersion: v1\n  kind: Pod\n  metadata: {name: [b}\n",
    ))
    .expect_err("an unclosed bracket");
    assert!(
        matches!(unclosed, ManifestError::Parse { line: Some(9), .. }),
        "{unclosed:?}"
    );
    assert!(unclosed.to_string().starts_with("t.yaml:9: "), "{unclosed}");
    // Lines the parser names inside its message are the input's too.
    assert!(
        unclosed.to_string().contains("at line 9, column 20"),
        "{unclosed}"
    );

    let duplicate = read_text(&list("- apiVersion: v1\n  kind: Pod\n  kind: Node\n"))
        .expect_err("a duplicate key");
    assert!(
        matches!(duplicate, ManifestError::DuplicateKey { line: 9, .. }),
        "{duplicate:?}"
    );

    let after = read_text(&list("metadata: {resourceVersion: [}\n")).expect_err("after the items");
    assert!(
        matches!(after, ManifestError::Parse { line: Some(7), .. }),
        "{after:?}"
    );
}

/// Items are parsed on several threads while the input is cut further: a broken item still
/// ends the stream where it is, after every object before it and none after it, even when
/// the input is broken again further on.
#[test]
fn a_broken_item_ends_the_stream_there_whatever_follows() {
    let mut yaml = String::from("apiVersion: v1\nkind: List\nitems:\n");
    for index in 0..300 {
        yaml.push_str(&format!(
            "- apiVersion: v1\n  kind: Pod\n  metadata: {{name: p-{index}}}\n"
        ));
        if index == 200 {
            yaml.push_str("- apiVersion: v1\n  kind: Pod\n  metadata: {name: [b}\n");
        }
    }
    let mut bytes = yaml.into_bytes();
    bytes.extend_from_slice(b"- apiVersion: v1\n  kind: Pod\n  metadata: {name: \xff}\n");
    let mut names = Vec::new();
    let error = stream::read(bytes.as_slice(), "t.yaml", Limits::default(), &mut |o| {
        names.push(o.expect("objects before the broken item read").name)
    })
    .expect_err("the broken item");
    assert_eq!(names.len(), 201, "{error}");
    assert_eq!(names[200].as_deref(), Some("p-200"));
    assert!(error.to_string().starts_with("t.yaml:609: "), "{error}");

    let mut json = String::from("{\"apiVersion\": \"v1\", \"kind\": \"List\", \"items\": [\n");
    for index in 0..300 {
        let item = if index == 200 {
            "{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {\"name\": 7 7}},\n"
                .to_owned()
        } else {
            format!(
                "{{\"apiVersion\": \"v1\", \"kind\": \"Pod\", \"metadata\": {{\"name\": \"p-{index}\"}}}},\n"
            )
        };
        json.push_str(&item);
    }
    json.push_str("{\"apiVersion\": \"v1\"} {\n");
    let mut names = Vec::new();
    let error = stream::read(json.as_bytes(), "t.json", Limits::default(), &mut |o| {
        names.push(o.expect("objects before the broken item read").name)
    })
    .expect_err("the broken item");
    assert_eq!(names.len(), 200, "{error}");
    assert!(error.to_string().starts_with("t.json:202: "), "{error}");
}

#[test]
fn an_alias_to_another_items_anchor_is_a_clear_error() {
    let text = "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: a, labels: &l {app: a}}\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b, labels: *l}\n";
    let error = read_text(text).expect_err("the anchor is in another item");
    let message = error.to_string();
    assert!(message.starts_with("t.yaml:9: "), "{message}");
    assert!(message.contains("anchor in another item"), "{message}");
}

#[test]
fn a_top_level_items_list_outside_a_list_is_still_reported() {
    let text = "apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nitems:\n- apiVersion: v1\n  kind: Pod\n  metadata: {name: b}\n";
    let mut results = Vec::new();
    stream::read(text.as_bytes(), "t.yaml", Limits::default(), &mut |o| {
        results.push(o)
    })
    .expect("reads");
    assert_eq!(results.len(), 2);
    assert_eq!(
        results[0].as_ref().expect("the item").display_name(),
        "Pod/b"
    );
    let problem = results[1].as_ref().expect_err("the document").to_string();
    assert_eq!(
        problem,
        "t.yaml:1: a top-level items list is only read in a kind List (found kind Pod)"
    );
}
