//! Instance types from DescribeInstanceTypes / DescribeInstanceTypeOfferings merged with
//! the embedded catalog, and offering availability by subnet zone and failed launches.

use crate::support::*;
use kerf::catalog::{AllocatableSettings, CapacityType};
use kerf_aws::instancetype::{InstanceTypeProvider, LaunchScope};
use kerf_aws::pricing::PricingProvider;
use kerf_aws::unavailable::{UnavailableOfferings, UnavailableOfferingsCache};
use std::sync::Arc;

#[tokio::test]
async fn live_types_and_offerings_with_availability() {
    let c = clients().await;
    let pricing = Arc::new(PricingProvider::new(
        c.pricing.clone(),
        c.ec2.clone(),
        REGION,
        false,
    ));
    let unavailable = Arc::new(UnavailableOfferingsCache::default());
    let provider = InstanceTypeProvider::new(c.ec2.clone(), REGION, pricing, unavailable.clone());
    // DescribeInstanceTypes is slow in moto: one refresh for the whole test.
    let types = provider.update_instance_types().await.unwrap();
    assert!(types > 500, "moto describes many types, got {types}");
    assert!(provider.update_offerings().await.unwrap() > 500);

    let scope = LaunchScope::from_subnets([("us-east-1a", "subnet-a")]);
    let listed = provider.list(&AllocatableSettings::default(), &scope);
    let m5 = listed
        .iter()
        .find(|t| t.name == "m5.large")
        .expect("m5.large is listed");
    assert_eq!(m5.capacity.cpu().value(), 2);
    assert_eq!(m5.label("kubernetes.io/arch"), Some("amd64"));
    // The embedded catalog completes what EC2 does not report.
    assert!(
        m5.label("karpenter.k8s.aws/instance-network-bandwidth")
            .is_some()
    );

    let offering = |zone: &str, ct: CapacityType| {
        m5.offerings
            .iter()
            .find(|o| o.zone == zone && o.capacity_type == ct)
            .unwrap_or_else(|| panic!("m5.large offering {zone} {ct}"))
    };
    assert!(offering("us-east-1a", CapacityType::OnDemand).available);
    assert!(offering("us-east-1a", CapacityType::Spot).available);
    assert_eq!(offering("us-east-1a", CapacityType::OnDemand).price, 0.096);
    assert!(
        !offering("us-east-1b", CapacityType::OnDemand).available,
        "no subnet there"
    );
    assert!(
        !offering("us-east-1a", CapacityType::OnDemand)
            .zone_id
            .is_empty()
    );

    unavailable.mark_unavailable(
        "m5.large",
        "us-east-1a",
        "spot",
        "InsufficientInstanceCapacity",
    );
    let listed = provider.list(&AllocatableSettings::default(), &scope);
    let m5 = listed.iter().find(|t| t.name == "m5.large").unwrap();
    let spot = m5
        .offerings
        .iter()
        .find(|o| o.zone == "us-east-1a" && o.capacity_type == CapacityType::Spot)
        .unwrap();
    assert!(!spot.available);
    assert!(m5.offerings.iter().any(|o| o.zone == "us-east-1a"
        && o.capacity_type == CapacityType::OnDemand
        && o.available));
}
