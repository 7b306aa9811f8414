//! The upstream Karpenter CRDs applied through the API, then their kinds served with
//! schema defaults, unknown-field rejection and the status subresource.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kerf_loadtest::apiserver::crd::upstream_crd_dir;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::discovery::{Discovery, Scope, pinned_kind};
use kube::runtime::conditions::is_crd_established;
use serde_json::{Value, json};

use crate::support::{code, start, wait_for};

/// Applies the three upstream CRDs (vendored in the repository) and waits until each is
/// established.
pub async fn install_karpenter_crds(client: &kube::Client) {
    let dir = upstream_crd_dir();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for file in [
        "karpenter.sh_nodepools.yaml",
        "karpenter.sh_nodeclaims.yaml",
        "karpenter.k8s.aws_ec2nodeclasses.yaml",
    ] {
        let text = std::fs::read_to_string(dir.join(file)).expect("CRD readable");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).expect("CRD parses");
        let name = crd.metadata.name.clone().expect("named");
        crds.create(&PostParams::default(), &crd)
            .await
            .expect("CRD accepted");
        wait_for(&crds, &name, is_crd_established()).await;
    }
}

fn api_for(client: &kube::Client, gvk: &GroupVersionKind, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(gvk, plural),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn karpenter_crds_are_served_with_defaults_and_strict_fields() {
    let h = start().await;
    install_karpenter_crds(&h.client).await;
    let discovery = Discovery::new(h.client.clone())
        .run()
        .await
        .expect("discovery");
    let group = discovery
        .get("karpenter.sh")
        .expect("karpenter.sh discovered");
    let (nodeclaim, caps) = group
        .recommended_kind("NodeClaim")
        .expect("NodeClaim discovered");
    assert_eq!(nodeclaim.plural, "nodeclaims");
    assert_eq!(caps.scope, Scope::Cluster);
    assert!(
        caps.subresources
            .iter()
            .any(|(sub, _)| sub.plural == "status"),
        "status subresource advertised"
    );
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let (nodepool_ar, _) = pinned_kind(&h.client, &gvk).await.expect("NodePool served");
    let nodepools: Api<DynamicObject> = Api::all_with(h.client.clone(), &nodepool_ar);

    let pool = |extra: Value| {
        let mut p = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "default"},
            "spec": {"template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}}}});
        json_patch::merge(&mut p, &extra);
        serde_json::from_value::<DynamicObject>(p).expect("dynamic object")
    };
    let created = nodepools
        .create(
            &PostParams::default(),
            &pool(json!({"status": {"nodes": 5}})),
        )
        .await
        .expect("NodePool accepted");
    let spec = &created.data["spec"];
    assert_eq!(
        spec["disruption"]["consolidateAfter"], "0s",
        "object default applied"
    );
    assert_eq!(
        spec["disruption"]["consolidationPolicy"], "WhenEmptyOrUnderutilized",
        "default inside an inserted default"
    );
    assert_eq!(spec["disruption"]["budgets"], json!([{"nodes": "10%"}]));
    assert_eq!(spec["template"]["spec"]["expireAfter"], "720h");
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create with a status subresource"
    );
    assert_eq!(created.metadata.generation, Some(1));

    for (extra, field) in [
        (
            json!({"metadata": {"name": "bad1"}, "spec": {"bogus": true}}),
            "spec.bogus",
        ),
        (
            json!({"metadata": {"name": "bad2"}, "spec": {"template": {"spec": {"requirements": [{"key": "k", "operator": "In", "oops": 1}]}}}}),
            "spec.template.spec.requirements[0].oops",
        ),
    ] {
        let err = nodepools
            .create(&PostParams::default(), &pool(extra))
            .await
            .expect_err("unknown field rejected");
        assert_eq!(code(&err), 400);
        let kube::Error::Api(status) = err else {
            unreachable!()
        };
        assert!(
            status.message.contains(field),
            "{} should name {field}",
            status.message
        );
    }
    let wrong_type = nodepools
        .create(
            &PostParams::default(),
            &pool(json!({"metadata": {"name": "bad3"}, "spec": {"weight": "heavy"}})),
        )
        .await
        .expect_err("type checked");
    assert_eq!(code(&wrong_type), 422);
    let kube::Error::Api(status) = wrong_type else {
        unreachable!()
    };
    assert!(status.message.contains("spec.weight"), "{}", status.message);
    // Metadata-only extras such as annotations are fine; so is preserve-unknown content.
    let pp = PatchParams::default();
    let status_patch = Patch::Merge(
        json!({"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
        "lastTransitionTime": "2024-01-01T00:00:00Z"}], "resources": {"cpu": "4"}}}),
    );
    let with_status = nodepools
        .patch_status("default", &pp, &status_patch)
        .await
        .expect("status patch");
    assert_eq!(with_status.data["status"]["resources"]["cpu"], "4");
    assert_eq!(
        with_status.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    let spec_patch = nodepools
        .patch(
            "default",
            &pp,
            &Patch::Merge(json!({"spec": {"weight": 10}, "status": {"resources": {}}})),
        )
        .await
        .expect("spec patch");
    assert_eq!(spec_patch.metadata.generation, Some(2));
    assert_eq!(
        spec_patch.data["status"]["resources"]["cpu"], "4",
        "main endpoint ignores status"
    );
    let strategic = nodepools
        .patch(
            "default",
            &pp,
            &Patch::Strategic(json!({"spec": {"weight": 1}})),
        )
        .await
        .expect_err("no strategic merge for CRs");
    assert_eq!(code(&strategic), 415);
    h.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_example_is_accepted() {
    let h = start().await;
    install_karpenter_crds(&h.client).await;
    let examples = upstream_crd_dir().join("../examples");
    let mut applied = 0;
    let mut files: Vec<_> = std::fs::read_dir(&examples)
        .expect("examples dir")
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).expect("readable");
        let docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("example parses");
        for doc in docs.into_iter().filter(|d| d.is_object()) {
            let kind = doc["kind"].as_str().unwrap_or_default().to_string();
            let (gvk, plural) = match kind.as_str() {
                "NodePool" => (
                    GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool"),
                    "nodepools",
                ),
                "EC2NodeClass" => (
                    GroupVersionKind::gvk("karpenter.k8s.aws", "v1", "EC2NodeClass"),
                    "ec2nodeclasses",
                ),
                _ => continue,
            };
            let api = api_for(&h.client, &gvk, plural);
            let name = doc["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            // Several examples reuse a name; apply them as the same object, like kubectl apply.
            let params = PatchParams::apply("examples").force();
            let result = api.patch(&name, &params, &Patch::Apply(&doc)).await;
            if let Err(err) = result {
                panic!("{} {kind}/{name} rejected: {err}", path.display());
            }
            applied += 1;
        }
    }
    assert!(applied >= 10, "applied {applied} example objects");
    h.stop().await;
}

