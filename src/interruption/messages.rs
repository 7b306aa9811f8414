//! EventBridge events as typed messages. Every event shares the [`Envelope`] (`version`,
//! `id`, `detail-type`, `source`, `time`, `region`, `resources`, `detail`); the pair
//! (`source`, `detail-type`) says which `detail` shape follows, as AWS documents them:
//!
//! | source | detail-type | detail |
//! |---|---|---|
//! | `aws.ec2` | `EC2 Spot Instance Interruption Warning` | `instance-id`, `instance-action` |
//! | `aws.ec2` | `EC2 Instance Rebalance Recommendation` | `instance-id` |
//! | `aws.ec2` | `EC2 Instance State-change Notification` | `instance-id`, `state` |
//! | `aws.ec2` | `EC2 Capacity Reservation Instance Interruption Warning` | `instance-id`, `instance-action` |
//! | `aws.health` | `AWS Health Event` | `service`, `eventTypeCategory`, `affectedEntities[].entityValue` |
//!
//! The parser is strict where a wrong guess would act on the wrong instance — a known kind
//! with a missing or mistyped field, an unreadable `time`, a body that is not an event at
//! all are [`ParseError`]s — and lenient where upstream is: an event of another kind, a
//! Health event for another service or category, or a state change to a state that needs
//! no action is [`Event::NoOp`]. The builders at the bottom write the same JSON, for the
//! simulated cluster's queue and for tests.

use k8s_openapi::jiff::Timestamp;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

pub const SOURCE_EC2: &str = "aws.ec2";
pub const SOURCE_HEALTH: &str = "aws.health";
pub const SPOT_INTERRUPTION: &str = "EC2 Spot Instance Interruption Warning";
pub const REBALANCE_RECOMMENDATION: &str = "EC2 Instance Rebalance Recommendation";
pub const STATE_CHANGE: &str = "EC2 Instance State-change Notification";
pub const CAPACITY_RESERVATION_INTERRUPTION: &str =
    "EC2 Capacity Reservation Instance Interruption Warning";
pub const HEALTH_EVENT: &str = "AWS Health Event";

/// States whose change means the instance is going away (upstream's accepted states).
const STOPPING_STATES: [&str; 2] = ["stopping", "stopped"];
const TERMINATING_STATES: [&str; 2] = ["shutting-down", "terminated"];

/// The fields every EventBridge event has; `D` is the kind's `detail`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct Envelope<D> {
    pub version: String,
    pub id: String,
    pub detail_type: String,
    pub source: String,
    #[serde(default)]
    pub account: String,
    pub time: String,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub resources: Vec<String>,
    pub detail: D,
}

/// `detail` of a spot or capacity reservation interruption warning.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct InstanceActionDetail {
    pub instance_id: String,
    #[serde(default)]
    pub instance_action: String,
}

/// `detail` of a rebalance recommendation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct InstanceDetail {
    pub instance_id: String,
}

/// `detail` of an instance state-change notification.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub struct StateChangeDetail {
    pub instance_id: String,
    pub state: String,
}

/// `detail` of an AWS Health event.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthDetail {
    #[serde(default)]
    pub event_arn: String,
    pub service: String,
    #[serde(default)]
    pub event_type_code: String,
    pub event_type_category: String,
    #[serde(default)]
    pub affected_entities: Vec<AffectedEntity>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AffectedEntity {
    pub entity_value: String,
}

/// One parsed event.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// EventBridge's event id.
    pub id: String,
    /// When the event happened (its `time`): the start of the queue duration metric.
    pub time: Timestamp,
    pub event: Event,
}

/// What an event says, reduced to what the controller acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// EC2 reclaims this spot instance in two minutes.
    SpotInterruption { instance_id: String },
    /// EC2 recommends moving off this spot instance (elevated interruption risk).
    RebalanceRecommendation { instance_id: String },
    /// AWS Health scheduled maintenance (retirement, reboot) on these instances.
    ScheduledChange {
        instance_ids: Vec<String>,
        event_type_code: String,
    },
    /// The instance is stopping or stopped.
    Stopping { instance_id: String, state: String },
    /// The instance is shutting down or terminated.
    Terminating { instance_id: String, state: String },
    /// The capacity reservation this instance runs in reclaims it.
    CapacityReservationInterruption { instance_id: String },
    /// Anything else: nothing to do.
    NoOp { source: String, detail_type: String },
}

/// The `message_type` label of the interruption metrics (upstream's message kinds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    SpotInterrupted,
    RebalanceRecommendation,
    ScheduledChange,
    InstanceStopped,
    InstanceTerminated,
    CapacityReservationInterrupted,
    NoOp,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::SpotInterrupted => "spot_interrupted",
            Kind::RebalanceRecommendation => "rebalance_recommendation",
            Kind::ScheduledChange => "scheduled_change",
            Kind::InstanceStopped => "instance_stopped",
            Kind::InstanceTerminated => "instance_terminated",
            Kind::CapacityReservationInterrupted => "capacity_reservation_interrupted",
            Kind::NoOp => "no_op",
        }
    }

    /// What the controller does to the NodeClaims the message names.
    pub fn action(self) -> Action {
        match self {
            Kind::SpotInterrupted
            | Kind::ScheduledChange
            | Kind::InstanceStopped
            | Kind::InstanceTerminated
            | Kind::CapacityReservationInterrupted => Action::CordonAndDrain,
            Kind::RebalanceRecommendation | Kind::NoOp => Action::NoAction,
        }
    }
}

