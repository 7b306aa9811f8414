//! The price rules of the embedded catalog. Only us-east-1 on-demand prices are real data;
//! the rest is derived so that offline planning and the simulated cloud have plausible,
//! deterministic prices:
//!
//! * on-demand in another region = us-east-1 price × the region's multiplier
//!   ([`region_multiplier`], an approximation of the public list-price ratios; 1.25 for a
//!   region not in the table);
//! * spot = on-demand × a per-category ratio ([`spot_ratio`]: e.g. 0.38 for `c`, 0.40 for
//!   `m`, 0.45 for GPU and accelerator families) × a per-zone factor between 0.94 and 1.06
//!   picked by a hash of type and zone ([`zone_factor`]), so the cheapest zone differs by type;
//! * prices are rounded to 1e-5 USD per hour;
//! * a type without a us-east-1 price has no price anywhere (its offerings are unavailable).

/// The on-demand price in `region` from the us-east-1 price.
pub fn on_demand_price(us_east_1: f64, region: &str) -> f64 {
    round_price(us_east_1 * region_multiplier(region))
}

/// The spot price of `type_name` in `zone`, from its on-demand price in the same region.
pub fn spot_price(on_demand: f64, type_name: &str, zone: &str) -> f64 {
    let category = super::type_labels::category_and_generation(type_name).map_or("", |(c, _)| c);
    round_price(on_demand * spot_ratio(category) * zone_factor(type_name, zone))
}

/// Regional on-demand multipliers relative to us-east-1.
pub fn region_multiplier(region: &str) -> f64 {
    match region {
        "us-east-1" | "us-east-2" | "us-west-2" => 1.00,
        "us-west-1" => 1.17,
        "ca-central-1" | "ca-west-1" => 1.11,
        "eu-west-1" | "eu-south-2" => 1.11,
        "eu-west-2" => 1.16,
        "eu-west-3" | "eu-south-1" => 1.17,
        "eu-central-1" => 1.19,
        "eu-central-2" => 1.31,
        "eu-north-1" => 1.06,
        "il-central-1" => 1.21,
        "me-central-1" | "me-south-1" => 1.23,
        "af-south-1" => 1.32,
        "ap-east-1" => 1.37,
        "ap-south-1" | "ap-south-2" => 1.05,
        "ap-northeast-1" | "ap-northeast-3" => 1.29,
        "ap-northeast-2" => 1.23,
        "ap-southeast-1" | "ap-southeast-2" | "ap-southeast-3" | "ap-southeast-4" => 1.25,
        "ap-southeast-5" => 1.15,
        "sa-east-1" => 1.59,
        _ => 1.25,
    }
}

/// Spot price as a share of on-demand, by instance category.
pub fn spot_ratio(category: &str) -> f64 {
    match category {
        "c" => 0.38,
        "m" | "a" => 0.40,
        "r" | "x" | "z" => 0.35,
        "t" => 0.32,
        "i" | "d" | "h" | "im" | "is" => 0.40,
        "g" | "p" | "inf" | "trn" | "dl" | "f" | "vt" | "gr" => 0.45,
        _ => 0.42,
    }
}

/// A deterministic factor in `[0.94, 1.06]` from an FNV-1a hash of `type/zone`.
pub fn zone_factor(type_name: &str, zone: &str) -> f64 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in type_name
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(zone.bytes())
    {
        hash ^= byte as u32;
        hash = hash.wrapping_mul(0x0100_0193);
    }
    0.94 + 0.02 * (hash % 7) as f64
}

fn round_price(price: f64) -> f64 {
    (price * 1e5).round() / 1e5
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derives_prices_by_the_documented_rules() {
        assert_eq!(on_demand_price(0.096, "us-east-1"), 0.096);
        assert_eq!(on_demand_price(0.096, "eu-west-1"), 0.10656);
        assert_eq!(on_demand_price(0.1, "nowhere-1"), 0.125);
        let factor = zone_factor("m5.large", "us-east-1a");
        assert!((0.94..=1.06).contains(&factor));
        assert_eq!(
            spot_price(0.096, "m5.large", "us-east-1a"),
            round_price(0.096 * 0.40 * factor)
        );
        // The factor depends on the zone, so zones differ for the same type.
        let factors: std::collections::BTreeSet<u64> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|z| (zone_factor("m5.large", z) * 100.0) as u64)
            .collect();
        assert!(factors.len() > 1);
    }
}
