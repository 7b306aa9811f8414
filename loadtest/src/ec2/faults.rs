//! Injected faults: pools without capacity (ICE), a fraction of throttled calls, the
//! per-operation call counters reports read, and the log of writes by caller that tells
//! which controller replica changed the region, and when. Kept apart from the instance state so the
//! allocation logic and the fault bookkeeping each read as one idea.

use super::error::Ec2ConfigError;
use super::types::{CapacityType, CreateFleetRequest, FleetError, OfferingKey};
use std::collections::{BTreeMap, HashSet};

/// Pools currently out of capacity. Toggled at runtime by tests and the load harness.
#[derive(Debug, Default)]
pub(crate) struct IceSet {
    pools: HashSet<OfferingKey>,
}

impl IceSet {
    pub(crate) fn set(&mut self, key: OfferingKey, insufficient: bool) {
        if insufficient {
            self.pools.insert(key);
        } else {
            self.pools.remove(&key);
        }
    }

    pub(crate) fn contains(&self, key: &OfferingKey) -> bool {
        self.pools.contains(key)
    }

    pub(crate) fn clear(&mut self) {
        self.pools.clear();
    }

    pub(crate) fn snapshot(&self) -> Vec<OfferingKey> {
        let mut pools: Vec<_> = self.pools.iter().cloned().collect();
        pools.sort();
        pools
    }
}

/// A refusal of every CreateFleet request (of one capacity type, or all) with one error code,
/// as EC2 answers a request it rejects rather than lacks capacity for (an invalid block
/// device mapping, an unusable KMS key, spot without its service-linked role): no instance,
/// and the code against every override.
#[derive(Clone, Debug)]
pub(crate) struct Refusal {
    pub(crate) capacity_type: Option<CapacityType>,
    pub(crate) code: String,
    pub(crate) message: String,
}

impl Refusal {
    /// The errors for `request` launching `capacity_type`, or `None` when this refusal does
    /// not apply to it.
    pub(crate) fn errors(
        &self,
        request: &CreateFleetRequest,
        capacity_type: CapacityType,
    ) -> Option<Vec<FleetError>> {
        if self.capacity_type.is_some_and(|c| c != capacity_type) {
            return None;
        }
        let errors = request
            .launch_template_configs
            .iter()
            .flat_map(|lt| lt.overrides.iter().map(move |o| (lt, o)))
            .map(|(lt, over)| FleetError {
                error_code: self.code.clone(),
                error_message: self.message.clone(),
                instance_type: over.instance_type.clone(),
                zone: over.zone.clone(),
                capacity_type,
                launch_template_name: lt.launch_template_name.clone(),
            })
            .collect();
        Some(errors)
    }
}

/// Failures of the next CreateFleet calls, counted down per call: first the ones refused
/// before launching anything, then the ones whose answer is lost after the launch.
#[derive(Debug, Default)]
pub(crate) struct FleetFailures {
    pub(crate) before_launch: u32,
    pub(crate) after_launch: u32,
}

impl FleetFailures {
    /// Whether this call fails, and if so whether it launches first.
    pub(crate) fn next(&mut self) -> Option<bool> {
        if self.before_launch > 0 {
            self.before_launch -= 1;
            return Some(false);
        }
        if self.after_launch > 0 {
            self.after_launch -= 1;
            return Some(true);
        }
        None
    }
}

/// Rejects exactly `fraction` of calls, spread evenly: an accumulator gains `fraction` per
/// call and a call is throttled each time it reaches 1. Deterministic on purpose, so a
/// load run is reproducible and a test can assert the exact count.
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    fraction: f64,
    credit: f64,
}

impl Throttle {
    pub(crate) fn set_fraction(&mut self, fraction: f64) -> Result<(), Ec2ConfigError> {
        if !(0.0..=1.0).contains(&fraction) {
            return Err(Ec2ConfigError::ThrottleFraction(fraction));
        }
        self.fraction = fraction;
        self.credit = 0.0;
        Ok(())
    }

    /// Whether this call is throttled.
    pub(crate) fn admit(&mut self) -> bool {
        if self.fraction <= 0.0 {
            return false;
        }
        self.credit += self.fraction;
        if self.credit >= 1.0 - f64::EPSILON {
            self.credit -= 1.0;
            return true;
        }
        false
    }
}

/// How many times each API operation was called, and how many of those were throttled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCount {
    pub calls: u64,
    pub throttled: u64,
}

/// Calls per operation name (`CreateFleet`, `DescribeInstances`, ...).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ApiCalls {
    pub by_operation: BTreeMap<&'static str, CallCount>,
}

impl ApiCalls {
    pub(crate) fn record(&mut self, operation: &'static str, throttled: bool) {
        let count = self.by_operation.entry(operation).or_default();
        count.calls += 1;
        if throttled {
            count.throttled += 1;
        }
    }

    /// Calls of `operation` (0 when never called).
    pub fn calls(&self, operation: &str) -> u64 {
        self.by_operation.get(operation).map_or(0, |c| c.calls)
    }

    /// Throttled calls of `operation`.
    pub fn throttled(&self, operation: &str) -> u64 {
        self.by_operation.get(operation).map_or(0, |c| c.throttled)
    }

    pub fn total_calls(&self) -> u64 {
        self.by_operation.values().map(|c| c.calls).sum()
    }

    pub fn total_throttled(&self) -> u64 {
        self.by_operation.values().map(|c| c.throttled).sum()
    }
}

/// One write call that changed the region (CreateFleet, TerminateInstances, CreateTags):
/// when it was applied, who made it, and the instances it launched or touched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ec2Write {
    pub at: tokio::time::Instant,
    /// The caller's name ([`super::SimulatedEc2::as_caller`]); `None` for an unnamed handle.
    pub caller: Option<String>,
    pub operation: &'static str,
    pub instance_ids: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttle_rejects_the_exact_fraction() {
        let mut throttle = Throttle::default();
        throttle.set_fraction(0.25).expect("valid fraction");
        let rejected = (0..100).filter(|_| throttle.admit()).count();
        assert_eq!(rejected, 25);
    }

    #[test]
    fn throttle_off_and_full() {
        let mut throttle = Throttle::default();
        assert!((0..10).all(|_| !throttle.admit()));
        throttle.set_fraction(1.0).expect("valid fraction");
        assert!((0..10).all(|_| throttle.admit()));
    }

    #[test]
    fn throttle_fraction_out_of_range_is_refused() {
        let mut throttle = Throttle::default();
        assert_eq!(
            throttle.set_fraction(1.5),
            Err(Ec2ConfigError::ThrottleFraction(1.5))
        );
        assert!(throttle.set_fraction(f64::NAN).is_err());
    }

    #[test]
    fn fleet_failures_count_down_refusals_then_lost_answers() {
        let mut failures = FleetFailures {
            before_launch: 2,
            after_launch: 1,
        };
        let seen: Vec<_> = (0..5).map(|_| failures.next()).collect();
        assert_eq!(seen, [Some(false), Some(false), Some(true), None, None]);
    }

    #[test]
    fn ice_set_toggles() {
        let mut ice = IceSet::default();
        let key = OfferingKey::new("m5.large", "us-east-1a", super::super::CapacityType::Spot);
        ice.set(key.clone(), true);
        assert!(ice.contains(&key));
        ice.set(key.clone(), false);
        assert!(!ice.contains(&key));
    }
}
