//! `--reservations FILE` (and a scenario's `reservations:`): the capacity reservations the
//! simulated region holds, as EC2 would list them to DescribeCapacityReservations. An
//! EC2NodeClass of the inputs selects them by `id` or `tags` in its
//! `capacityReservationSelectorTerms`, and a NodePool that allows `reserved` launches into
//! them, exactly as against AWS. The file is a YAML list, one entry per reservation:
//!
//! ```yaml
//! - {id: cr-0123456789abcdef0, instanceType: m5.large, zone: us-east-1a, count: 4}
//! - {id: cr-0123456789abcdef1, instanceType: m5.xlarge, zone: us-east-1b, count: 2,
//!    type: capacity-block, endsIn: 45m, tags: {team: ml}}
//! ```
//!
//! `type` is `default` (an ODCR, the default) or `capacity-block`; `interruptible` marks an
//! interruptible ODCR; `endsIn` (a Go duration from the start of the run) gives an end time,
//! which a Capacity Block must have.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use kerf::api::duration::Duration;
use kerf_loadtest::ec2::{CapacityReservation, ReservationType, SimulatedEc2};
use serde::Deserialize;

/// One reservation of the file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReservationSpec {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    /// Instances it holds.
    pub count: u32,
    #[serde(default, rename = "type")]
    pub reservation_type: Kind,
    #[serde(default)]
    pub interruptible: bool,
    /// Its end, from the start of the run.
    pub ends_in: Option<Duration>,
    #[serde(default)]
    pub tags: BTreeMap<String, String>,
}

/// `type`: an On-Demand Capacity Reservation or a Capacity Block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    #[default]
    Default,
    CapacityBlock,
}

/// Reads and checks `path`; every problem is one message naming the entry.
pub fn read(path: &Path) -> Result<Vec<ReservationSpec>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let specs: Vec<ReservationSpec> =
        serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let problems: Vec<String> = specs
        .iter()
        .enumerate()
        .filter_map(|(i, spec)| {
            problem(spec).map(|p| format!("{}: [{i}] {}: {p}", path.display(), spec.id))
        })
        .collect();
    if problems.is_empty() {
        Ok(specs)
    } else {
        Err(problems.join("\n"))
    }
}

fn problem(spec: &ReservationSpec) -> Option<String> {
    if !spec.id.starts_with("cr-") {
        return Some("an id starts with cr-".into());
    }
    if spec.count == 0 {
        return Some("count must be at least 1".into());
    }
    if spec.reservation_type == Kind::CapacityBlock && spec.ends_in.is_none() {
        return Some("a capacity-block needs endsIn".into());
    }
    if spec.reservation_type == Kind::CapacityBlock && spec.interruptible {
        return Some("a capacity-block is not interruptible".into());
    }
    None
}

/// Puts `specs` into the region, their ends counted from `started`.
pub fn seed(ec2: &SimulatedEc2, specs: &[ReservationSpec], started: SystemTime) {
    for spec in specs {
        ec2.add_capacity_reservation(CapacityReservation {
            reservation_type: match spec.reservation_type {
                Kind::Default => ReservationType::Default,
                Kind::CapacityBlock => ReservationType::CapacityBlock,
            },
            interruptible: spec.interruptible,
            end_time: spec.ends_in.as_ref().map(|d| started + d.as_std()),
            tags: spec.tags.clone(),
            ..CapacityReservation::new(&spec.id, &spec.instance_type, &spec.zone, spec.count)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_into_reservations_and_bad_entries_are_named() {
        let dir =
            std::env::temp_dir().join(format!("kerf-sim-reservations-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let file = dir.join("reservations.yaml");
        std::fs::write(
            &file,
            "- {id: cr-0000000000000000a, instanceType: m5.large, zone: us-east-1a, count: 2}\n\
             - {id: cr-0000000000000000b, instanceType: m5.large, zone: us-east-1b, count: 1,\n   \
                type: capacity-block, endsIn: 45m, tags: {team: ml}}\n",
        )
        .expect("write");
        let specs = read(&file).expect("reads");
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[1].reservation_type, Kind::CapacityBlock);
        assert_eq!(specs[1].tags["team"], "ml");
        std::fs::write(
            &file,
            "- {id: cr-0000000000000000c, instanceType: m5.large, zone: us-east-1a, count: 1, type: capacity-block}\n",
        )
        .expect("write");
        let error = read(&file).expect_err("a block without an end");
        std::fs::remove_dir_all(&dir).expect("cleaned up");
        assert!(
            error.contains("cr-0000000000000000c") && error.contains("endsIn"),
            "{error}"
        );
    }
}