/// The NodePool CRD's scale subresource reads and writes where the CRD says
/// (`.spec.replicas`, `.status.nodes`), and the CRD's CEL rules hold on every write: a
/// static pool may not have a weight or limits other than `nodes`, and no pool turns from
/// static to dynamic or back, by a patch or through `/scale`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodepool_scale_subresource_and_cel_rules() {
    let h = start().await;
    install_karpenter_crds(&h.client).await;
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    let pools = api_for(&h.client, &gvk, "nodepools");
    let pool = |name: &str, extra: Value| {
        let mut spec = json!({"template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": []}}});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
            "metadata": {"name": name}, "spec": spec}))
        .expect("a NodePool");
        object
    };
    pools
        .create(
            &PostParams::default(),
            &pool("fixed", json!({"replicas": 2})),
        )
        .await
        .expect("a static pool");
    pools
        .create(&PostParams::default(), &pool("dynamic", json!({})))
        .await
        .expect("a dynamic pool");
    let refused = pools
        .create(
            &PostParams::default(),
            &pool("weighted", json!({"replicas": 1, "weight": 5})),
        )
        .await
        .expect_err("weight on a static pool");
    assert_eq!(code(&refused), 422, "{refused}");
    assert!(
        refused
            .to_string()
            .contains("'weight' is not supported on static NodePools")
    );
    let refused = pools
        .create(
            &PostParams::default(),
            &pool(
                "cpu",
                json!({"replicas": 1, "limits": {"cpu": "4", "nodes": "3"}}),
            ),
        )
        .await
        .expect_err("cpu limits on a static pool");
    assert!(
        refused
            .to_string()
            .contains("only 'limits.nodes' is supported")
    );

    // Status nodes count: what `/scale` reports as status.replicas.
    pools
        .patch_status(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"nodes": 2}})),
        )
        .await
        .expect("status written");
    let scale = pools.get_scale("fixed").await.expect("scale read");
    assert_eq!(scale.spec.and_then(|s| s.replicas), Some(2));
    assert_eq!(scale.status.map(|s| s.replicas), Some(2));
    let scaled = pools
        .patch_scale(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 5}})),
        )
        .await
        .expect("scaled");
    assert_eq!(scaled.spec.and_then(|s| s.replicas), Some(5));
    let read = pools.get("fixed").await.expect("read");
    assert_eq!(read.data["spec"]["replicas"], 5);

    let to_static = pools
        .patch_scale(
            "dynamic",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .expect_err("a dynamic pool is not scaled");
    assert_eq!(code(&to_static), 422, "{to_static}");
    assert!(to_static.to_string().contains("Cannot transition NodePool"));
    let to_dynamic = pools
        .patch(
            "fixed",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": null}})),
        )
        .await
        .expect_err("a static pool stays static");
    assert!(
        to_dynamic
            .to_string()
            .contains("Cannot transition NodePool")
    );
    h.stop().await;
}
