//! Launch templates and CreateFleet launches against moto: creation, reuse and deletion of
//! templates, the user data they carry, the tags and overrides of launched instances (the
//! NodeClaim's among them, set by the launch itself), a repeated client token answered
//! with the first launch's instance, and Get / List / terminate / garbage collection of
//! instances. moto ignores CreateFleet's ClientToken; the tests' launcher makes it answer a
//! repeated token as EC2 does (`aws/src/moto/launcher.py`).

use crate::support::*;
use base64::Engine;
use kerf_aws::clients::AwsClients;
use kerf_aws::fleet::{FleetRequest, LaunchCandidate, MAX_INSTANCE_TYPES, launch_configs};
use kerf_aws::instance::{InstanceError, InstanceProvider};
use kerf_aws::launchtemplate::{LaunchTemplateConfig, LaunchTemplateProvider};
use kerf_aws::selectors::SelectorTerm;
use kerf_aws::subnet::SubnetProvider;
use kerf_aws::tags::launch_tags;
use kerf_aws::userdata::{self, BootstrapOptions, UserDataFormat, mime};
use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

struct Env {
    c: AwsClients,
    cluster: String,
    subnets: Vec<kerf_aws::subnet::SubnetInfo>,
    security_group: String,
    ami: String,
}

async fn env() -> Env {
    let c = clients().await;
    let cluster = unique("cluster");
    let vpc = vpc().await;
    subnet(&vpc, "us-east-1a", 1, &[("discovery", &cluster)]).await;
    subnet(&vpc, "us-east-1b", 2, &[("discovery", &cluster)]).await;
    let security_group = security_group(&vpc, &unique("nodes"), &[("discovery", &cluster)]).await;
    let ami = image(&unique("node"), "x86_64", "2024-05-01T00:00:00Z", &[]).await;
    let subnets = SubnetProvider::new(c.ec2.clone())
        .list(&[SelectorTerm::by_tags([("discovery", cluster.as_str())])])
        .await
        .expect("listing the test's subnets");
    Env {
        c,
        cluster,
        subnets,
        security_group,
        ami,
    }
}

fn user_data(cluster: &str) -> String {
    let opts = BootstrapOptions {
        cluster_name: cluster.to_owned(),
        cluster_endpoint: "https://cluster.example".into(),
        cluster_cidr: Some("10.100.0.0/16".into()),
        ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
        labels: BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]),
        ..BootstrapOptions::default()
    };
    userdata::render(UserDataFormat::Al2023, &opts).expect("AL2023 user data renders")
}

fn template_config(e: &Env, node_class: &str) -> LaunchTemplateConfig {
    LaunchTemplateConfig {
        node_class: node_class.to_owned(),
        ami_id: e.ami.clone(),
        user_data: user_data(&e.cluster),
        security_group_ids: vec![e.security_group.clone()],
        capacity_type: "on-demand".into(),
        tags: launch_tags(
            &e.cluster,
            "default",
            node_class,
            &BTreeMap::from([("team".into(), "data".into())]),
        ),
        ..LaunchTemplateConfig::default()
    }
}

#[tokio::test]
async fn launch_templates_are_created_once_reused_and_deleted_with_their_node_class() {
    let e = env().await;
    let provider = LaunchTemplateProvider::new(e.c.ec2.clone(), &e.cluster);
    let config = template_config(&e, "default");
    let (a, b) = tokio::join!(provider.ensure(&config), provider.ensure(&config));
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a, b, "concurrent launches share one template");
    assert_eq!(a.name, config.name());

    // A fresh provider (a restart) finds the template in EC2 instead of creating another.
    let restarted = LaunchTemplateProvider::new(e.c.ec2.clone(), &e.cluster);
    assert_eq!(restarted.ensure(&config).await.unwrap().id, a.id);

    // What was sent: the user data decodes to the MIME archive with the NodeConfig.
    let versions = setup_clients()
        .await
        .ec2
        .describe_launch_template_versions()
        .launch_template_id(&a.id)
        .send()
        .await
        .unwrap();
    let data = versions.launch_template_versions()[0]
        .launch_template_data()
        .unwrap();
    assert_eq!(data.image_id(), Some(e.ami.as_str()));
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(data.user_data().unwrap())
        .unwrap();
    let parts = mime::parse(std::str::from_utf8(&decoded).unwrap()).unwrap();
    let node_config: serde_json::Value =
        serde_saphyr::from_str(&parts.last().unwrap().body).unwrap();
    assert_eq!(node_config["spec"]["cluster"]["name"], e.cluster.as_str());

    let mut other = template_config(&e, "default");
    other.detailed_monitoring = true;
    let second = provider.ensure(&other).await.unwrap();
    assert_ne!(second.id, a.id);

    let mut deleted = provider.delete_all("default").await.unwrap();
    deleted.sort();
    let mut expected = vec![a.name.clone(), second.name.clone()];
    expected.sort();
    assert_eq!(deleted, expected);
    let gone = setup_clients()
        .await
        .ec2
        .describe_launch_templates()
        .launch_template_names(&a.name)
        .send()
        .await;
    assert!(gone.is_err() || gone.unwrap().launch_templates().is_empty());
}

