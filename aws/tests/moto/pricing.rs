//! Prices: spot from DescribeSpotPriceHistory, on-demand falling back to the embedded table
//! when the Pricing API fails (moto answers it with 500) or is not reachable at all.

use crate::support::*;
use kerf_aws::pricing::{PricingError, PricingProvider};

#[tokio::test]
async fn spot_prices_come_from_the_price_history() {
    let c = clients().await;
    let p = PricingProvider::new(c.pricing.clone(), c.ec2.clone(), REGION, false);
    let embedded = p
        .spot_price("m5.large", "us-east-1a")
        .expect("embedded spot price");
    let count = p.update_spot().await.unwrap();
    assert!(
        count > 100,
        "moto's history covers many offerings, got {count}"
    );
    let live = p
        .spot_price("m5.large", "us-east-1a")
        .expect("live spot price");
    // moto's prices are placeholders, far from the embedded estimate.
    assert_ne!(live, embedded);
    assert_eq!(p.live_counts().1, count);
}

#[tokio::test]
async fn on_demand_prices_fall_back_to_the_embedded_table() {
    let c = clients().await;
    let p = PricingProvider::new(c.pricing.clone(), c.ec2.clone(), REGION, false);
    let err = p.update_on_demand().await.unwrap_err();
    assert!(matches!(err, PricingError::GetProducts(_)), "{err}");
    assert_eq!(p.on_demand_price("m5.large"), Some(0.096));

    let isolated = PricingProvider::new(c.pricing.clone(), c.ec2.clone(), REGION, true);
    assert_eq!(isolated.update_on_demand().await, Ok(0));
    assert_eq!(isolated.live_counts(), (0, 0));
}
