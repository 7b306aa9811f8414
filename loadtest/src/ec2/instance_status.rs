//! DescribeInstanceStatus on the simulated EC2, and the two ways a test or a simulation
//! makes an instance unhealthy: [`SimulatedEc2::impair`] fails its instance or system
//! reachability check from a given time (EC2 reports `impaired_since`), and
//! [`SimulatedEc2::schedule_event`] schedules a maintenance event (reboot, retirement, ...)
//! as EC2 does on a degrading host. The answer has EC2's shape, so the controller's
//! instance-health poller reads it exactly as it reads the AWS provider's.
//!
//! As EC2: only running instances are answered (pending ones have no checks yet, stopped
//! and terminated ones are left out); the answer for an ID the region does not know is
//! nothing, which is what the AWS provider makes of EC2's `InvalidInstanceID.NotFound`.

use std::collections::HashMap;
use std::time::SystemTime;

use k8s_openapi::jiff::Timestamp;
use kerf::cloudprovider::BoxFuture;
use kerf::interruption::instance_status::{
    Category, InstanceStatus, InstanceStatusSource, ScheduledEvent, StatusCheck, StatusError,
};

use super::{Ec2Error, InstanceState, SimulatedEc2, find};

/// The failed checks and scheduled events of the instances that have any.
#[derive(Default)]
pub(super) struct Health {
    by_instance: HashMap<String, Problems>,
}

#[derive(Default, Clone)]
struct Problems {
    instance_since: Option<SystemTime>,
    system_since: Option<SystemTime>,
    events: Vec<ScheduledEvent>,
}

const OPERATION: &str = "DescribeInstanceStatus";

impl SimulatedEc2 {
    /// Fails `instance_id`'s instance check ([`Category::InstanceStatus`]) or system check
    /// ([`Category::SystemStatus`]) from `since` on; an event category is refused.
    pub fn impair(
        &self,
        instance_id: &str,
        check: Category,
        since: SystemTime,
    ) -> Result<(), Ec2Error> {
        let mut state = self.lock();
        find(&state, "Impair", instance_id)?;
        let problems = state
            .health
            .by_instance
            .entry(instance_id.to_owned())
            .or_default();
        match check {
            Category::InstanceStatus => problems.instance_since = Some(since),
            Category::SystemStatus => problems.system_since = Some(since),
            Category::EventStatus => {
                return Err(Ec2Error::InvalidParameter {
                    operation: "Impair",
                    message: "an event is scheduled with schedule_event, not impair".to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Schedules a maintenance event `code` (`instance-retirement`, `system-reboot`, ...)
    /// for `instance_id`, to start at `not_before`.
    pub fn schedule_event(
        &self,
        instance_id: &str,
        code: &str,
        not_before: SystemTime,
    ) -> Result<(), Ec2Error> {
        let mut state = self.lock();
        find(&state, "ScheduleEvent", instance_id)?;
        state
            .health
            .by_instance
            .entry(instance_id.to_owned())
            .or_default()
            .events
            .push(ScheduledEvent {
                code: code.to_owned(),
                description: format!("The instance is scheduled for {code}"),
                not_before: timestamp(not_before),
            });
        Ok(())
    }

    /// The statuses of the running instances among `instance_ids`.
    pub fn describe_instance_status(
        &self,
        instance_ids: &[String],
    ) -> Result<Vec<InstanceStatus>, Ec2Error> {
        self.admit(OPERATION)?;
        let state = self.lock();
        Ok(instance_ids
            .iter()
            .filter_map(|id| state.instances.get(id))
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| {
                let problems = state
                    .health
                    .by_instance
                    .get(&i.instance_id)
                    .cloned()
                    .unwrap_or_default();
                InstanceStatus {
                    instance_id: i.instance_id.clone(),
                    instance_checks: vec![reachability(problems.instance_since)],
                    system_checks: vec![reachability(problems.system_since)],
                    events: problems.events,
                }
            })
            .collect())
    }
}

impl InstanceStatusSource for SimulatedEc2 {
    fn describe<'a>(
        &'a self,
        instance_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceStatus>, StatusError>> {
        Box::pin(async move {
            self.describe_instance_status(instance_ids)
                .map_err(|e| StatusError::Describe {
                    reason: e.to_string(),
                })
        })
    }
}

fn reachability(failing_since: Option<SystemTime>) -> StatusCheck {
    StatusCheck {
        name: "reachability".to_owned(),
        status: if failing_since.is_some() {
            "failed"
        } else {
            "passed"
        }
        .to_owned(),
        impaired_since: failing_since.and_then(timestamp),
    }
}

fn timestamp(time: SystemTime) -> Option<Timestamp> {
    Timestamp::try_from(time).ok()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kerf::interruption::instance_status::{Remedy, assess};

    use super::*;
    use crate::ec2::{
        CapacityType, CreateFleetRequest, Ec2Config, FleetOverride, LaunchTemplateConfig,
        OfferingKey, PricedOffering,
    };

    async fn running_instances(count: u32) -> (SimulatedEc2, Vec<String>) {
        let key = OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
        };
        let ec2 = SimulatedEc2::new(
            Ec2Config::instant("us-east-1"),
            [PricedOffering {
                key: key.clone(),
                price: 0.096,
            }],
        );
        let request = CreateFleetRequest {
            launch_template_configs: vec![LaunchTemplateConfig {
                launch_template_name: "lt".into(),
                overrides: vec![FleetOverride {
                    capacity_reservation_id: None,
                    instance_type: key.instance_type,
                    zone: key.zone,
                    ..FleetOverride::default()
                }],
            }],
            capacity_type: Some(CapacityType::OnDemand),
            total_target_capacity: count,
            ..CreateFleetRequest::default()
        };
        let launched = ec2.create_fleet(&request).await.expect("launches");
        let ids = launched
            .instances
            .iter()
            .flat_map(|i| i.instance_ids.clone())
            .collect();
        (ec2, ids)
    }

    #[tokio::test]
    async fn impaired_and_scheduled_instances_are_answered_as_ec2_does() {
        let (ec2, ids) = running_instances(3).await;
        assert_eq!(ids.len(), 3);
        let ten_minutes_ago = SystemTime::now() - Duration::from_secs(600);
        ec2.impair(&ids[0], Category::SystemStatus, ten_minutes_ago)
            .unwrap();
        ec2.schedule_event(&ids[1], "instance-retirement", SystemTime::now())
            .unwrap();
        let mut asked = ids.clone();
        asked.push("i-0000000000000dead".to_owned());
        let statuses = ec2.describe_instance_status(&asked).unwrap();
        assert_eq!(statuses.len(), 3, "the unknown id is left out");
        let now = Timestamp::now();
        let remedy = |id: &str| {
            let status = statuses.iter().find(|s| s.instance_id == id).unwrap();
            assess(status, now).map(|u| u.remedy)
        };
        assert_eq!(remedy(&ids[0]), Some(Remedy::Terminate));
        assert_eq!(remedy(&ids[1]), Some(Remedy::Drain));
        assert_eq!(remedy(&ids[2]), None);
        assert_eq!(ec2.api_calls().calls(OPERATION), 1);
    }
}