#[tokio::test]
async fn unused_templates_are_deleted_when_they_expire() {
    let e = env().await;
    let provider = LaunchTemplateProvider::with_ttl(e.c.ec2.clone(), &e.cluster, Duration::ZERO);
    let created = provider
        .ensure(&template_config(&e, "expiring"))
        .await
        .unwrap();
    assert_eq!(
        provider.evict_expired().await.unwrap(),
        vec![created.name.clone()]
    );
    let remaining = setup_clients()
        .await
        .ec2
        .describe_launch_templates()
        .launch_template_ids(&created.id)
        .send()
        .await;
    assert!(remaining.is_err() || remaining.unwrap().launch_templates().is_empty());
}

async fn launch(
    e: &Env,
    instances: &InstanceProvider,
    node_claim: &str,
) -> kerf_aws::fleet::FleetOutcome {
    launch_with_token(e, instances, node_claim, &unique("token"))
        .await
        .expect("CreateFleet succeeds")
}

async fn launch_with_token(
    e: &Env,
    instances: &InstanceProvider,
    node_claim: &str,
    token: &str,
) -> Result<kerf_aws::fleet::FleetOutcome, InstanceError> {
    let lt = LaunchTemplateProvider::new(e.c.ec2.clone(), &e.cluster)
        .ensure(&template_config(e, "default"))
        .await
        .expect("the launch template exists");
    let zonal = SubnetProvider::new(e.c.ec2.clone()).zonal_subnets_for_launch(&e.subnets, |_| 10);
    let candidates: Vec<LaunchCandidate> = [
        ("m5.large", 0.096),
        ("c5.large", 0.085),
        ("m5.xlarge", 0.192),
    ]
    .iter()
    .flat_map(|(t, price)| {
        ["us-east-1a", "us-east-1b"].map(|zone| LaunchCandidate {
            instance_type: (*t).into(),
            zone: zone.into(),
            price: *price,
            launch_template: lt.name.clone(),
            image_id: e.ami.clone(),
            reservation_id: None,
        })
    })
    .collect();
    let request = FleetRequest {
        capacity_type: "on-demand".into(),
        configs: launch_configs(&candidates, &zonal, MAX_INSTANCE_TYPES),
        tags: launch_tags(
            &e.cluster,
            "default",
            "default",
            &BTreeMap::from([("team".into(), "data".into())]),
        ),
        context: None,
        reservation: None,
    };
    // Cheapest first: moto launches the first override.
    assert_eq!(request.configs[0].overrides[0].instance_type, "c5.large");
    instances.launch(&request, node_claim, token).await
}

#[tokio::test]
async fn create_fleet_launches_tagged_instances_that_get_list_and_terminate_find() {
    let e = env().await;
    let instances = InstanceProvider::new(e.c.ec2.clone(), &e.cluster);
    let outcome = launch(&e, &instances, "default-abcde").await;
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    let launched = outcome.instance.expect("an instance was launched");
    assert_eq!(launched.instance_type, "c5.large");
    assert_eq!(launched.zone, "us-east-1a");
    assert_eq!(launched.image_id.as_deref(), Some(e.ami.as_str()));

    let got = instances.get(&launched.instance_id).await.unwrap();
    assert_eq!(got.instance_type, "c5.large");
    assert_eq!(got.image_id.as_deref(), Some(e.ami.as_str()));
    assert_eq!(got.subnet_id, launched.subnet_id);
    assert_eq!(got.capacity_type, "on-demand");
    for (k, v) in [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.sh/nodeclaim", "default-abcde"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", e.cluster.as_str()),
        ("team", "data"),
    ] {
        assert_eq!(got.tags.get(k).map(String::as_str), Some(v), "tag {k}");
    }
    assert_eq!(
        got.tags[&format!("kubernetes.io/cluster/{}", e.cluster)],
        "owned"
    );

    let listed = instances.list().await.unwrap();
    assert_eq!(
        listed.iter().map(|i| i.id.as_str()).collect::<Vec<_>>(),
        [launched.instance_id.as_str()]
    );

    instances
        .tag(
            &got.id,
            &instances.registration_tags("ip-10-1-1-5.ec2.internal", "default-abcde"),
        )
        .await
        .unwrap();
    assert_eq!(
        instances.get(&got.id).await.unwrap().tags["Name"],
        "ip-10-1-1-5.ec2.internal"
    );

    instances.terminate(&got.id).await.unwrap();
    // A terminated instance is gone for Get (which says why, in EC2's words) and List.
    match instances.get(&got.id).await {
        Err(InstanceError::Ended { state, reason, .. }) => {
            assert_eq!(state, "terminated");
            assert!(reason.contains("Client.UserInitiatedShutdown"), "{reason}");
        }
        other => panic!("a terminated instance: {other:?}"),
    }
    assert!(matches!(
        instances.terminate(&got.id).await,
        Err(InstanceError::Ended { .. })
    ));
    assert!(instances.list().await.unwrap().is_empty());
    assert!(matches!(
        instances.get("i-0000000000000dead").await,
        Err(InstanceError::NotFound(_))
    ));
}

