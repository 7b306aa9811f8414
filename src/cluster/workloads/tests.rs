use super::*;
use crate::cluster::decode::decode;
use serde_json::{Value, json};

fn template(labels: Value) -> Value {
    json!({
        "metadata": {"labels": labels, "annotations": {"team": "a"}},
        "spec": {"containers": [{"name": "app", "image": "pause",
            "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "1Gi"}}}]}
    })
}

fn deployment(replicas: Value) -> Deployment {
    decode(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop"},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                 "template": template(json!({"app": "web"}))}
    }))
    .expect("valid deployment")
}

fn names(pods: &[Pod]) -> Vec<String> {
    pods.iter()
        .map(|p| p.metadata.name.clone().expect("named"))
        .collect()
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

#[test]
fn deployment_creates_its_replicas_named_by_index() {
    let expansion = expand_deployment(&deployment(json!(3))).expect("expands");
    assert_eq!(names(&expansion.pods), ["web-0", "web-1", "web-2"]);
    for pod in &expansion.pods {
        assert_eq!(pod.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(label(pod, "app"), Some("web"));
        assert_eq!(
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("team"))
                .map(String::as_str),
            Some("a")
        );
        let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(owner.kind, "ReplicaSet");
        assert!(owner.name.starts_with("web-"), "{}", owner.name);
        assert_eq!(owner.controller, Some(true));
        let hash = label(pod, labels::POD_TEMPLATE_HASH).expect("hash label");
        assert_eq!(owner.name, format!("web-{hash}"));
    }
}

#[test]
fn deployment_replicas_default_to_one_and_zero_creates_none() {
    assert_eq!(
        expand_deployment(&deployment(Value::Null))
            .expect("expands")
            .pods
            .len(),
        1
    );
    assert!(
        expand_deployment(&deployment(json!(0)))
            .expect("expands")
            .pods
            .is_empty()
    );
}

#[test]
fn negative_replicas_are_rejected() {
    let error = expand_deployment(&deployment(json!(-1))).expect_err("negative");
    assert_eq!(error.path, "spec.replicas");
}

#[test]
fn limits_become_requests_where_no_request_is_set() {
    let pods = expand_deployment(&deployment(json!(1)))
        .expect("expands")
        .pods;
    let resources = pods[0].spec.as_ref().expect("spec").containers[0]
        .resources
        .as_ref()
        .expect("resources");
    let requests = resources.requests.as_ref().expect("requests");
    assert_eq!(requests["cpu"].0, "500m", "an explicit request is kept");
    assert_eq!(
        requests["memory"].0, "1Gi",
        "a limit without request becomes the request"
    );
}

#[test]
fn the_template_hash_follows_the_template() {
    let a = expand_deployment(&deployment(json!(1))).expect("expands");
    let mut changed = deployment(json!(1));
    changed
        .spec
        .as_mut()
        .expect("spec")
        .template
        .metadata
        .as_mut()
        .expect("meta")
        .labels
        .as_mut()
        .expect("labels")
        .insert("version".into(), "2".into());
    let b = expand_deployment(&changed).expect("expands");
    let hash = |e: &Expansion| label(&e.pods[0], labels::POD_TEMPLATE_HASH).map(str::to_string);
    assert_eq!(
        hash(&a),
        hash(&expand_deployment(&deployment(json!(1))).expect("expands"))
    );
    assert_ne!(hash(&a), hash(&b));
}

#[test]
fn a_selector_that_misses_the_template_is_rejected() {
    let mut d = deployment(json!(1));
    d.spec.as_mut().expect("spec").selector.match_labels =
        Some([("app".to_string(), "api".to_string())].into());
    let error = expand_deployment(&d).expect_err("mismatch");
    assert_eq!(error.path, "spec.template.metadata.labels");
}

#[test]
fn a_bad_template_quantity_is_reported_at_its_template_path() {
    let mut d = deployment(json!(0));
    let spec = d
        .spec
        .as_mut()
        .expect("spec")
        .template
        .spec
        .as_mut()
        .expect("pod spec");
    spec.containers[0]
        .resources
        .as_mut()
        .expect("resources")
        .requests
        .as_mut()
        .expect("requests")
        .insert(
            "cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1x".into()),
        );
    let error = expand_deployment(&d).expect_err("bad quantity, even with no replicas");
    assert_eq!(
        error.path,
        "spec.template.spec.containers[0].resources.requests.cpu"
    );
}

#[test]
fn a_nameless_workload_is_rejected() {
    let mut d = deployment(json!(1));
    d.metadata.name = None;
    assert_eq!(
        expand_deployment(&d).expect_err("no name").path,
        "metadata.name"
    );
}

#[test]
fn replica_set_pods_are_owned_by_the_replica_set() {
    let rs: ReplicaSet = decode(json!({
        "metadata": {"name": "api"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "api"}}, "template": template(json!({"app": "api"}))}
    }))
    .expect("valid");
    let pods = expand_replica_set(&rs).expect("expands").pods;
    assert_eq!(names(&pods), ["api-0", "api-1"]);
    assert_eq!(
        pods[0].metadata.namespace.as_deref(),
        Some(DEFAULT_NAMESPACE)
    );
    let owner = &pods[0].metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("ReplicaSet", "api")
    );
}

