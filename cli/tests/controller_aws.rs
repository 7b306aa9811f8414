//! `kerf controller` on AWS, end to end: the built binary runs against the Kubernetes API
//! emulator and moto (a real AWS API emulator, reached through the standard
//! `AWS_ENDPOINT_URL`), with the real AWS provider. An EC2NodeClass is resolved from objects
//! created in moto (subnets, security group, an AMI behind the EKS alias parameter, the node
//! role) and written Ready; an unschedulable pod gets a NodeClaim whose instance runs in moto
//! with kerf's tags, and is named after its node once registered; an instance leaked by an
//! earlier run is terminated. An EC2 state-change message sent into the SQS interruption
//! queue (moto's SQS, `INTERRUPTION_QUEUE`) deletes that NodeClaim and terminates its
//! instance. An unreachable AWS endpoint, or a missing interruption queue, stops start-up
//! with advice. A controller plans with the account's instance types once its provider
//! refreshed them: a type AWS added is launched, a type offered only outside the cluster's
//! zones is never planned.

// Helpers of this test crate are test code too: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_ec2::types::{Filter, ResourceType, Tag, TagSpecification};
use kerf_aws::clients::AwsClients;
use kerf_loadtest::apiserver::{ApiServer, Cluster, PatchKind, ServerConfig};
use serde_json::{Value, json};

mod aws_support;
mod cluster_support;
use aws_support::{REGION, aws_env, moto};

const CLUSTER: &str = "kerf-moto";
const PATIENCE: Duration = Duration::from_secs(60);

/// The controller process; killed if the test ends without stopping it.
struct Controller {
    child: Option<Child>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Controller {
    fn log(&self) -> String {
        self.log.lock().unwrap().join("\n")
    }

    /// SIGTERM, then the exit status.
    async fn stop(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().unwrap();
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        tokio::task::spawn_blocking(move || child.wait())
            .await
            .unwrap()
            .unwrap()
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn_controller(kubeconfig: &PathBuf, extra_env: &[(&str, &str)]) -> Controller {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kerf"));
    aws_env(&mut cmd, moto().endpoint());
    cmd.arg("controller")
        .env("KUBECONFIG", kubeconfig)
        .env("CLUSTER_NAME", CLUSTER)
        .env("CLUSTER_ENDPOINT", "https://kerf-moto.example.com")
        .env("METRICS_PORT", "0")
        .env("HEALTH_PROBE_PORT", "0")
        .env("SYSTEM_NAMESPACE", "karpenter")
        .env("DISABLE_LEADER_ELECTION", "true")
        .env("BATCH_IDLE_DURATION", "100ms")
        .env("BATCH_MAX_DURATION", "1s")
        // The Pricing API has no emulator; the embedded price table stands in.
        .env("ISOLATED_VPC", "true")
        .env("LOG_LEVEL", "debug");
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    for stream in [
        Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
        Box::new(child.stderr.take().unwrap()),
    ] {
        let log = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                log.lock().unwrap().push(line);
            }
        });
    }
    Controller {
        child: Some(child),
        log,
    }
}

