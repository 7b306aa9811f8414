//! Subnet and security-group discovery by selector terms.

use crate::support::*;
use kerf_aws::securitygroup::SecurityGroupProvider;
use kerf_aws::selectors::SelectorTerm;
use kerf_aws::subnet::SubnetProvider;

#[tokio::test]
async fn subnets_by_tags_wildcard_and_id() {
    let c = clients().await;
    let discovery = unique("cluster");
    let vpc = vpc().await;
    let a = subnet(
        &vpc,
        "us-east-1a",
        1,
        &[("discovery", &discovery), ("tier", "private")],
    )
    .await;
    let b = subnet(
        &vpc,
        "us-east-1b",
        2,
        &[("discovery", &discovery), ("tier", "public")],
    )
    .await;
    let other = subnet(&vpc, "us-east-1c", 3, &[("unrelated", "yes")]).await;
    let provider = SubnetProvider::new(c.ec2.clone());

    let by_tag = provider
        .list(&[SelectorTerm::by_tags([
            ("discovery", discovery.as_str()),
            ("tier", "private"),
        ])])
        .await
        .unwrap();
    assert_eq!(
        by_tag.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(),
        [a.as_str()]
    );
    assert_eq!(by_tag[0].zone, "us-east-1a");
    assert!(by_tag[0].available_ip_count > 0);

    let wildcard = provider
        .list(&[SelectorTerm::by_tags([
            ("discovery", discovery.as_str()),
            ("tier", "*"),
        ])])
        .await
        .unwrap();
    let mut ids: Vec<&str> = wildcard.iter().map(|s| s.id.as_str()).collect();
    ids.sort();
    let mut expected = vec![a.as_str(), b.as_str()];
    expected.sort();
    assert_eq!(ids, expected);

    // Terms are ORed: an id term adds the unrelated subnet.
    let union = provider
        .list(&[
            SelectorTerm::by_tags([("discovery", discovery.as_str()), ("tier", "public")]),
            SelectorTerm::by_id(&other),
        ])
        .await
        .unwrap();
    assert_eq!(union.len(), 2);
    assert!(
        union
            .iter()
            .any(|s| s.id == other && s.zone == "us-east-1c")
    );

    let none = provider
        .list(&[SelectorTerm::by_tags([("discovery", "no-such-cluster")])])
        .await
        .unwrap();
    assert!(none.is_empty());
}

#[tokio::test]
async fn security_groups_by_name_tags_and_id() {
    let c = clients().await;
    let discovery = unique("cluster");
    let vpc = vpc().await;
    let name = unique("nodes");
    let nodes = security_group(&vpc, &name, &[("discovery", &discovery)]).await;
    let extra = security_group(
        &vpc,
        &unique("extra"),
        &[("discovery", &discovery), ("role", "extra")],
    )
    .await;
    let provider = SecurityGroupProvider::new(c.ec2.clone());

    let by_name = provider
        .list(&[SelectorTerm::by_name(&name)])
        .await
        .unwrap();
    assert_eq!(by_name.len(), 1);
    assert_eq!(by_name[0].id, nodes);
    assert_eq!(by_name[0].name.as_deref(), Some(name.as_str()));

    let by_tag = provider
        .list(&[SelectorTerm::by_tags([("discovery", discovery.as_str())])])
        .await
        .unwrap();
    assert_eq!(by_tag.len(), 2);

    let by_wildcard = provider
        .list(&[SelectorTerm::by_tags([
            ("discovery", discovery.as_str()),
            ("role", "*"),
        ])])
        .await
        .unwrap();
    assert_eq!(
        by_wildcard
            .iter()
            .map(|g| g.id.as_str())
            .collect::<Vec<_>>(),
        [extra.as_str()]
    );

    let by_id = provider.list(&[SelectorTerm::by_id(&nodes)]).await.unwrap();
    assert_eq!(by_id[0].id, nodes);
}

#[tokio::test]
async fn start_up_connectivity_check() {
    let c = clients().await;
    c.check_connectivity()
        .await
        .expect("moto answers STS and EC2");

    // Nothing listens on port 9 of loopback: the error names the endpoint and the causes.
    let unreachable =
        kerf_aws::clients::AwsClients::for_endpoint("http://127.0.0.1:9", REGION).await;
    let err = unreachable
        .check_connectivity()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("cannot reach STS at http://127.0.0.1:9"),
        "{err}"
    );
    assert!(err.contains("dnsPolicy: Default"), "{err}");
    assert!(err.contains("VPC interface endpoints"), "{err}");
}
