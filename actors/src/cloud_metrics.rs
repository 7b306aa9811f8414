//! Metering of any [`CloudProvider`] under upstream's names, so the AWS provider, the
//! simulated one and any other are charted alike: `karpenter_cloudprovider_duration_seconds`
//! (labels `controller`, `method`, `provider`) times every call, and
//! `karpenter_cloudprovider_errors_total` (plus `error`, upstream's error type name or empty)
//! counts the failed ones. [`MeteredCloudProvider`] wraps a provider once per controller, so
//! each controller's calls carry its name (upstream's `controller` label is the name of the
//! reconciler that made the call, e.g. `nodeclaim.lifecycle`).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use kerf::api::{NodeClaim, NodePool};
use kerf::catalog::{CatalogSnapshot, InstanceType};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason, InstanceTagger,
    NodeClassReconciler,
};

use crate::metrics::{CLOUDPROVIDER_DURATION, CLOUDPROVIDER_ERRORS};

/// The `error` label upstream gives a failed call: its typed errors by name, others empty.
pub fn error_label(error: &CloudProviderError) -> &'static str {
    match error {
        CloudProviderError::InsufficientCapacity { .. } => "InsufficientCapacityError",
        CloudProviderError::NodeClaimNotFound { .. } => "NodeClaimNotFoundError",
        CloudProviderError::NodeClassNotReady { .. } => "NodeClassNotReadyError",
        CloudProviderError::Throttled { .. }
        | CloudProviderError::LaunchFailed { .. }
        | CloudProviderError::InvalidProviderId { .. }
        | CloudProviderError::Other { .. }
        | CloudProviderError::NotLeader { .. } => "",
    }
}

/// A cloud provider whose calls are metered under one controller's name.
pub struct MeteredCloudProvider {
    inner: Arc<dyn CloudProvider>,
    controller: &'static str,
}

impl MeteredCloudProvider {
    pub fn new(inner: Arc<dyn CloudProvider>, controller: &'static str) -> Self {
        Self { inner, controller }
    }

    /// Times `call` as `method` and counts its failure.
    async fn observe<T>(
        &self,
        method: &'static str,
        call: impl Future<Output = CloudResult<T>>,
    ) -> CloudResult<T> {
        let started = Instant::now();
        let result = call.await;
        let provider = self.inner.name().to_owned();
        metrics::histogram!(
            CLOUDPROVIDER_DURATION,
            "controller" => self.controller,
            "method" => method,
            "provider" => provider.clone()
        )
        .record(started.elapsed().as_secs_f64());
        if let Err(error) = &result {
            metrics::counter!(
                CLOUDPROVIDER_ERRORS,
                "controller" => self.controller,
                "method" => method,
                "provider" => provider,
                "error" => error_label(error)
            )
            .increment(1);
        }
        result
    }
}

impl CloudProvider for MeteredCloudProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(self.observe("Create", self.inner.create(node_claim)))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(self.observe("Delete", self.inner.delete(node_claim)))
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(self.observe("Get", self.inner.get(provider_id)))
    }

    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        // kerf's own method (upstream has no lookup by NodeClaim), under its own name.
        Box::pin(self.observe("FindLaunched", self.inner.find_launched(node_claim)))
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        Box::pin(self.observe("List", self.inner.list()))
    }

    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(self.observe("GetInstanceTypes", self.inner.get_instance_types(node_pool)))
    }

    fn catalog(&self) -> Option<Arc<CatalogSnapshot>> {
        self.inner.catalog()
    }

    fn reservation_capacity(&self, id: &str) -> Option<u32> {
        self.inner.reservation_capacity(id)
    }

    fn is_drifted<'a>(
        &'a self,
        node_claim: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
        Box::pin(self.observe("IsDrifted", self.inner.is_drifted(node_claim)))
    }

    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        self.inner.node_class_reconciler()
    }

    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        self.inner.instance_tagger()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused() -> CloudProviderError {
        CloudProviderError::InsufficientCapacity {
            node_claim: "default-abc".into(),
            offerings: Vec::new(),
        }
    }

    #[test]
    fn error_labels_follow_upstream() {
        assert_eq!(error_label(&refused()), "InsufficientCapacityError");
        let throttled = CloudProviderError::Throttled {
            operation: "CreateFleet".into(),
            message: "RequestLimitExceeded".into(),
        };
        assert_eq!(error_label(&throttled), "");
    }

    #[tokio::test]
    async fn calls_are_timed_and_failures_counted_by_controller_method_and_error() {
        crate::metrics::handle();
        let metered =
            MeteredCloudProvider::new(crate::testing::RefusingCloud::new(refused), "test.metering");
        assert_eq!(metered.name(), "refusing-test");
        assert!(metered.list().await.is_ok());
        assert!(metered.get("aws:///z/i-1").await.is_err());
        let text = crate::metrics::render();
        let labels = r#"controller="test.metering",method="Get",provider="refusing-test""#;
        assert!(
            text.contains(&format!(
                "{CLOUDPROVIDER_DURATION}_bucket{{{labels},le=\"+Inf\"}} 1"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{CLOUDPROVIDER_ERRORS}{{{labels},error=\"InsufficientCapacityError\"}} 1"
            )),
            "{text}"
        );
        let listed = r#"controller="test.metering",method="List""#;
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with(CLOUDPROVIDER_ERRORS) && l.contains(listed)),
            "a successful call is not an error: {text}"
        );
    }
}
