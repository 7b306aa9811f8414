//! Shared moto server and helpers that create EC2 objects for a test.

use kerf_aws::clients::AwsClients;
use kerf_aws::moto::{ImageAttributes, MotoServer};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

pub const REGION: &str = "us-east-1";

/// The moto server of this test binary. Fails the test, with how to install moto, when it
/// cannot start: these tests must not pass without the emulator.
pub fn moto() -> &'static MotoServer {
    static SERVER: OnceLock<MotoServer> = OnceLock::new();
    SERVER.get_or_init(|| match MotoServer::start() {
        Ok(server) => server,
        Err(e) => panic!("the AWS provider tests need moto: {e}"),
    })
}

/// The I/O runtime the provider's clients send from, as the controller's do
/// (`kerf_aws::io`): two threads of its own, for every test of this binary.
pub fn io() -> &'static tokio::runtime::Handle {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("moto-tests-io")
            .enable_all()
            .build()
            .expect("the tests' I/O runtime starts")
    })
    .handle()
}

/// The provider's clients: every request is checked against the controller's IAM policy, and
/// sent from [`io`].
pub async fn clients() -> AwsClients {
    crate::iam_policy::provider_clients().await
}

pub use crate::iam_policy::setup_clients;

/// A name unique within this test process.
pub fn unique(prefix: &str) -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

pub fn tag(key: &str, value: &str) -> aws_sdk_ec2::types::Tag {
    aws_sdk_ec2::types::Tag::builder()
        .key(key)
        .value(value)
        .build()
}

pub fn tag_spec(
    resource: aws_sdk_ec2::types::ResourceType,
    tags: &[(&str, &str)],
) -> aws_sdk_ec2::types::TagSpecification {
    aws_sdk_ec2::types::TagSpecification::builder()
        .resource_type(resource)
        .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
        .build()
}

/// A VPC with a CIDR of its own.
pub async fn vpc() -> String {
    let c = setup_clients().await;
    static NEXT: AtomicU32 = AtomicU32::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let out = c
        .ec2
        .create_vpc()
        .cidr_block(format!("10.{n}.0.0/16"))
        .send()
        .await
        .expect("CreateVpc");
    out.vpc()
        .and_then(|v| v.vpc_id())
        .expect("vpc id")
        .to_owned()
}

/// A subnet in `zone` with `tags`; `index` picks its /24 within the VPC.
pub async fn subnet(vpc_id: &str, zone: &str, index: u8, tags: &[(&str, &str)]) -> String {
    let c = setup_clients().await;
    let vpc = c
        .ec2
        .describe_vpcs()
        .vpc_ids(vpc_id)
        .send()
        .await
        .expect("DescribeVpcs");
    let cidr = vpc.vpcs()[0].cidr_block().expect("cidr").to_owned();
    let prefix: Vec<&str> = cidr.split('.').take(2).collect();
    let out = c
        .ec2
        .create_subnet()
        .vpc_id(vpc_id)
        .availability_zone(zone)
        .cidr_block(format!("{}.{}.{index}.0/24", prefix[0], prefix[1]))
        .tag_specifications(tag_spec(aws_sdk_ec2::types::ResourceType::Subnet, tags))
        .send()
        .await
        .expect("CreateSubnet");
    out.subnet()
        .and_then(|s| s.subnet_id())
        .expect("subnet id")
        .to_owned()
}

pub async fn security_group(vpc_id: &str, name: &str, tags: &[(&str, &str)]) -> String {
    let c = setup_clients().await;
    let out = c
        .ec2
        .create_security_group()
        .vpc_id(vpc_id)
        .group_name(name)
        .description("kerf test")
        .tag_specifications(tag_spec(
            aws_sdk_ec2::types::ResourceType::SecurityGroup,
            tags,
        ))
        .send()
        .await
        .expect("CreateSecurityGroup");
    out.group_id().expect("group id").to_owned()
}

/// Registers an AMI named `name` of `arch` created at `created` (RFC 3339), tagged `tags`.
pub async fn image(name: &str, arch: &str, created: &str, tags: &[(&str, &str)]) -> String {
    let c = setup_clients().await;
    let out = c
        .ec2
        .register_image()
        .name(name)
        .send()
        .await
        .expect("RegisterImage");
    let id = out.image_id().expect("image id").to_owned();
    // moto's RegisterImage ignores the architecture; set it (and the date) in its backend.
    moto()
        .set_image_attributes(
            REGION,
            &id,
            &ImageAttributes {
                architecture: Some(arch.to_owned()),
                creation_date: Some(created.to_owned()),
                deprecation_time: None,
            },
        )
        .expect("setting image attributes");
    if !tags.is_empty() {
        c.ec2
            .create_tags()
            .resources(&id)
            .set_tags(Some(tags.iter().map(|(k, v)| tag(k, v)).collect()))
            .send()
            .await
            .expect("CreateTags");
    }
    id
}

/// An IAM role for nodes, named uniquely.
pub async fn node_role() -> String {
    let c = setup_clients().await;
    let role = unique("NodeRole");
    c.iam
        .create_role()
        .role_name(&role)
        .assume_role_policy_document("{}")
        .send()
        .await
        .expect("CreateRole");
    role
}

/// The provider's settings for a test cluster named `cluster`.
pub fn provider_settings(cluster: &str) -> kerf_aws::cloudprovider::AwsSettings {
    kerf_aws::cloudprovider::AwsSettings {
        cluster_name: cluster.to_owned(),
        cluster_endpoint: "https://cluster.example".into(),
        ca_bundle: Some("Y2EtYnVuZGxlCg==".into()),
        cluster_cidr: Some("10.100.0.0/16".into()),
        kube_dns_ip: Some("10.100.0.10".into()),
        kubernetes_version: "1.31".into(),
        isolated_vpc: false,
        reserved_enis: 0,
        vm_memory_overhead_percent: 0.075,
        reserved_capacity: true,
    }
}