fn stateful_set(extra_spec: Value) -> StatefulSet {
    let mut spec = json!({
        "replicas": 2, "serviceName": "db",
        "selector": {"matchLabels": {"app": "db"}},
        "template": template(json!({"app": "db"})),
        "volumeClaimTemplates": [
            {"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": "gp3",
                "resources": {"requests": {"storage": "10Gi"}}}},
            {"metadata": {"name": "logs"}, "spec": {"resources": {"requests": {"storage": "1Gi"}}}}
        ]
    });
    if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra_spec) {
        spec.extend(extra);
    }
    decode(json!({"metadata": {"name": "pg", "namespace": "data"}, "spec": spec})).expect("valid")
}

#[test]
fn stateful_set_pods_get_stable_identities_and_claims() {
    let expansion = expand_stateful_set(&stateful_set(json!({}))).expect("expands");
    assert_eq!(names(&expansion.pods), ["pg-0", "pg-1"]);
    let pod = &expansion.pods[1];
    assert_eq!(label(pod, labels::STATEFULSET_POD_NAME), Some("pg-1"));
    assert_eq!(label(pod, labels::POD_INDEX), Some("1"));
    let spec = pod.spec.as_ref().expect("spec");
    assert_eq!(spec.hostname.as_deref(), Some("pg-1"));
    assert_eq!(spec.subdomain.as_deref(), Some("db"));
    let claims: Vec<_> = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| {
            Some((
                v.name.as_str(),
                v.persistent_volume_claim.as_ref()?.claim_name.as_str(),
            ))
        })
        .collect();
    assert_eq!(claims, [("data", "data-pg-1"), ("logs", "logs-pg-1")]);
    let claim_names: Vec<_> = expansion
        .claims
        .iter()
        .map(|c| c.metadata.name.clone().expect("named"))
        .collect();
    assert_eq!(
        claim_names,
        ["data-pg-0", "logs-pg-0", "data-pg-1", "logs-pg-1"]
    );
    let claim = &expansion.claims[0];
    assert_eq!(claim.metadata.namespace.as_deref(), Some("data"));
    assert_eq!(
        claim
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app"))
            .map(String::as_str),
        Some("db")
    );
    assert_eq!(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.storage_class_name.as_deref()),
        Some("gp3")
    );
    let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("StatefulSet", "pg")
    );
}

#[test]
fn stateful_set_ordinals_start_where_asked() {
    let expansion =
        expand_stateful_set(&stateful_set(json!({"ordinals": {"start": 5}}))).expect("expands");
    assert_eq!(names(&expansion.pods), ["pg-5", "pg-6"]);
    assert_eq!(
        expansion.claims[0].metadata.name.as_deref(),
        Some("data-pg-5")
    );
}