/// Polls `condition` until it holds; fails with the controller's log after [`PATIENCE`].
async fn eventually<F, Fut>(controller: &Controller, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting: {what}\n--- controller log ---\n{}",
            controller.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tag(key: &str, value: &str) -> Tag {
    Tag::builder().key(key).value(value).build()
}

fn tag_spec(resource: ResourceType, tags: &[(&str, &str)]) -> TagSpecification {
    TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

/// The VPC objects of `cluster` an EC2NodeClass discovers by the `karpenter.sh/discovery`
/// tag (subnets in us-east-1a and us-east-1b), and what every cluster of this binary shares
/// ([`seed_shared`]); returns the AMI id.
async fn seed_aws(c: &AwsClients, cluster: &str) -> String {
    let discovery = [("karpenter.sh/discovery", cluster)];
    let vpc = c
        .ec2
        .create_vpc()
        .cidr_block("10.42.0.0/16")
        .send()
        .await
        .unwrap();
    let vpc = vpc.vpc().unwrap().vpc_id().unwrap().to_owned();
    for (zone, cidr) in [
        ("us-east-1a", "10.42.1.0/24"),
        ("us-east-1b", "10.42.2.0/24"),
    ] {
        c.ec2
            .create_subnet()
            .vpc_id(&vpc)
            .availability_zone(zone)
            .cidr_block(cidr)
            .tag_specifications(tag_spec(ResourceType::Subnet, &discovery))
            .send()
            .await
            .unwrap();
    }
    c.ec2
        .create_security_group()
        .vpc_id(&vpc)
        .group_name("kerf-moto-nodes")
        .description("nodes")
        .tag_specifications(tag_spec(ResourceType::SecurityGroup, &discovery))
        .send()
        .await
        .unwrap();
    seed_shared(c).await
}

/// The AMI behind the EKS AL2023 alias parameter for Kubernetes 1.33 (the emulator's
/// version) and the node role, seeded once per test binary; returns the AMI id.
async fn seed_shared(c: &AwsClients) -> String {
    static SHARED: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    SHARED.get_or_init(|| seed_image_and_role(c)).await.clone()
}

async fn seed_image_and_role(c: &AwsClients) -> String {
    let image = c
        .ec2
        .register_image()
        .name("amazon-eks-node-al2023-x86_64-standard-1.33-v20250101")
        .send()
        .await
        .unwrap()
        .image_id()
        .unwrap()
        .to_owned();
    moto()
        .set_image_attributes(
            REGION,
            &image,
            &kerf_aws::moto::ImageAttributes {
                architecture: Some("x86_64".into()),
                creation_date: Some("2025-01-01T00:00:00Z".into()),
                deprecation_time: None,
            },
        )
        .unwrap();
    moto()
        .seed_ssm_parameter(
            REGION,
            "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
            &image,
        )
        .unwrap();
    c.iam
        .create_role()
        .role_name("KerfNodeRole")
        .assume_role_policy_document("{}")
        .send()
        .await
        .unwrap();
    image
}

/// An instance an earlier controller launched for a NodeClaim that no longer exists,
/// launched five minutes ago.
async fn leaked_instance(c: &AwsClients, image: &str) -> String {
    let tags = [
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("karpenter.sh/nodeclaim", "default-lost"),
        ("eks:eks-cluster-name", CLUSTER),
    ];
    let out = c
        .ec2
        .run_instances()
        .image_id(image)
        .instance_type(aws_sdk_ec2::types::InstanceType::M5Large)
        .min_count(1)
        .max_count(1)
        .tag_specifications(tag_spec(ResourceType::Instance, &tags))
        .send()
        .await
        .unwrap();
    let id = out.instances()[0].instance_id().unwrap().to_owned();
    let launched = std::time::SystemTime::now() - Duration::from_secs(300);
    let launched: k8s_openapi::jiff::Timestamp = launched.try_into().unwrap();
    moto()
        .set_instance_launch_time(REGION, &id, &launched.to_string())
        .unwrap();
    id
}

/// The instance's state name and tags, if moto knows it.
async fn instance(c: &AwsClients, id: &str) -> Option<(String, BTreeMap<String, String>)> {
    let out = c
        .ec2
        .describe_instances()
        .instance_ids(id)
        .send()
        .await
        .ok()?;
    let i = out.reservations().first()?.instances().first()?;
    let state = i.state()?.name()?.as_str().to_owned();
    let tags = i
        .tags()
        .iter()
        .filter_map(|t| Some((t.key()?.to_owned(), t.value()?.to_owned())))
        .collect();
    Some((state, tags))
}

/// The cluster: CRDs, namespaces, the DNS Service and the `kubernetes` Service at EKS's
/// default service range, one EC2NodeClass discovering `discovery`'s subnets and group, and
/// one NodePool with `requirements`.
async fn seed_cluster(cluster: &Cluster, discovery: &str, requirements: Value) {
    cluster_support::install_karpenter(cluster);
    for (namespace, name, ip) in [
        ("kube-system", "kube-dns", "10.100.0.10"),
        ("default", "kubernetes", "10.100.0.1"),
    ] {
        cluster
            .create(
                "v1",
                "services",
                json!({"metadata": {"name": name, "namespace": namespace},
                    "spec": {"clusterIP": ip, "ports": [{"port": 443}]}}),
            )
            .unwrap();
    }
    cluster
        .create(
            "karpenter.k8s.aws/v1",
            "ec2nodeclasses",
            json!({
                "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
                "metadata": {"name": "default"},
                "spec": {
                    "role": "KerfNodeRole",
                    "amiSelectorTerms": [{"alias": "al2023@latest"}],
                    "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": discovery}}],
                    "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": discovery}}],
                    "tags": {"team": "platform"},
                },
            }),
        )
        .unwrap();
    cluster
        .create(
            "karpenter.sh/v1",
            "nodepools",
            json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
                "metadata": {"name": "default"},
                "spec": {"template": {"spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": requirements,
                }}},
            }),
        )
        .unwrap();
}

