//! `--ice TYPE:ZONE[:CAPACITY]`: capacity pools the simulated EC2 answers with
//! `InsufficientInstanceCapacity`, as a real region does when a pool runs dry. `*` stands
//! for every instance type or every zone, and the capacity type (`spot` or `on-demand`)
//! defaults to both. The syntax is checked by clap; the names are checked against the
//! region's catalog, so a typo fails at start-up instead of silently injecting nothing.

use std::fmt;
use std::str::FromStr;

use kerf_loadtest::ec2::{CapacityType, OfferingKey, PricedOffering};

/// One `--ice` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IceTarget {
    /// `None` for `*`.
    pub instance_type: Option<String>,
    /// `None` for `*`.
    pub zone: Option<String>,
    /// `None` for both.
    pub capacity_type: Option<CapacityType>,
}

impl fmt::Display for IceTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let any = |part: &Option<String>| part.clone().unwrap_or_else(|| "*".to_owned());
        write!(f, "{}:{}", any(&self.instance_type), any(&self.zone))?;
        if let Some(capacity_type) = self.capacity_type {
            write!(f, ":{capacity_type}")?;
        }
        Ok(())
    }
}

impl FromStr for IceTarget {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = text.split(':').collect();
        let (instance_type, zone, capacity_type) = match parts.as_slice() {
            [instance_type, zone] => (*instance_type, *zone, None),
            [instance_type, zone, capacity_type] => (*instance_type, *zone, Some(*capacity_type)),
            _ => {
                return Err(
                    "expected TYPE:ZONE or TYPE:ZONE:CAPACITY, e.g. m5.large:us-east-1a or *:us-east-1a:spot"
                        .to_owned(),
                );
            }
        };
        let name = |part: &str, what: &str| match part.trim() {
            "" => Err(format!("the {what} is empty (use * for any)")),
            "*" => Ok(None),
            name => Ok(Some(name.to_owned())),
        };
        let capacity_type = capacity_type
            .map(|text| {
                CapacityType::parse(text.trim())
                    .ok_or_else(|| format!("capacity type {text:?} is not spot or on-demand"))
            })
            .transpose()?;
        Ok(Self {
            instance_type: name(instance_type, "instance type")?,
            zone: name(zone, "zone")?,
            capacity_type,
        })
    }
}

impl IceTarget {
    fn covers(&self, key: &OfferingKey) -> bool {
        self.instance_type
            .as_ref()
            .is_none_or(|t| *t == key.instance_type)
            && self.zone.as_ref().is_none_or(|z| *z == key.zone)
            && self.capacity_type.is_none_or(|c| c == key.capacity_type)
    }
}

/// Why an `--ice` value names nothing the region sells.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IceError {
    #[error("--ice {target}: the region sells no instance type {name:?}")]
    UnknownInstanceType { target: String, name: String },
    #[error("--ice {target}: the region has no zone {name:?}")]
    UnknownZone { target: String, name: String },
    #[error("--ice {target}: the region sells no such pool")]
    NoPool { target: String },
}

/// The pools of `offerings` that `targets` cover, or the first target naming nothing.
pub fn pools(
    targets: &[IceTarget],
    offerings: &[PricedOffering],
) -> Result<Vec<OfferingKey>, IceError> {
    let mut pools = Vec::new();
    for target in targets {
        check_names(target, offerings)?;
        let before = pools.len();
        pools.extend(
            offerings
                .iter()
                .filter(|o| target.covers(&o.key))
                .map(|o| o.key.clone()),
        );
        if pools.len() == before {
            return Err(IceError::NoPool {
                target: target.to_string(),
            });
        }
    }
    pools.sort();
    pools.dedup();
    Ok(pools)
}

fn check_names(target: &IceTarget, offerings: &[PricedOffering]) -> Result<(), IceError> {
    if let Some(name) = &target.instance_type
        && !offerings.iter().any(|o| o.key.instance_type == *name)
    {
        return Err(IceError::UnknownInstanceType {
            target: target.to_string(),
            name: name.clone(),
        });
    }
    if let Some(name) = &target.zone
        && !offerings.iter().any(|o| o.key.zone == *name)
    {
        return Err(IceError::UnknownZone {
            target: target.to_string(),
            name: name.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn offering(instance_type: &str, zone: &str, capacity_type: CapacityType) -> PricedOffering {
        PricedOffering {
            key: OfferingKey::new(instance_type, zone, capacity_type),
            price: 0.1,
        }
    }

    fn region() -> Vec<PricedOffering> {
        let mut offerings = Vec::new();
        for instance_type in ["m5.large", "c5.large"] {
            for zone in ["us-east-1a", "us-east-1b"] {
                for capacity_type in [CapacityType::Spot, CapacityType::OnDemand] {
                    offerings.push(offering(instance_type, zone, capacity_type));
                }
            }
        }
        offerings
    }

    #[test]
    fn parses_type_zone_and_optional_capacity_type() {
        let target: IceTarget = "m5.large:us-east-1a".parse().expect("valid");
        assert_eq!(target.instance_type.as_deref(), Some("m5.large"));
        assert_eq!(target.zone.as_deref(), Some("us-east-1a"));
        assert_eq!(target.capacity_type, None);
        let target: IceTarget = "*:us-east-1b:spot".parse().expect("valid");
        assert_eq!(target.instance_type, None);
        assert_eq!(target.capacity_type, Some(CapacityType::Spot));
        assert_eq!(target.to_string(), "*:us-east-1b:spot");
    }

    #[test]
    fn refuses_malformed_values() {
        assert!("m5.large".parse::<IceTarget>().is_err());
        assert!("m5.large:".parse::<IceTarget>().is_err());
        assert!("a:b:c:d".parse::<IceTarget>().is_err());
        let error = "m5.large:us-east-1a:reserved"
            .parse::<IceTarget>()
            .expect_err("reserved is not launchable");
        assert!(error.contains("reserved"), "{error}");
    }

    #[test]
    fn expands_to_the_pools_it_covers() {
        let offerings = region();
        let one: IceTarget = "m5.large:us-east-1a".parse().expect("valid");
        assert_eq!(
            pools(&[one], &offerings).expect("known"),
            vec![
                OfferingKey::new("m5.large", "us-east-1a", CapacityType::Spot),
                OfferingKey::new("m5.large", "us-east-1a", CapacityType::OnDemand),
            ]
            .into_iter()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect::<Vec<_>>()
        );
        let zone: IceTarget = "*:us-east-1b:spot".parse().expect("valid");
        assert_eq!(pools(&[zone], &offerings).expect("known").len(), 2);
    }

    #[test]
    fn names_the_flag_and_the_unknown_name() {
        let offerings = region();
        let typo: IceTarget = "m5.lrge:us-east-1a".parse().expect("valid syntax");
        let error = pools(&[typo], &offerings).expect_err("unknown type");
        assert_eq!(
            error.to_string(),
            "--ice m5.lrge:us-east-1a: the region sells no instance type \"m5.lrge\""
        );
        let zone: IceTarget = "m5.large:us-west-2a".parse().expect("valid syntax");
        assert!(
            pools(&[zone], &offerings)
                .expect_err("unknown zone")
                .to_string()
                .starts_with("--ice m5.large:us-west-2a: the region has no zone")
        );
    }
}