/// Upstream's two actions: delete the NodeClaim (the termination flow cordons and drains
/// it), or only tell (an Event).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    CordonAndDrain,
    NoAction,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::CordonAndDrain => "CordonAndDrain",
            Action::NoAction => "NoAction",
        }
    }
}

impl Message {
    pub fn kind(&self) -> Kind {
        match &self.event {
            Event::SpotInterruption { .. } => Kind::SpotInterrupted,
            Event::RebalanceRecommendation { .. } => Kind::RebalanceRecommendation,
            Event::ScheduledChange { .. } => Kind::ScheduledChange,
            Event::Stopping { .. } => Kind::InstanceStopped,
            Event::Terminating { .. } => Kind::InstanceTerminated,
            Event::CapacityReservationInterruption { .. } => Kind::CapacityReservationInterrupted,
            Event::NoOp { .. } => Kind::NoOp,
        }
    }

    /// The EC2 instances the message is about.
    pub fn instance_ids(&self) -> Vec<&str> {
        match &self.event {
            Event::SpotInterruption { instance_id }
            | Event::RebalanceRecommendation { instance_id }
            | Event::Stopping { instance_id, .. }
            | Event::Terminating { instance_id, .. }
            | Event::CapacityReservationInterruption { instance_id } => vec![instance_id],
            Event::ScheduledChange { instance_ids, .. } => {
                instance_ids.iter().map(String::as_str).collect()
            }
            Event::NoOp { .. } => Vec::new(),
        }
    }
}

/// Why a message body is not an event the controller can read.
#[derive(Debug, Clone, Error, PartialEq, Eq)]
pub enum ParseError {
    #[error("not an EventBridge event: {0}")]
    Envelope(String),
    #[error("{detail_type} event {id}: field detail: {reason}")]
    Detail {
        detail_type: String,
        id: String,
        reason: String,
    },
    #[error("event {id}: field time {time:?}: {reason}")]
    Time {
        id: String,
        time: String,
        reason: String,
    },
    #[error("{detail_type} event {id}: field {field} is empty")]
    Empty {
        detail_type: String,
        id: String,
        field: &'static str,
    },
}

/// Reads one queue message body.
pub fn parse(body: &str) -> Result<Message, ParseError> {
    let envelope: Envelope<serde_json::Value> =
        serde_json::from_str(body).map_err(|e| ParseError::Envelope(e.to_string()))?;
    let time = envelope
        .time
        .parse::<Timestamp>()
        .map_err(|e| ParseError::Time {
            id: envelope.id.clone(),
            time: envelope.time.clone(),
            reason: e.to_string(),
        })?;
    let event = event(&envelope)?;
    Ok(Message {
        id: envelope.id,
        time,
        event,
    })
}

fn event(envelope: &Envelope<serde_json::Value>) -> Result<Event, ParseError> {
    let noop = || Event::NoOp {
        source: envelope.source.clone(),
        detail_type: envelope.detail_type.clone(),
    };
    Ok(
        match (envelope.source.as_str(), envelope.detail_type.as_str()) {
            (SOURCE_EC2, SPOT_INTERRUPTION) => {
                let d: InstanceActionDetail = detail(envelope)?;
                Event::SpotInterruption {
                    instance_id: instance_id(envelope, d.instance_id)?,
                }
            }
            (SOURCE_EC2, REBALANCE_RECOMMENDATION) => {
                let d: InstanceDetail = detail(envelope)?;
                Event::RebalanceRecommendation {
                    instance_id: instance_id(envelope, d.instance_id)?,
                }
            }
            (SOURCE_EC2, CAPACITY_RESERVATION_INTERRUPTION) => {
                let d: InstanceActionDetail = detail(envelope)?;
                Event::CapacityReservationInterruption {
                    instance_id: instance_id(envelope, d.instance_id)?,
                }
            }
            (SOURCE_EC2, STATE_CHANGE) => {
                let d: StateChangeDetail = detail(envelope)?;
                let instance_id = instance_id(envelope, d.instance_id)?;
                let state = d.state;
                if STOPPING_STATES.contains(&state.as_str()) {
                    Event::Stopping { instance_id, state }
                } else if TERMINATING_STATES.contains(&state.as_str()) {
                    Event::Terminating { instance_id, state }
                } else {
                    noop()
                }
            }
            (SOURCE_HEALTH, HEALTH_EVENT) => {
                let d: HealthDetail = detail(envelope)?;
                if d.service != "EC2" || d.event_type_category != "scheduledChange" {
                    return Ok(noop());
                }
                Event::ScheduledChange {
                    instance_ids: d
                        .affected_entities
                        .into_iter()
                        .map(|e| e.entity_value)
                        .filter(|v| !v.is_empty())
                        .collect(),
                    event_type_code: d.event_type_code,
                }
            }
            _ => noop(),
        },
    )
}

