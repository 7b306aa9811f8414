//! The simulated region's EventBridge rules: what an EKS cluster's interruption queue
//! receives from EC2, written as the same JSON and sent into an in-memory queue — a spot
//! interruption warning when [`SimulatedEc2::interrupt_spot`] issues one, a capacity
//! reservation interruption per instance when [`SimulatedEc2::interrupt_reservation`]
//! reclaims an interruptible reservation, and a state-change
//! notification when an instance starts shutting down or terminates (whoever terminated
//! it, as the real rule forwards them all).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use k8s_openapi::jiff::Timestamp;
use kerf::interruption::messages;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use super::queue::MemoryQueue;
use super::{Ec2Event, InstanceState, SimulatedEc2};

/// Forwards `ec2`'s interruption events into `queue` until the region is dropped.
pub fn forward_interruptions(ec2: &SimulatedEc2, queue: Arc<MemoryQueue>) -> JoinHandle<()> {
    let mut events = ec2.subscribe();
    let region = ec2.config().region.clone();
    let ids = AtomicU64::new(0);
    tokio::spawn(kerf_heap::owned(kerf_heap::Owner::EC2, async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "interruption forwarding lagged; events lost");
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            let id = format!("sim-{}", ids.fetch_add(1, Ordering::Relaxed));
            if let Some(body) = to_eventbridge(&event, &id, &region) {
                queue.send(body);
            }
        }
    }))
}

/// The EventBridge JSON of `event`, if the interruption rules forward it.
pub fn to_eventbridge(event: &Ec2Event, id: &str, region: &str) -> Option<String> {
    match event {
        Ec2Event::SpotInterruptionWarning(warning) => {
            let time = Timestamp::try_from(warning.issued_at).unwrap_or_else(|_| Timestamp::now());
            Some(messages::spot_interruption(
                id,
                region,
                time,
                &warning.instance_id,
            ))
        }
        Ec2Event::StateChanged {
            instance_id,
            state: state @ (InstanceState::ShuttingDown | InstanceState::Terminated),
            ..
        } => Some(messages::state_change(
            id,
            region,
            Timestamp::now(),
            instance_id,
            state.as_str(),
        )),
        Ec2Event::ReservationInterruptionWarning {
            instance_id,
            issued_at,
            ..
        } => {
            let time = Timestamp::try_from(*issued_at).unwrap_or_else(|_| Timestamp::now());
            Some(messages::capacity_reservation_interruption(
                id,
                region,
                time,
                instance_id,
            ))
        }
        Ec2Event::StateChanged { .. } | Ec2Event::Launched { .. } => None,
    }
}