#[test]
fn a_claim_template_replaces_the_template_volume_of_its_name() {
    let mut sts = stateful_set(json!({}));
    let spec = sts
        .spec
        .as_mut()
        .expect("spec")
        .template
        .spec
        .as_mut()
        .expect("pod spec");
    spec.volumes = Some(vec![Volume {
        name: "data".into(),
        ..Default::default()
    }]);
    let pods = expand_stateful_set(&sts).expect("expands").pods;
    let volumes = pods[0]
        .spec
        .as_ref()
        .expect("spec")
        .volumes
        .as_ref()
        .expect("volumes");
    let data: Vec<_> = volumes.iter().filter(|v| v.name == "data").collect();
    assert_eq!(data.len(), 1);
    assert!(data[0].persistent_volume_claim.is_some());
}

#[test]
fn a_nameless_claim_template_is_rejected() {
    let mut sts = stateful_set(json!({}));
    sts.spec
        .as_mut()
        .expect("spec")
        .volume_claim_templates
        .as_mut()
        .expect("templates")[1]
        .metadata
        .name = None;
    let error = expand_stateful_set(&sts).expect_err("nameless");
    assert_eq!(error.path, "spec.volumeClaimTemplates[1].metadata.name");
}

fn job(spec: Value) -> Job {
    let mut full = json!({"template": {"spec": {"restartPolicy": "Never",
        "containers": [{"name": "train", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}});
    if let (Some(full), Value::Object(extra)) = (full.as_object_mut(), spec) {
        full.extend(extra);
    }
    decode(json!({"metadata": {"name": "train"}, "spec": full})).expect("valid job")
}

#[test]
fn job_runs_parallelism_pods_capped_by_completions() {
    assert_eq!(
        names(&expand_job(&job(json!({}))).expect("expands").pods),
        ["train-0"]
    );
    assert_eq!(
        expand_job(&job(json!({"parallelism": 4})))
            .expect("expands")
            .pods
            .len(),
        4
    );
    assert_eq!(
        expand_job(&job(json!({"parallelism": 4, "completions": 2})))
            .expect("expands")
            .pods
            .len(),
        2
    );
    assert_eq!(
        expand_job(&job(json!({"completions": 3})))
            .expect("expands")
            .pods
            .len(),
        1
    );
    assert!(
        expand_job(&job(json!({"parallelism": 3, "suspend": true})))
            .expect("expands")
            .pods
            .is_empty()
    );
    assert_eq!(
        expand_job(&job(json!({"parallelism": -2})))
            .expect_err("negative")
            .path,
        "spec.parallelism"
    );
}

#[test]
fn job_pods_carry_job_labels_and_gpu_requests() {
    let pods = expand_job(&job(json!({"parallelism": 2, "completionMode": "Indexed"})))
        .expect("expands")
        .pods;
    let pod = &pods[1];
    assert_eq!(label(pod, labels::JOB_NAME), Some("train"));
    assert_eq!(label(pod, labels::JOB_NAME_LEGACY), Some("train"));
    assert_eq!(label(pod, labels::JOB_COMPLETION_INDEX), Some("1"));
    assert!(label(pod, labels::JOB_CONTROLLER_UID).is_some());
    let requests = pod.spec.as_ref().expect("spec").containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .expect("requests");
    assert_eq!(requests["nvidia.com/gpu"].0, "1");
    let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(
        (owner.api_version.as_str(), owner.kind.as_str()),
        ("batch/v1", "Job")
    );
}

#[test]
fn daemon_pod_is_named_after_its_daemon_set_and_owned_by_it() {
    let ds: DaemonSet = decode(json!({
        "metadata": {"name": "fluentbit", "namespace": "logging"},
        "spec": {"selector": {"matchLabels": {"app": "fb"}}, "template": template(json!({"app": "fb"}))}
    }))
    .expect("valid");
    let pod = daemon_pod(&ds).expect("expands");
    assert_eq!(pod.metadata.name.as_deref(), Some("fluentbit"));
    assert_eq!(pod.metadata.namespace.as_deref(), Some("logging"));
    let owner = &pod.metadata.owner_references.as_ref().expect("owned")[0];
    assert_eq!(owner.kind, "DaemonSet");
    let requests = pod.spec.as_ref().expect("spec").containers[0]
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .expect("requests");
    assert_eq!(requests["memory"].0, "1Gi");
}