/// Each launch tags its instance with its NodeClaim through CreateFleet's tag
/// specifications: the instance is found by that tag from its first moment, with no
/// CreateTags call to fail or lag behind.
#[tokio::test]
async fn concurrent_launches_tag_each_instance_with_its_node_claim_at_launch() {
    let e = env().await;
    let instances = InstanceProvider::new(e.c.ec2.clone(), &e.cluster);
    let (a, b) = tokio::join!(
        launch(&e, &instances, "claim-a"),
        launch(&e, &instances, "claim-b")
    );
    let (a, b) = (a.instance.unwrap(), b.instance.unwrap());
    assert_ne!(a.instance_id, b.instance_id);
    let tag_of = |id: String| {
        let instances = &instances;
        async move { instances.get(&id).await.unwrap().tags["karpenter.sh/nodeclaim"].clone() }
    };
    let mut claims = vec![tag_of(a.instance_id).await, tag_of(b.instance_id).await];
    claims.sort();
    assert_eq!(claims, ["claim-a", "claim-b"]);
    let found = instances
        .find_by_node_claim("claim-a")
        .await
        .expect("searched")
        .expect("found by its tag");
    assert_eq!(found.tags["karpenter.sh/nodeclaim"], "claim-a");
}

/// A launch repeated under its client token (its answer lost) gets the first launch's
/// instance back and launches nothing; the token with other parameters is refused.
#[tokio::test]
async fn a_launch_repeated_under_its_client_token_launches_nothing_more() {
    let e = env().await;
    let instances = InstanceProvider::new(e.c.ec2.clone(), &e.cluster);
    let token = unique("kerf-uid");
    let first = launch_with_token(&e, &instances, "claim-t", &token)
        .await
        .expect("CreateFleet succeeds")
        .instance
        .expect("launched");
    let again = launch_with_token(&e, &instances, "claim-t", &token)
        .await
        .expect("CreateFleet succeeds")
        .instance
        .expect("answered");
    assert_eq!(again.instance_id, first.instance_id);
    let tagged: Vec<String> = instances
        .list()
        .await
        .expect("listed")
        .into_iter()
        .filter(|i| i.tags.get("karpenter.sh/nodeclaim").map(String::as_str) == Some("claim-t"))
        .map(|i| i.id)
        .collect();
    assert_eq!(
        tagged,
        std::slice::from_ref(&first.instance_id),
        "one instance for the NodeClaim"
    );

    match launch_with_token(&e, &instances, "claim-other", &token).await {
        Err(InstanceError::Api(err)) => {
            assert_eq!(err.code.as_deref(), Some("IdempotentParameterMismatch"));
        }
        other => panic!("a reused token with other parameters: {other:?}"),
    }
}

#[tokio::test]
async fn garbage_collection_terminates_only_old_instances_without_a_node_claim() {
    let e = env().await;
    let instances = InstanceProvider::new(e.c.ec2.clone(), &e.cluster);
    let kept = launch(&e, &instances, "known")
        .await
        .instance
        .unwrap()
        .instance_id;
    let leaked = launch(&e, &instances, "leaked")
        .await
        .instance
        .unwrap()
        .instance_id;
    let known = HashSet::from([kept.clone()]);

    // Younger than the minimum age: left alone, its NodeClaim may still be on its way.
    let none = instances
        .garbage_collect(&known, Duration::from_secs(3600))
        .await
        .unwrap();
    assert!(none.is_empty());

    let collected = instances
        .garbage_collect(&known, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(collected, std::slice::from_ref(&leaked));
    assert!(matches!(
        instances.get(&leaked).await,
        Err(InstanceError::Ended { .. })
    ));
    assert_eq!(instances.get(&kept).await.unwrap().id, kept);
}