/// The NodePool of [`launches_on_aws_for_a_pending_pod_and_collects_a_leaked_instance`].
fn m5_on_demand() -> Value {
    json!([
        {"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]},
        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
        {"key": "karpenter.k8s.aws/instance-family", "operator": "In", "values": ["m5"]},
    ])
}

fn unschedulable_pod(cluster: &Cluster) {
    pending_pod(cluster, "web", json!({}));
}

/// A pod `name` asking for 1 CPU and 1 GiB on a node with `node_selector`, reported
/// unschedulable by the kube-scheduler.
fn pending_pod(cluster: &Cluster, name: &str, node_selector: Value) {
    cluster
        .create(
            "v1",
            "pods",
            json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": "default"},
                "spec": {"nodeSelector": node_selector,
                    "containers": [{"name": "app", "image": "app",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}),
        )
        .unwrap();
    cluster
        .patch_status(
            "v1",
            "pods",
            Some("default"),
            name,
            PatchKind::Merge,
            &json!({"status": {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                "message": "0/0 nodes are available"}]}}),
        )
        .unwrap();
}

fn is_true(object: &Value, type_: &str) -> bool {
    object["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == type_ && c["status"] == "True")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn launches_on_aws_for_a_pending_pod_and_collects_a_leaked_instance() {
    let c = AwsClients::for_endpoint(moto().endpoint(), REGION).await;
    let image = seed_aws(&c, CLUSTER).await;
    let leaked = leaked_instance(&c, &image).await;
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let cluster = server.cluster();
    seed_cluster(&cluster, CLUSTER, m5_on_demand()).await;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-controller-aws-{}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig).unwrap();
    let queue = interruption_queue(&c).await;
    let controller = spawn_controller(&kubeconfig, &[("INTERRUPTION_QUEUE", INTERRUPTION_QUEUE)]);

    // The node class resolves against moto: discovered subnets and group, the AMI behind
    // the alias for the API server's Kubernetes version, the role's instance profile.
    let node_class = || cluster.get("karpenter.k8s.aws/v1", "ec2nodeclasses", None, "default");
    eventually(&controller, "the EC2NodeClass is Ready", || async {
        node_class().is_ok_and(|nc| is_true(&nc, "Ready"))
    })
    .await;
    let nc = node_class().unwrap();
    assert_eq!(nc["status"]["amis"][0]["id"], image.as_str(), "{nc}");
    assert_eq!(nc["status"]["subnets"].as_array().unwrap().len(), 2, "{nc}");
    assert_eq!(nc["status"]["securityGroups"][0]["name"], "kerf-moto-nodes");
    assert!(nc["status"]["instanceProfile"].is_string(), "{nc}");
    let hash = nc["metadata"]["annotations"]["karpenter.k8s.aws/ec2nodeclass-hash"].clone();
    assert!(hash.is_string(), "{nc}");
    assert_eq!(
        nc["metadata"]["finalizers"],
        json!(["karpenter.k8s.aws/termination"])
    );

    // The instance an earlier run leaked is terminated by garbage collection.
    eventually(&controller, "the leaked instance is terminated", || async {
        instance(&c, &leaked)
            .await
            .is_some_and(|(state, _)| state == "shutting-down" || state == "terminated")
    })
    .await;

    // A pending pod gets a NodeClaim launched in moto with kerf's tags.
    unschedulable_pod(&cluster);
    let launched = || {
        cluster
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .unwrap()
            .into_iter()
            .find(|c| is_true(c, "Launched"))
    };
    eventually(&controller, "a NodeClaim is launched", || async {
        launched().is_some()
    })
    .await;
    let claim = launched().unwrap();
    let name = claim["metadata"]["name"].as_str().unwrap().to_owned();
    let provider_id = claim["status"]["providerID"].as_str().unwrap();
    let id = provider_id.rsplit('/').next().unwrap().to_owned();
    assert!(provider_id.starts_with("aws:///us-east-1"), "{claim}");
    assert_eq!(
        claim["metadata"]["annotations"]["karpenter.k8s.aws/ec2nodeclass-hash"], hash,
        "{claim}"
    );
    assert_eq!(claim["status"]["imageID"], image.as_str(), "{claim}");
    let (state, tags) = instance(&c, &id).await.unwrap();
    assert_eq!(state, "running");
    for (key, value) in [
        ("karpenter.sh/nodeclaim", name.as_str()),
        ("karpenter.sh/nodepool", "default"),
        ("karpenter.k8s.aws/ec2nodeclass", "default"),
        ("eks:eks-cluster-name", CLUSTER),
        ("kubernetes.io/cluster/kerf-moto", "owned"),
        ("team", "platform"),
    ] {
        assert_eq!(
            tags.get(key).map(String::as_str),
            Some(value),
            "{key}: {tags:?}"
        );
    }
    let templates = c
        .ec2
        .describe_launch_templates()
        .filters(
            Filter::builder()
                .name("tag:karpenter.k8s.aws/ec2nodeclass")
                .values("default")
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(!templates.launch_templates().is_empty());

    // Once the node registers, the instance is named after it.
    cluster
        .patch_status(
            "karpenter.sh/v1",
            "nodeclaims",
            None,
            &name,
            PatchKind::Merge,
            &json!({"status": {"nodeName": "ip-10-42-1-10.ec2.internal"}}),
        )
        .unwrap();
    eventually(
        &controller,
        "the instance carries its node's name",
        || async {
            instance(&c, &id).await.is_some_and(|(_, tags)| {
                tags.get("Name").map(String::as_str) == Some("ip-10-42-1-10.ec2.internal")
            })
        },
    )
    .await;

    // EC2 says the instance is stopping: the NodeClaim is deleted and its instance
    // terminated; the message is deleted from the queue.
    let message = kerf::interruption::messages::state_change(
        "moto-1",
        REGION,
        k8s_openapi::jiff::Timestamp::now(),
        &id,
        "stopping",
    );
    c.sqs
        .send_message()
        .queue_url(&queue)
        .message_body(message)
        .send()
        .await
        .unwrap();
    eventually(
        &controller,
        "the interrupted NodeClaim is deleted",
        || async {
            cluster
                .get("karpenter.sh/v1", "nodeclaims", None, &name)
                .map_or(true, |c| c["metadata"]["deletionTimestamp"].is_string())
        },
    )
    .await;
    eventually(&controller, "its instance is terminated", || async {
        instance(&c, &id)
            .await
            .is_some_and(|(state, _)| state == "shutting-down" || state == "terminated")
    })
    .await;
    eventually(&controller, "the message is deleted", || async {
        queue_depth(&c, &queue).await == 0
    })
    .await;

    let log = controller.log();
    let exit = controller.stop().await;
    assert!(exit.success(), "{exit:?}\n{log}");
    assert!(
        log.contains("initiating delete from interruption message"),
        "{log}"
    );
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}

/// A type AWS added after the embedded catalog was generated: moto is taught it (a copy of
/// m5.large), the embedded catalog has no such name.
const NEW_TYPE: &str = "m9z.large";
/// A type the embedded catalog offers in the cluster's zones, which this account's EC2
/// offers only in us-east-1c, where the cluster has no subnet.
const ELSEWHERE: &str = "c6i.large";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_with_the_accounts_instance_types_once_refreshed() {
    const CATALOG_CLUSTER: &str = "kerf-moto-catalog";
    let embedded = kerf::catalog::Catalog::embedded(REGION).unwrap();
    assert!(embedded.info(NEW_TYPE).is_none());
    assert!(
        embedded
            .offerings(ELSEWHERE)
            .iter()
            .any(|o| o.zone == "us-east-1a" && o.available)
    );
    moto()
        .set_instance_type_zones(REGION, NEW_TYPE, "m5.large", &["us-east-1a", "us-east-1b"])
        .unwrap();
    moto()
        .set_instance_type_zones(REGION, ELSEWHERE, ELSEWHERE, &["us-east-1c"])
        .unwrap();
    let c = AwsClients::for_endpoint(moto().endpoint(), REGION).await;
    seed_aws(&c, CATALOG_CLUSTER).await;
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let cluster = server.cluster();
    seed_cluster(
        &cluster,
        CATALOG_CLUSTER,
        json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot", "on-demand"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [NEW_TYPE, ELSEWHERE]},
        ]),
    )
    .await;
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-controller-aws-catalog-{}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig).unwrap();
    let controller = spawn_controller(&kubeconfig, &[("CLUSTER_NAME", CATALOG_CLUSTER)]);
    // Before its first refresh the controller plans with the embedded catalog, which would
    // place ELSEWHERE in us-east-1a: the pods come once the account's catalog is in.
    eventually(&controller, "the catalog is refreshed from EC2", || async {
        controller
            .log()
            .contains("refreshed the instance type catalog from EC2")
    })
    .await;
    eventually(&controller, "the EC2NodeClass is Ready", || async {
        cluster
            .get("karpenter.k8s.aws/v1", "ec2nodeclasses", None, "default")
            .is_ok_and(|nc| is_true(&nc, "Ready"))
    })
    .await;
    let selector = |t: &str| json!({"node.kubernetes.io/instance-type": t});
    pending_pod(&cluster, "new-type", selector(NEW_TYPE));
    pending_pod(&cluster, "elsewhere", selector(ELSEWHERE));

    // The type only the account's catalog has is planned and launched.
    let launched_as = |t: &str| {
        cluster
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .unwrap()
            .into_iter()
            .find(|c| {
                is_true(c, "Launched")
                    && c["metadata"]["labels"]["node.kubernetes.io/instance-type"] == t
            })
    };
    eventually(
        &controller,
        "a NodeClaim is launched as the new type",
        || async { launched_as(NEW_TYPE).is_some() },
    )
    .await;
    let claim = launched_as(NEW_TYPE).unwrap();
    let id = claim["status"]["providerID"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(instance(&c, &id).await.unwrap().0, "running");

    // The type the account does not offer in the cluster's zones is never planned: the
    // solve reports its pod unschedulable, and no NodeClaim asks for it.
    eventually(
        &controller,
        "the other pod is reported unschedulable",
        || async {
            cluster
                .list("v1", "events", Some("default"), "")
                .unwrap()
                .iter()
                .any(|e| {
                    e["involvedObject"]["name"] == "elsewhere" && e["reason"] == "FailedScheduling"
                })
        },
    )
    .await;
    for claim in cluster
        .list("karpenter.sh/v1", "nodeclaims", None, "")
        .unwrap()
    {
        let requirements = &claim["spec"]["requirements"];
        assert!(!requirements.to_string().contains(ELSEWHERE), "{claim}");
    }
    let log = controller.log();
    assert!(
        log.contains("planning with the cloud provider's refreshed instance type catalog"),
        "{log}"
    );
    let exit = controller.stop().await;
    assert!(exit.success(), "{exit:?}");
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}