fn detail<D: DeserializeOwned>(envelope: &Envelope<serde_json::Value>) -> Result<D, ParseError> {
    serde_json::from_value(envelope.detail.clone()).map_err(|e| ParseError::Detail {
        detail_type: envelope.detail_type.clone(),
        id: envelope.id.clone(),
        reason: e.to_string(),
    })
}

fn instance_id(envelope: &Envelope<serde_json::Value>, id: String) -> Result<String, ParseError> {
    if id.is_empty() {
        return Err(ParseError::Empty {
            detail_type: envelope.detail_type.clone(),
            id: envelope.id.clone(),
            field: "detail.instance-id",
        });
    }
    Ok(id)
}

// ---- builders: the JSON EventBridge delivers, for the simulated queue and tests ----

fn envelope<D: Serialize>(
    id: &str,
    source: &str,
    detail_type: &str,
    region: &str,
    time: Timestamp,
    resources: Vec<String>,
    detail: D,
) -> String {
    let envelope = Envelope {
        version: "0".to_owned(),
        id: id.to_owned(),
        detail_type: detail_type.to_owned(),
        source: source.to_owned(),
        account: "000000000000".to_owned(),
        time: time.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        region: region.to_owned(),
        resources,
        detail,
    };
    serde_json::to_string(&envelope).unwrap_or_else(|e| unreachable_json(&e))
}

/// Serializing plain strings into JSON cannot fail; this keeps the builders total.
fn unreachable_json(error: &serde_json::Error) -> String {
    format!("{{\"error\":{:?}}}", error.to_string())
}

fn instance_arn(region: &str, instance_id: &str) -> Vec<String> {
    vec![format!(
        "arn:aws:ec2:{region}:000000000000:instance/{instance_id}"
    )]
}

/// An `EC2 Spot Instance Interruption Warning` for `instance_id`.
pub fn spot_interruption(id: &str, region: &str, time: Timestamp, instance_id: &str) -> String {
    envelope(
        id,
        SOURCE_EC2,
        SPOT_INTERRUPTION,
        region,
        time,
        instance_arn(region, instance_id),
        InstanceActionDetail {
            instance_id: instance_id.to_owned(),
            instance_action: "terminate".to_owned(),
        },
    )
}

/// An `EC2 Instance Rebalance Recommendation` for `instance_id`.
pub fn rebalance_recommendation(
    id: &str,
    region: &str,
    time: Timestamp,
    instance_id: &str,
) -> String {
    envelope(
        id,
        SOURCE_EC2,
        REBALANCE_RECOMMENDATION,
        region,
        time,
        instance_arn(region, instance_id),
        InstanceDetail {
            instance_id: instance_id.to_owned(),
        },
    )
}

/// An `EC2 Instance State-change Notification` to `state` for `instance_id`.
pub fn state_change(
    id: &str,
    region: &str,
    time: Timestamp,
    instance_id: &str,
    state: &str,
) -> String {
    envelope(
        id,
        SOURCE_EC2,
        STATE_CHANGE,
        region,
        time,
        instance_arn(region, instance_id),
        StateChangeDetail {
            instance_id: instance_id.to_owned(),
            state: state.to_owned(),
        },
    )
}

/// An `EC2 Capacity Reservation Instance Interruption Warning` for `instance_id`.
pub fn capacity_reservation_interruption(
    id: &str,
    region: &str,
    time: Timestamp,
    instance_id: &str,
) -> String {
    envelope(
        id,
        SOURCE_EC2,
        CAPACITY_RESERVATION_INTERRUPTION,
        region,
        time,
        instance_arn(region, instance_id),
        InstanceActionDetail {
            instance_id: instance_id.to_owned(),
            instance_action: "terminate".to_owned(),
        },
    )
}

/// An AWS Health `scheduledChange` event for EC2 naming `instance_ids`.
pub fn scheduled_change(id: &str, region: &str, time: Timestamp, instance_ids: &[&str]) -> String {
    envelope(
        id,
        SOURCE_HEALTH,
        HEALTH_EVENT,
        region,
        time,
        instance_ids.iter().map(|i| (*i).to_owned()).collect(),
        HealthDetail {
            event_arn: format!(
                "arn:aws:health:{region}::event/EC2/AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED/{id}"
            ),
            service: "EC2".to_owned(),
            event_type_code: "AWS_EC2_INSTANCE_RETIREMENT_SCHEDULED".to_owned(),
            event_type_category: "scheduledChange".to_owned(),
            affected_entities: instance_ids
                .iter()
                .map(|i| AffectedEntity {
                    entity_value: (*i).to_owned(),
                })
                .collect(),
        },
    )
}

#[cfg(test)]
mod tests;
