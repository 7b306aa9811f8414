//! AMI resolution: DescribeImages terms, an `ssmParameter` term on a parameter of the test's
//! own, and an alias through EKS parameters seeded into moto's SSM backend.

use crate::support::*;
use kerf_aws::ami::{AmiProvider, AmiTerm};
use kerf_aws::ssm::SsmProvider;
use std::collections::BTreeMap;
use std::sync::Arc;

fn provider(c: &kerf_aws::clients::AwsClients) -> AmiProvider {
    AmiProvider::new(c.ec2.clone(), Arc::new(SsmProvider::new(c.ssm.clone())))
}

fn arch_of(ami: &kerf_aws::ami::ResolvedAmi) -> String {
    ami.requirements
        .iter()
        .find(|r| r.key == "kubernetes.io/arch")
        .and_then(|r| r.values.as_ref())
        .map(|v| v.join(","))
        .unwrap_or_default()
}

#[tokio::test]
async fn tag_terms_pick_the_newest_image_per_architecture() {
    let c = clients().await;
    let team = unique("team");
    let old = image(
        &unique("node-old"),
        "x86_64",
        "2024-01-01T00:00:00Z",
        &[("team", &team)],
    )
    .await;
    let new = image(
        &unique("node-new"),
        "x86_64",
        "2024-06-01T00:00:00Z",
        &[("team", &team)],
    )
    .await;
    let arm = image(
        &unique("node-arm"),
        "arm64",
        "2024-03-01T00:00:00Z",
        &[("team", &team)],
    )
    .await;
    let amis = provider(&c)
        .list(
            &[AmiTerm {
                tags: BTreeMap::from([("team".to_owned(), team.clone())]),
                ..AmiTerm::default()
            }],
            "1.31",
        )
        .await
        .unwrap();
    let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    // One per architecture, newest first; the older amd64 image loses to the newer one.
    assert_eq!(ids, [new.as_str(), arm.as_str()]);
    assert!(!ids.contains(&old.as_str()));
    assert_eq!(arch_of(&amis[0]), "amd64");
    assert_eq!(arch_of(&amis[1]), "arm64");
}

#[tokio::test]
async fn id_and_name_terms() {
    let c = clients().await;
    let name = unique("by-name");
    let named = image(&name, "arm64", "2024-02-01T00:00:00Z", &[]).await;
    let by_id = image(&unique("by-id"), "x86_64", "2024-02-02T00:00:00Z", &[]).await;
    let amis = provider(&c)
        .list(
            &[
                AmiTerm {
                    name: Some(name.clone()),
                    ..AmiTerm::default()
                },
                AmiTerm {
                    id: Some(by_id.clone()),
                    ..AmiTerm::default()
                },
            ],
            "1.31",
        )
        .await
        .unwrap();
    let ids: Vec<&str> = amis.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, [by_id.as_str(), named.as_str()]);
    assert_eq!(amis[1].name.as_deref(), Some(name.as_str()));
}

#[tokio::test]
async fn deprecated_images_lose_to_current_ones() {
    let c = clients().await;
    let team = unique("team");
    let current = image(
        &unique("current"),
        "x86_64",
        "2024-01-01T00:00:00Z",
        &[("team", &team)],
    )
    .await;
    let deprecated = image(
        &unique("deprecated"),
        "x86_64",
        "2024-09-01T00:00:00Z",
        &[("team", &team)],
    )
    .await;
    moto()
        .set_image_attributes(
            REGION,
            &deprecated,
            &kerf_aws::moto::ImageAttributes {
                deprecation_time: Some("2024-10-01T00:00:00.000Z".into()),
                ..Default::default()
            },
        )
        .unwrap();
    let amis = provider(&c)
        .list(
            &[AmiTerm {
                tags: BTreeMap::from([("team".to_owned(), team)]),
                ..AmiTerm::default()
            }],
            "1.31",
        )
        .await
        .unwrap();
    assert_eq!(amis.len(), 1);
    assert_eq!(amis[0].id, current);
    assert!(!amis[0].deprecated);
}

#[tokio::test]
async fn ssm_parameter_term_resolves_through_ssm() {
    let c = crate::iam_policy::provider_clients_allowing(&[crate::iam_policy::OWN_SSM_PARAMETERS])
        .await;
    let ami = image(&unique("ssm"), "x86_64", "2024-05-01T00:00:00Z", &[]).await;
    let parameter = format!("/kerf-tests/{}/image_id", unique("param"));
    setup_clients()
        .await
        .ssm
        .put_parameter()
        .name(&parameter)
        .value(&ami)
        .r#type(aws_sdk_ssm::types::ParameterType::String)
        .send()
        .await
        .expect("PutParameter");
    let term = AmiTerm {
        ssm_parameter: Some(parameter.clone()),
        ..AmiTerm::default()
    };
    let amis = provider(&c)
        .list(std::slice::from_ref(&term), "1.31")
        .await
        .unwrap();
    assert_eq!(amis.len(), 1);
    assert_eq!(amis[0].id, ami);

    // A missing parameter selects nothing rather than failing the node class.
    let missing = AmiTerm {
        ssm_parameter: Some(format!("{parameter}-missing")),
        ..AmiTerm::default()
    };
    assert!(
        provider(&c)
            .list(&[missing], "1.31")
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn al2023_alias_resolves_standard_and_gpu_variants() {
    let c = clients().await;
    // A Kubernetes version no other test uses keeps these parameters to this test.
    let k8s = "1.29";
    let amd = image(
        &unique("al2023-amd64"),
        "x86_64",
        "2024-07-01T00:00:00Z",
        &[],
    )
    .await;
    let arm = image(
        &unique("al2023-arm64"),
        "arm64",
        "2024-07-01T00:00:00Z",
        &[],
    )
    .await;
    let gpu = image(
        &unique("al2023-nvidia"),
        "x86_64",
        "2024-07-01T00:00:00Z",
        &[],
    )
    .await;
    let base = format!("/aws/service/eks/optimized-ami/{k8s}/amazon-linux-2023");
    for (path, id) in [
        (format!("{base}/x86_64/standard/recommended/image_id"), &amd),
        (format!("{base}/arm64/standard/recommended/image_id"), &arm),
        (format!("{base}/x86_64/nvidia/recommended/image_id"), &gpu),
    ] {
        moto().seed_ssm_parameter(REGION, &path, id).unwrap();
    }
    let amis = provider(&c)
        .list(
            &[AmiTerm {
                alias: Some("al2023@latest".into()),
                ..AmiTerm::default()
            }],
            k8s,
        )
        .await
        .unwrap();
    assert_eq!(amis.len(), 3, "{amis:#?}");
    let find = |id: &str| amis.iter().find(|a| a.id == id).unwrap();
    assert_eq!(arch_of(find(&arm)), "arm64");
    let gpu_reqs = &find(&gpu).requirements;
    assert!(
        gpu_reqs
            .iter()
            .any(|r| r.key == "karpenter.k8s.aws/instance-gpu-count" && r.operator == "Exists")
    );
    let std_reqs = &find(&amd).requirements;
    assert!(
        std_reqs.iter().any(
            |r| r.key == "karpenter.k8s.aws/instance-gpu-count" && r.operator == "DoesNotExist"
        )
    );

    let err = provider(&c)
        .list(
            &[AmiTerm {
                alias: Some("bottlerocket@latest".into()),
                ..AmiTerm::default()
            }],
            k8s,
        )
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("/aws/service/bottlerocket/aws-k8s-1.29/x86_64/latest/image_id"),
        "{err}"
    );
}
