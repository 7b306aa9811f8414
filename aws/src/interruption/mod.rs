//! The interruption queue on SQS: kerf's [`InterruptionQueue`] over the queue named by
//! `INTERRUPTION_QUEUE`, into which the EventBridge rules of upstream's CloudFormation
//! template send EC2 and AWS Health events. [`SqsQueue::open`] resolves the queue's URL
//! from its name (GetQueueUrl) and makes one non-consuming receive, so a missing queue or a
//! role without `sqs:GetQueueUrl` / `sqs:ReceiveMessage` stops start-up with an error that
//! names the queue, the permission and the fix — rather than a controller that runs and
//! silently never drains a spot node. Receives long-poll ([`RECEIVE_WAIT`]) for up to
//! [`MAX_MESSAGES_PER_RECEIVE`] messages; deletes take the receipt of the delivery.

use std::time::Duration;

use aws_sdk_sqs::Client;
use kerf::cloudprovider::BoxFuture;
use kerf::interruption::{
    InterruptionQueue, MAX_MESSAGES_PER_RECEIVE, QueueError, QueueMessage, RECEIVE_WAIT,
};
use thiserror::Error;

use crate::errors::ApiError;

/// SQS's answer to a receipt handle that no longer deletes anything (the message was
/// delivered again, or deleted already).
const INVALID_RECEIPT_CODES: [&str; 2] = ["ReceiptHandleIsInvalid", "InvalidParameterValue"];
const MISSING_QUEUE_CODES: [&str; 2] = [
    "AWS.SimpleQueueService.NonExistentQueue",
    "QueueDoesNotExist",
];
const ACCESS_DENIED_CODES: [&str; 3] = [
    "AccessDenied",
    "AccessDeniedException",
    "KMS.AccessDeniedException",
];

/// Why the interruption queue cannot be used; every variant names the queue and what to do.
#[derive(Debug, Error)]
pub enum OpenError {
    #[error(
        "interruption queue {queue:?} does not exist in region {region} ({source}); create it \
         (upstream's CloudFormation template creates it with the cluster's name and the \
         EventBridge rules that feed it) or correct INTERRUPTION_QUEUE (the queue's name, \
         not its URL or ARN)"
    )]
    Missing {
        queue: String,
        region: String,
        source: ApiError,
    },
    #[error(
        "the controller's role may not call {permission} on interruption queue {queue:?} \
         ({source}); add {permission} on the queue's ARN to the controller's IAM policy \
         (with sqs:GetQueueUrl, sqs:ReceiveMessage, sqs:DeleteMessage and sqs:GetQueueAttributes)"
    )]
    Denied {
        queue: String,
        permission: &'static str,
        source: ApiError,
    },
    #[error("checking interruption queue {queue:?}: {source}")]
    Other { queue: String, source: ApiError },
}

/// The SQS interruption queue.
#[derive(Clone, Debug)]
pub struct SqsQueue {
    client: Client,
    name: String,
    url: String,
    wait: Duration,
}

