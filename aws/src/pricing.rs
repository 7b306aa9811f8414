//! Offering prices. On-demand prices come from the Pricing API's GetProducts (Linux, shared
//! tenancy, and dedicated bare metal), refreshed every 12 hours; spot prices from EC2's
//! DescribeSpotPriceHistory, latest price per (type, zone). Until a refresh succeeds — or
//! never, with `ISOLATED_VPC=true` where the Pricing API is unreachable — the embedded
//! catalog's prices stand in. Refreshes merge into what is known, so a partial answer never
//! removes a price.

use crate::errors::ApiError;
use aws_sdk_pricing::types::{Filter as PricingFilter, FilterType};
use kerf::catalog::Catalog;
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// How often prices are refreshed.
pub const PRICING_REFRESH_INTERVAL: Duration = Duration::from_secs(12 * 3600);

/// Why a price refresh failed (the previous prices stay in use).
#[derive(Clone, Debug, Error, PartialEq)]
pub enum PricingError {
    #[error("fetching on-demand prices: {0}")]
    GetProducts(ApiError),
    #[error("fetching spot prices: {0}")]
    SpotPriceHistory(ApiError),
    #[error("the {0} answer held no prices")]
    Empty(&'static str),
}

/// Known prices, live where fetched, embedded otherwise.
pub struct PricingProvider {
    pricing: aws_sdk_pricing::Client,
    ec2: aws_sdk_ec2::Client,
    region: String,
    isolated_vpc: bool,
    catalog: Option<Catalog>,
    on_demand: RwLock<HashMap<String, f64>>,
    /// When on-demand prices were last fetched; `None`: the embedded catalog's are in use.
    on_demand_fetched: RwLock<Option<SystemTime>>,
    spot: RwLock<HashMap<(String, String), f64>>,
}

#[derive(Deserialize)]
struct PriceItem {
    #[serde(default)]
    product: Product,
    #[serde(default)]
    terms: Terms,
}

#[derive(Default, Deserialize)]
struct Product {
    #[serde(default)]
    attributes: HashMap<String, String>,
}

#[derive(Default, Deserialize)]
struct Terms {
    #[serde(rename = "OnDemand", default)]
    on_demand: HashMap<String, Term>,
}

#[derive(Deserialize)]
struct Term {
    #[serde(rename = "priceDimensions", default)]
    price_dimensions: HashMap<String, Dimension>,
}

#[derive(Deserialize)]
struct Dimension {
    #[serde(rename = "pricePerUnit", default)]
    price_per_unit: HashMap<String, String>,
}

/// The one line a failed on-demand refresh logs: what failed (EC2's or the SDK's words, not
/// its debug dump), how old the prices in use are, and the setting for a VPC without the
/// Pricing API. `fetched_ago` is `None` while the embedded catalog's prices are in use.
pub fn on_demand_failure_message(error: &PricingError, fetched_ago: Option<Duration>) -> String {
    let in_use = match fetched_ago {
        Some(age) => format!("keeping prices fetched {} min ago", age.as_secs() / 60),
        None => "keeping the embedded catalog's prices".to_owned(),
    };
    format!(
        "refreshing on-demand prices failed ({error}); {in_use}; if this VPC cannot reach the \
         Pricing API (api.pricing.us-east-1.amazonaws.com), set ISOLATED_VPC=true"
    )
}

/// The currency GetProducts prices a region in.
pub fn currency(region: &str) -> &'static str {
    if region.starts_with("cn-") {
        "CNY"
    } else {
        "USD"
    }
}

/// Prices per instance type from GetProducts `PriceList` entries (each a JSON document).
/// Entries that do not parse or carry no positive price are skipped.
pub fn parse_price_list<'a>(
    entries: impl IntoIterator<Item = &'a str>,
    currency: &str,
) -> HashMap<String, f64> {
    let mut prices = HashMap::new();
    for entry in entries {
        let item: PriceItem = match serde_json::from_str(entry) {
            Ok(item) => item,
            Err(e) => {
                tracing::warn!(error = %e, "skipping an unreadable pricing entry");
                continue;
            }
        };
        let Some(instance_type) = item.product.attributes.get("instanceType") else {
            continue;
        };
        let price = item
            .terms
            .on_demand
            .values()
            .flat_map(|t| t.price_dimensions.values())
            .filter_map(|d| d.price_per_unit.get(currency)?.parse::<f64>().ok())
            .find(|p| *p > 0.0);
        if let Some(price) = price {
            prices.insert(instance_type.clone(), price);
        }
    }
    prices
}

