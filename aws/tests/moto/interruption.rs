//! The interruption queue against moto's SQS through the real aws-sdk-sqs client: messages
//! as EventBridge sends them are received in batches of at most ten, parsed to the right
//! kind and instance, and gone once deleted; a message not deleted comes back; a missing
//! queue stops start-up with an error naming it.

use std::time::Duration;

use kerf::interruption::{InterruptionQueue, Kind, parse};
use kerf_aws::interruption::{OpenError, SqsQueue};

use crate::support::{REGION, clients, unique};

const FIXTURES: [(&str, Kind); 7] = [
    (
        include_str!("../../../src/interruption/fixtures/spot_interruption.json"),
        Kind::SpotInterrupted,
    ),
    (
        include_str!("../../../src/interruption/fixtures/rebalance_recommendation.json"),
        Kind::RebalanceRecommendation,
    ),
    (
        include_str!("../../../src/interruption/fixtures/scheduled_change.json"),
        Kind::ScheduledChange,
    ),
    (
        include_str!("../../../src/interruption/fixtures/state_change_stopping.json"),
        Kind::InstanceStopped,
    ),
    (
        include_str!("../../../src/interruption/fixtures/state_change_terminated.json"),
        Kind::InstanceTerminated,
    ),
    (
        include_str!("../../../src/interruption/fixtures/capacity_reservation_interruption.json"),
        Kind::CapacityReservationInterrupted,
    ),
    (
        include_str!("../../../src/interruption/fixtures/unknown_kind.json"),
        Kind::NoOp,
    ),
];

async fn queue_with(visibility_seconds: u32) -> (aws_sdk_sqs::Client, String) {
    let c = clients().await;
    let name = unique("kerf-interruption");
    crate::support::setup_clients()
        .await
        .sqs
        .create_queue()
        .queue_name(&name)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::VisibilityTimeout,
            visibility_seconds.to_string(),
        )
        .send()
        .await
        .expect("queue created");
    (c.sqs, name)
}

#[tokio::test]
async fn every_eventbridge_kind_arrives_parsed_and_is_gone_once_deleted() {
    let (sqs, name) = queue_with(30).await;
    let queue = SqsQueue::open(sqs.clone(), &name, REGION)
        .await
        .expect("the queue opens")
        .with_wait(Duration::from_secs(1));
    for (body, _) in FIXTURES {
        crate::support::setup_clients()
            .await
            .sqs
            .send_message()
            .queue_url(queue.url())
            .message_body(body)
            .send()
            .await
            .expect("sent");
    }
    crate::support::setup_clients()
        .await
        .sqs
        .send_message()
        .queue_url(queue.url())
        .message_body("{\"malformed\": true}")
        .send()
        .await
        .expect("sent");
    let mut received = Vec::new();
    while received.len() < FIXTURES.len() + 1 {
        let batch = queue.receive().await.expect("receives");
        assert!(!batch.is_empty(), "every message is delivered");
        assert!(batch.len() <= 10);
        received.extend(batch);
    }
    let mut kinds: Vec<Kind> = Vec::new();
    let mut malformed = 0;
    for message in &received {
        match parse(&message.body) {
            Ok(parsed) => kinds.push(parsed.kind()),
            Err(_) => malformed += 1,
        }
        queue.delete(message).await.expect("deleted");
        // Deleting again (a duplicate handler) is harmless.
        queue
            .delete(message)
            .await
            .expect("deleting twice is not an error");
    }
    assert_eq!(malformed, 1);
    for (_, kind) in FIXTURES {
        assert!(kinds.contains(&kind), "{kind:?} in {kinds:?}");
    }
    assert!(
        queue.receive().await.expect("receives").is_empty(),
        "all deleted"
    );
}

#[tokio::test]
async fn a_message_not_deleted_is_delivered_again() {
    let (sqs, name) = queue_with(1).await;
    let queue = SqsQueue::open(sqs.clone(), &name, REGION)
        .await
        .expect("the queue opens")
        .with_wait(Duration::from_secs(3));
    crate::support::setup_clients()
        .await
        .sqs
        .send_message()
        .queue_url(queue.url())
        .message_body(FIXTURES[0].0)
        .send()
        .await
        .expect("sent");
    let first = queue.receive().await.expect("receives");
    assert_eq!(first.len(), 1);
    let mut again = Vec::new();
    for _ in 0..5 {
        again = queue.receive().await.expect("receives");
        if !again.is_empty() {
            break;
        }
    }
    assert_eq!(again.len(), 1, "redelivered after the visibility timeout");
    assert_eq!(again[0].id, first[0].id);
    queue.delete(&again[0]).await.expect("deleted");
}

#[tokio::test]
async fn a_missing_queue_is_a_start_up_error_naming_it() {
    let c = clients().await;
    let error = SqsQueue::open(c.sqs, "kerf-no-such-queue", REGION)
        .await
        .expect_err("no such queue");
    assert!(matches!(error, OpenError::Missing { .. }), "{error:?}");
    let text = error.to_string();
    assert!(
        text.contains("\"kerf-no-such-queue\" does not exist in region us-east-1"),
        "{text}"
    );
}