const INTERRUPTION_QUEUE: &str = "kerf-moto-interruptions";

/// The interruption queue in moto's SQS; returns its URL.
async fn interruption_queue(c: &AwsClients) -> String {
    c.sqs
        .create_queue()
        .queue_name(INTERRUPTION_QUEUE)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_owned()
}

/// Messages in the queue, visible or in flight.
async fn queue_depth(c: &AwsClients, url: &str) -> u64 {
    use aws_sdk_sqs::types::QueueAttributeName as A;
    let attributes = c
        .sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(A::ApproximateNumberOfMessages)
        .attribute_names(A::ApproximateNumberOfMessagesNotVisible)
        .send()
        .await
        .unwrap();
    let attributes = attributes.attributes().cloned().unwrap_or_default();
    [
        A::ApproximateNumberOfMessages,
        A::ApproximateNumberOfMessagesNotVisible,
    ]
    .iter()
    .filter_map(|a| attributes.get(a)?.parse::<u64>().ok())
    .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_interruption_queue_stops_start_up_naming_it() {
    moto();
    let server = ApiServer::start(ServerConfig::default()).await.unwrap();
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-controller-aws-queue-{}.kubeconfig",
        std::process::id()
    ));
    server.write_kubeconfig(&kubeconfig).unwrap();
    let mut controller =
        spawn_controller(&kubeconfig, &[("INTERRUPTION_QUEUE", "kerf-no-such-queue")]);
    let mut child = controller.child.take().unwrap();
    let exit = tokio::task::spawn_blocking(move || child.wait())
        .await
        .unwrap()
        .unwrap();
    // The log readers finish once the process's pipes close.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let log = controller.log();
    assert!(!exit.success(), "{log}");
    assert!(
        log.contains(kerf::troubleshooting::documented("interruption-queue")),
        "{log}"
    );
    assert!(
        log.contains("interruption queue \\\"kerf-no-such-queue\\\" does not exist")
            || log.contains("interruption queue \"kerf-no-such-queue\" does not exist"),
        "{log}"
    );
    let _ = std::fs::remove_file(&kubeconfig);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_aws_endpoint_stops_start_up_with_advice() {
    // Nothing listens on port 1; the kubeconfig is not reached before AWS is checked.
    let kubeconfig = std::env::temp_dir().join(format!(
        "kerf-cli-controller-noaws-{}.kubeconfig",
        std::process::id()
    ));
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:1\n\
         contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
         users:\n- name: u\n  user: {}\n",
    )
    .unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kerf"));
    aws_env(&mut cmd, "http://127.0.0.1:1");
    let out = cmd
        .arg("controller")
        .env("KUBECONFIG", &kubeconfig)
        .env("CLUSTER_NAME", CLUSTER)
        .env("METRICS_PORT", "0")
        .env("HEALTH_PROBE_PORT", "0")
        .env("AWS_MAX_ATTEMPTS", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&kubeconfig);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("cannot reach STS at http://127.0.0.1:1"),
        "{text}"
    );
    assert!(
        text.contains(kerf::troubleshooting::documented("sts-unreachable")),
        "{text}"
    );
    assert!(text.contains("dnsPolicy: Default"), "{text}");
    assert!(text.contains("com.amazonaws.us-east-1.sts"), "{text}");
}