fn term_match(field: &str, value: &str) -> PricingFilter {
    PricingFilter::builder()
        .r#type(FilterType::TermMatch)
        .field(field)
        .value(value)
        .build()
        .expect("type, field and value are all set")
}

impl PricingProvider {
    pub fn new(
        pricing: aws_sdk_pricing::Client,
        ec2: aws_sdk_ec2::Client,
        region: &str,
        isolated_vpc: bool,
    ) -> Self {
        Self {
            pricing,
            ec2,
            region: region.to_owned(),
            isolated_vpc,
            catalog: Catalog::embedded(region).ok(),
            on_demand: RwLock::new(HashMap::new()),
            on_demand_fetched: RwLock::new(None),
            spot: RwLock::new(HashMap::new()),
        }
    }

    /// The on-demand price of `instance_type`: live, else embedded.
    pub fn on_demand_price(&self, instance_type: &str) -> Option<f64> {
        let live = self
            .on_demand
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(instance_type)
            .copied();
        live.or_else(|| self.catalog.and_then(|c| c.on_demand_price(instance_type)))
    }

    /// The spot price of `instance_type` in `zone`: live, else embedded.
    pub fn spot_price(&self, instance_type: &str, zone: &str) -> Option<f64> {
        let key = (instance_type.to_owned(), zone.to_owned());
        let live = self
            .spot
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .copied();
        live.or_else(|| {
            let catalog = self.catalog?;
            catalog
                .offerings(instance_type)
                .into_iter()
                .find(|o| {
                    o.zone == zone
                        && o.capacity_type == kerf::catalog::CapacityType::Spot
                        && o.available
                })
                .map(|o| o.price)
        })
    }

    /// Number of live on-demand and spot prices known.
    pub fn live_counts(&self) -> (usize, usize) {
        (
            self.on_demand
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .len(),
            self.spot.read().unwrap_or_else(|p| p.into_inner()).len(),
        )
    }

    /// How long ago on-demand prices were fetched; `None` while the embedded ones are used.
    pub fn on_demand_age(&self) -> Option<Duration> {
        let fetched = *self
            .on_demand_fetched
            .read()
            .unwrap_or_else(|p| p.into_inner());
        fetched.map(|at| at.elapsed().unwrap_or_default())
    }

    /// Refreshes on-demand prices from the Pricing API; `Ok(0)` without calling it in an
    /// isolated VPC or a GovCloud region (no Pricing API there).
    pub async fn update_on_demand(&self) -> Result<usize, PricingError> {
        if self.isolated_vpc || self.region.starts_with("us-gov") {
            tracing::debug!(
                region = self.region,
                "on-demand prices stay embedded: no Pricing API reachable"
            );
            return Ok(0);
        }
        let mut prices = self
            .fetch_on_demand(&[("tenancy", "Shared"), ("productFamily", "Compute Instance")])
            .await?;
        prices.extend(
            self.fetch_on_demand(&[
                ("tenancy", "Dedicated"),
                ("productFamily", "Compute Instance (bare metal)"),
            ])
            .await?,
        );
        if prices.is_empty() {
            return Err(PricingError::Empty("GetProducts"));
        }
        let count = prices.len();
        self.on_demand
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(prices);
        *self
            .on_demand_fetched
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(SystemTime::now());
        tracing::debug!(instance_types = count, "updated on-demand pricing");
        Ok(count)
    }

    async fn fetch_on_demand(
        &self,
        extra: &[(&str, &str)],
    ) -> Result<HashMap<String, f64>, PricingError> {
        let mut filters = vec![
            term_match("regionCode", &self.region),
            term_match("serviceCode", "AmazonEC2"),
            term_match("preInstalledSw", "NA"),
            term_match("operatingSystem", "Linux"),
            term_match("capacitystatus", "Used"),
            term_match("marketoption", "OnDemand"),
        ];
        filters.extend(extra.iter().map(|(f, v)| term_match(f, v)));
        let mut pages = self
            .pricing
            .get_products()
            .service_code("AmazonEC2")
            .set_filters(Some(filters))
            .into_paginator()
            .send();
        let mut prices = HashMap::new();
        while let Some(page) = pages.next().await {
            let page =
                page.map_err(|e| PricingError::GetProducts(ApiError::from_sdk("GetProducts", e)))?;
            prices.extend(parse_price_list(
                page.price_list().iter().map(String::as_str),
                currency(&self.region),
            ));
        }
        Ok(prices)
    }

