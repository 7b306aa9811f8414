//! The catalog the provider publishes for planning ([`CloudProvider::catalog`]) against
//! moto: nothing before the first refresh, then the account's types, zones and prices —
//! a type the account's zones stopped offering loses its offerings in the class's zones,
//! and a spot price changed after a refresh moves both the planned offering and the launch
//! to the cheaper zone. moto answers every spot price with a placeholder and knows the
//! zones of its own data only: the launcher seeds both (see `kerf_aws::moto`).

use crate::cloudprovider::{fixture, node_claim};
use crate::support::*;
use kerf::catalog::{AllocatableSettings, CapacityType, Catalog, CatalogSnapshot, InstanceType};
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use std::collections::BTreeSet;

/// Only this test changes these types' zones and prices in moto (which every test of the
/// binary shares).
const REZONED: &str = "c6a.large";
const REPRICED: &str = "c7i.large";

/// The class's resolved types from `catalog` (its subnets are in us-east-1a and 1b).
fn planned(catalog: &CatalogSnapshot, name: &str) -> InstanceType {
    let zones: BTreeSet<String> = ["us-east-1a", "us-east-1b"].map(String::from).into();
    catalog
        .instance_type(name, &AllocatableSettings::default(), Some(&zones))
        .unwrap_or_else(|| panic!("{name} is in the catalog"))
}

/// The cheapest available spot offering's zone and price.
fn cheapest_spot(it: &InstanceType) -> (String, f64) {
    it.available_offerings()
        .filter(|o| o.capacity_type == CapacityType::Spot)
        .min_by(|a, b| a.price.total_cmp(&b.price))
        .map(|o| (o.zone.clone(), o.price))
        .unwrap_or_else(|| panic!("{} has an available spot offering", it.name))
}

fn spot_claim(name: &str, instance_type: &str) -> kerf::api::NodeClaim {
    node_claim(
        name,
        serde_json::json!([
            {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["spot"]},
            {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": [instance_type]},
        ]),
    )
}

#[tokio::test]
async fn planning_follows_the_refreshed_zones_and_prices() {
    let f = fixture().await;
    let p = &f.provider;
    moto()
        .set_instance_type_zones(REGION, REZONED, REZONED, &["us-east-1c"])
        .unwrap();
    for (zone, price) in [("us-east-1a", 0.03), ("us-east-1b", 0.04)] {
        moto()
            .set_spot_price(REGION, REPRICED, zone, price)
            .unwrap();
    }
    assert!(
        p.catalog().is_none(),
        "no refresh yet: the controller plans with the embedded catalog"
    );
    let embedded = Catalog::embedded(REGION).unwrap().snapshot();
    assert!(
        planned(&embedded, REZONED).available_offerings().count() > 0,
        "the embedded catalog offers {REZONED} in the class's zones"
    );

    // One full refresh (DescribeInstanceTypes is slow in moto). The Pricing API fails in
    // moto: the embedded on-demand prices stay, and the refresh reports the failed part.
    assert!(!p.instance_types.refresh().await);
    let first = p.catalog().expect("a refresh publishes a catalog");
    assert!(first.seq_num() >= 1);

    // A type the account offers only outside the class's zones: listed, never available.
    let rezoned = planned(&first, REZONED);
    assert_eq!(rezoned.available_offerings().count(), 0, "{rezoned:?}");
    assert!(rezoned.offerings.iter().all(|o| o.zone == "us-east-1c"));
    let err = p.create(&spot_claim("catalog-rezoned", REZONED)).await;
    assert!(
        matches!(err, Err(CloudProviderError::InsufficientCapacity { ref offerings, .. }) if offerings.is_empty()),
        "{err:?}"
    );

    // Today's spot prices pick the zone, for planning and for the launch alike.
    assert_eq!(
        cheapest_spot(&planned(&first, REPRICED)),
        ("us-east-1a".to_owned(), 0.03)
    );
    let launched = p
        .create(&spot_claim("catalog-cheap-a", REPRICED))
        .await
        .unwrap();
    assert_eq!(zone(&launched), "us-east-1a");

    moto()
        .set_spot_price(REGION, REPRICED, "us-east-1a", 0.05)
        .unwrap();
    p.pricing.update_spot().await.unwrap();
    let second = p.instance_types.publish().expect("published");
    assert!(second.seq_num() > first.seq_num(), "the content changed");
    assert_eq!(
        p.catalog().map(|c| c.seq_num()),
        Some(second.seq_num()),
        "the controller reads the new catalog"
    );
    assert_eq!(
        cheapest_spot(&planned(&second, REPRICED)),
        ("us-east-1b".to_owned(), 0.04)
    );
    let launched = p
        .create(&spot_claim("catalog-cheap-b", REPRICED))
        .await
        .unwrap();
    assert_eq!(zone(&launched), "us-east-1b");

    // Nothing changed: the catalog keeps its number, so caches keyed on it stay.
    let again = p.instance_types.publish().expect("published");
    assert_eq!(again.seq_num(), second.seq_num());
}

fn zone(claim: &kerf::api::NodeClaim) -> String {
    claim.metadata.labels.as_ref().expect("launched labels")["topology.kubernetes.io/zone"].clone()
}