impl SqsQueue {
    /// Resolves `name` and checks that this role may receive from it.
    pub async fn open(client: Client, name: &str, region: &str) -> Result<Self, OpenError> {
        let url = client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| {
                classify(
                    name,
                    region,
                    "sqs:GetQueueUrl",
                    ApiError::from_sdk("GetQueueUrl", e),
                )
            })?
            .queue_url
            .unwrap_or_default();
        let queue = Self {
            client,
            name: name.to_owned(),
            url,
            wait: RECEIVE_WAIT,
        };
        queue.check_receive(region).await?;
        Ok(queue)
    }

    /// The same queue, long-polling for `wait` instead of [`RECEIVE_WAIT`] (tests).
    pub fn with_wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// A receive that takes nothing: no wait, and any message it gets becomes visible again
    /// at once (visibility timeout 0).
    async fn check_receive(&self, region: &str) -> Result<(), OpenError> {
        self.client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(1)
            .wait_time_seconds(0)
            .visibility_timeout(0)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| {
                classify(
                    &self.name,
                    region,
                    "sqs:ReceiveMessage",
                    ApiError::from_sdk("ReceiveMessage", e),
                )
            })
    }

    async fn receive_messages(&self) -> Result<Vec<QueueMessage>, QueueError> {
        let wait_seconds = i32::try_from(self.wait.as_secs()).unwrap_or(20);
        let max = i32::try_from(MAX_MESSAGES_PER_RECEIVE).unwrap_or(10);
        let output = self
            .client
            .receive_message()
            .queue_url(&self.url)
            .max_number_of_messages(max)
            .wait_time_seconds(wait_seconds)
            .send()
            .await
            .map_err(|e| QueueError::Receive {
                queue: self.name.clone(),
                reason: ApiError::from_sdk("ReceiveMessage", e).to_string(),
            })?;
        Ok(output
            .messages
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| {
                // Without a receipt a message cannot be deleted; SQS always sends one.
                let receipt = m.receipt_handle?;
                Some(QueueMessage {
                    id: m.message_id.unwrap_or_default(),
                    receipt,
                    body: m.body.unwrap_or_default(),
                })
            })
            .collect())
    }

    async fn delete_message(&self, message: &QueueMessage) -> Result<(), QueueError> {
        match self
            .client
            .delete_message()
            .queue_url(&self.url)
            .receipt_handle(&message.receipt)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = ApiError::from_sdk("DeleteMessage", e);
                if error
                    .code
                    .as_deref()
                    .is_some_and(|c| INVALID_RECEIPT_CODES.contains(&c))
                {
                    return Ok(());
                }
                Err(QueueError::Delete {
                    queue: self.name.clone(),
                    id: message.id.clone(),
                    reason: error.to_string(),
                })
            }
        }
    }
}

/// Turns a start-up call's failure into what the operator must fix.
pub fn classify(
    queue: &str,
    region: &str,
    permission: &'static str,
    source: ApiError,
) -> OpenError {
    let code = source.code.as_deref().unwrap_or_default();
    if MISSING_QUEUE_CODES.contains(&code) {
        OpenError::Missing {
            queue: queue.to_owned(),
            region: region.to_owned(),
            source,
        }
    } else if ACCESS_DENIED_CODES.contains(&code) {
        OpenError::Denied {
            queue: queue.to_owned(),
            permission,
            source,
        }
    } else {
        OpenError::Other {
            queue: queue.to_owned(),
            source,
        }
    }
}

impl InterruptionQueue for SqsQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, QueueError>> {
        Box::pin(self.receive_messages())
    }

    fn delete<'a>(&'a self, message: &'a QueueMessage) -> BoxFuture<'a, Result<(), QueueError>> {
        Box::pin(self.delete_message(message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: &str) -> ApiError {
        ApiError {
            operation: "ReceiveMessage",
            code: Some(code.to_owned()),
            message: "denied".to_owned(),
        }
    }

    #[test]
    fn a_denied_call_names_the_queue_and_the_missing_permission() {
        let error = classify(
            "kerf",
            "us-east-1",
            "sqs:ReceiveMessage",
            api_error("AccessDenied"),
        );
        let text = error.to_string();
        assert!(matches!(
            error,
            OpenError::Denied {
                permission: "sqs:ReceiveMessage",
                ..
            }
        ));
        assert!(
            text.contains("\"kerf\"") && text.contains("sqs:ReceiveMessage"),
            "{text}"
        );
        let error = classify(
            "kerf",
            "us-east-1",
            "sqs:GetQueueUrl",
            api_error("AWS.SimpleQueueService.NonExistentQueue"),
        );
        assert!(
            error
                .to_string()
                .starts_with("interruption queue \"kerf\" does not exist in region us-east-1"),
            "{error}"
        );
        let error = classify(
            "kerf",
            "us-east-1",
            "sqs:GetQueueUrl",
            api_error("InternalError"),
        );
        assert!(matches!(error, OpenError::Other { .. }));
    }
}