    /// Refreshes spot prices: the latest Linux price per type and zone.
    pub async fn update_spot(&self) -> Result<usize, PricingError> {
        let mut pages = self
            .ec2
            .describe_spot_price_history()
            .product_descriptions("Linux/UNIX")
            .product_descriptions("Linux/UNIX (Amazon VPC)")
            .start_time(aws_sdk_ec2::primitives::DateTime::from(SystemTime::now()))
            .into_paginator()
            .send();
        let mut latest: HashMap<(String, String), (i64, f64)> = HashMap::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| {
                PricingError::SpotPriceHistory(ApiError::from_sdk("DescribeSpotPriceHistory", e))
            })?;
            for record in page.spot_price_history() {
                let (Some(t), Some(zone), Some(price), Some(ts)) = (
                    record.instance_type(),
                    record.availability_zone(),
                    record.spot_price().and_then(|p| p.parse::<f64>().ok()),
                    record.timestamp(),
                ) else {
                    continue;
                };
                let key = (t.as_str().to_owned(), zone.to_owned());
                let newer = latest.get(&key).is_none_or(|(seen, _)| ts.secs() >= *seen);
                if newer {
                    latest.insert(key, (ts.secs(), price));
                }
            }
        }
        if latest.is_empty() {
            return Err(PricingError::Empty("DescribeSpotPriceHistory"));
        }
        let count = latest.len();
        self.spot
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .extend(latest.into_iter().map(|(k, (_, p))| (k, p)));
        tracing::debug!(offerings = count, "updated spot pricing");
        Ok(count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct Page {
        #[serde(rename = "PriceList")]
        price_list: Vec<String>,
    }

    #[test]
    fn a_failed_refresh_is_one_line_with_the_age_of_the_prices_and_the_isolated_vpc_hint() {
        let error = PricingError::GetProducts(ApiError {
            operation: "GetProducts",
            code: None,
            message: "dispatch failure: io error: tcp connect error: Connection refused".into(),
        });
        let embedded = on_demand_failure_message(&error, None);
        assert_eq!(
            embedded,
            "refreshing on-demand prices failed (fetching on-demand prices: GetProducts failed: \
             dispatch failure: io error: tcp connect error: Connection refused); keeping the \
             embedded catalog's prices; if this VPC cannot reach the Pricing API \
             (api.pricing.us-east-1.amazonaws.com), set ISOLATED_VPC=true"
        );
        assert!(embedded.contains(kerf::troubleshooting::documented("pricing-unreachable")));
        let fetched = on_demand_failure_message(&error, Some(Duration::from_secs(3 * 3600)));
        assert!(
            fetched.contains("keeping prices fetched 180 min ago"),
            "{fetched}"
        );
        assert!(!fetched.contains('\n'));
    }

    #[test]
    fn parses_recorded_get_products_pages() {
        let pages: Vec<Page> =
            serde_json::from_str(include_str!("../testdata/pricing-get-products.json")).unwrap();
        let mut prices = HashMap::new();
        for page in &pages {
            prices.extend(parse_price_list(
                page.price_list.iter().map(String::as_str),
                "USD",
            ));
        }
        assert_eq!(prices.len(), 3, "{prices:?}");
        assert_eq!(prices["m5.large"], 0.096);
        assert_eq!(prices["c5.large"], 0.085);
        assert_eq!(prices["m6g.large"], 0.077);
        // A zero price is no price; unreadable and type-less entries are skipped.
        assert!(!prices.contains_key("p5.48xlarge"));
    }

    #[test]
    fn currency_per_partition() {
        assert_eq!(currency("cn-north-1"), "CNY");
        assert_eq!(currency("eu-west-1"), "USD");
        let entry = r#"{"product":{"attributes":{"instanceType":"m5.large"}},"terms":{"OnDemand":{"t":{"priceDimensions":{"d":{"pricePerUnit":{"CNY":"0.7"}}}}}}}"#;
        assert_eq!(parse_price_list([entry], "CNY")["m5.large"], 0.7);
        assert!(parse_price_list([entry], "USD").is_empty());
    }
}
