//! Cloud provider metrics under upstream's names, through the `metrics` facade so whichever
//! exporter the controller installs publishes them: `karpenter_cloudprovider_duration_seconds`
//! (labels `controller`, `method`, `provider`) times every call and
//! `karpenter_cloudprovider_errors_total` (plus `error`) counts failed ones — throttled calls
//! included, after the SDK's retries with backoff gave up. [`MeteredCloudProvider`] wraps any
//! [`CloudProvider`] so each controller's calls carry its name.

use kerf::api::{NodeClaim, NodePool};
use kerf::catalog::InstanceType;
use kerf::cloudprovider::{BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason};
use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

pub const CLOUDPROVIDER_DURATION_SECONDS: &str = "karpenter_cloudprovider_duration_seconds";
pub const CLOUDPROVIDER_ERRORS_TOTAL: &str = "karpenter_cloudprovider_errors_total";

/// The `error` label upstream gives a failed call.
pub fn error_label(err: &CloudProviderError) -> &'static str {
    match err {
        CloudProviderError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudProviderError::NodeClaimNotFound { .. } => "NodeClaimNotFoundError",
        CloudProviderError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        _ => "",
    }
}

/// Times `call` and counts its failure under `controller`, `method` and `provider`.
pub async fn observe<T>(
    controller: &str,
    method: &'static str,
    provider: &str,
    call: impl Future<Output = CloudResult<T>>,
) -> CloudResult<T> {
    let started = Instant::now();
    let result = call.await;
    metrics::histogram!(
        CLOUDPROVIDER_DURATION_SECONDS,
        "controller" => controller.to_owned(),
        "method" => method,
        "provider" => provider.to_owned()
    )
    .record(started.elapsed().as_secs_f64());
    if let Err(err) = &result {
        metrics::counter!(
            CLOUDPROVIDER_ERRORS_TOTAL,
            "controller" => controller.to_owned(),
            "method" => method,
            "provider" => provider.to_owned(),
            "error" => error_label(err)
        )
        .increment(1);
    }
    result
}

/// A cloud provider whose calls are metered under one controller's name.
pub struct MeteredCloudProvider {
    inner: Arc<dyn CloudProvider>,
    controller: String,
}

impl MeteredCloudProvider {
    pub fn new(inner: Arc<dyn CloudProvider>, controller: &str) -> Self {
        Self {
            inner,
            controller: controller.to_owned(),
        }
    }
}

impl CloudProvider for MeteredCloudProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(observe(
            &self.controller,
            "Create",
            self.inner.name(),
            self.inner.create(node_claim),
        ))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(observe(
            &self.controller,
            "Delete",
            self.inner.name(),
            self.inner.delete(node_claim),
        ))
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(observe(
            &self.controller,
            "Get",
            self.inner.name(),
            self.inner.get(provider_id),
        ))
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        Box::pin(observe(
            &self.controller,
            "List",
            self.inner.name(),
            self.inner.list(),
        ))
    }

    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(observe(
            &self.controller,
            "GetInstanceTypes",
            self.inner.name(),
            self.inner.get_instance_types(node_pool),
        ))
    }

    fn is_drifted<'a>(
        &'a self,
        node_claim: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
        Box::pin(observe(
            &self.controller,
            "IsDrifted",
            self.inner.name(),
            self.inner.is_drifted(node_claim),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_labels_follow_upstream() {
        let ice = CloudProviderError::InsufficientCapacity {
            node_claim: "a".into(),
            offerings: Vec::new(),
        };
        assert_eq!(error_label(&ice), "InsufficientCapacityError");
        let other = CloudProviderError::Throttled {
            operation: "CreateFleet".into(),
            message: "RequestLimitExceeded".into(),
        };
        assert_eq!(error_label(&other), "");
    }
}
