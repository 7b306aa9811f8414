//! The fence on the cloud: [`FencedCloudProvider`] wraps the controller's cloud provider so
//! that only the leader writes to the cloud, as [`super::fenced`] does for Kubernetes. Every
//! write — Create (CreateFleet and the launch templates it makes), Delete
//! (TerminateInstances), tagging a registered instance (CreateTags), resolving a node class
//! (which may create its instance profile) and forgetting one (launch template and instance
//! profile deletion) — is refused up front when this replica does not lead, and abandoned
//! the moment leadership is lost while it is in flight, with
//! [`CloudProviderError::NotLeader`], which [`super::is_fenced`] recognises: callers log it
//! and leave the work to the leader, never treating it as a launch failure. Reads (Get,
//! FindLaunched, List, GetInstanceTypes, IsDrifted) are never fenced: a standby keeps its
//! view warm. Each refusal is logged and counted in
//! `kerf_leader_election_fenced_requests_total{client="cloud"}`.

use std::future::Future;
use std::sync::Arc;

use kerf::api::{EC2NodeClass, NodeClaim, NodePool};
use kerf::catalog::{CatalogSnapshot, InstanceType};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason, InstanceTagger,
    NodeClassReconciler, NodeClassResolution,
};
use tokio::sync::watch;

use crate::metrics::FENCED_REQUESTS;

/// A cloud provider that writes only while `leader` reads `true`.
pub struct FencedCloudProvider {
    inner: Arc<dyn CloudProvider>,
    leader: watch::Receiver<bool>,
}

impl FencedCloudProvider {
    pub fn new(inner: Arc<dyn CloudProvider>, leader: watch::Receiver<bool>) -> Self {
        Self { inner, leader }
    }

    /// Makes and runs the write `call` as `operation` only while leading (a standby does not
    /// even build the request); abandons it when leadership is lost before it answers.
    async fn write<T, F>(
        &self,
        operation: &'static str,
        target: &str,
        call: impl FnOnce() -> F,
    ) -> CloudResult<T>
    where
        F: Future<Output = CloudResult<T>>,
    {
        if !*self.leader.borrow() {
            fenced(operation, target, false);
            return Err(CloudProviderError::NotLeader {
                operation: operation.to_owned(),
                in_flight: false,
            });
        }
        tokio::select! {
            result = call() => result,
            () = super::stepped_down(self.leader.clone()) => {
                fenced(operation, target, true);
                Err(CloudProviderError::NotLeader {
                    operation: operation.to_owned(),
                    in_flight: true,
                })
            }
        }
    }
}

/// Logs and counts one refused (or abandoned) write.
fn fenced(operation: &'static str, target: &str, in_flight: bool) {
    metrics::counter!(FENCED_REQUESTS, "client" => "cloud").increment(1);
    if in_flight {
        tracing::warn!(
            operation,
            target,
            "cloud write abandoned in flight: this replica lost the leader lease"
        );
    } else {
        tracing::info!(
            operation,
            target,
            "cloud write refused: this replica does not hold the leader lease"
        );
    }
}

impl CloudProvider for FencedCloudProvider {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        Box::pin(self.write("Create", node_claim.name(), || {
            self.inner.create(node_claim)
        }))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(self.write("Delete", node_claim.name(), || {
            self.inner.delete(node_claim)
        }))
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        self.inner.get(provider_id)
    }

    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        self.inner.find_launched(node_claim)
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        self.inner.list()
    }

    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        self.inner.get_instance_types(node_pool)
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
        self.inner.is_drifted(node_claim)
    }

    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        self.inner
            .node_class_reconciler()
            .map(|_| self as &dyn NodeClassReconciler)
    }

    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        self.inner
            .instance_tagger()
            .map(|_| self as &dyn InstanceTagger)
    }
}

/// What the inner provider lacks is reported as such (never reached: the capability is only
/// offered when the inner provider has it).
fn missing(capability: &str) -> CloudProviderError {
    CloudProviderError::Other {
        operation: capability.to_owned(),
        message: "the wrapped cloud provider has no such capability".to_owned(),
    }
}

impl NodeClassReconciler for FencedCloudProvider {
    fn resolve<'a>(
        &'a self,
        node_class: &'a EC2NodeClass,
    ) -> BoxFuture<'a, CloudResult<NodeClassResolution>> {
        let Some(inner) = self.inner.node_class_reconciler() else {
            return Box::pin(async { Err(missing("ResolveNodeClass")) });
        };
        Box::pin(self.write(
            "ResolveNodeClass",
            node_class.metadata.name.as_deref().unwrap_or_default(),
            || inner.resolve(node_class),
        ))
    }

    fn forget<'a>(&'a self, node_class: &'a str) -> BoxFuture<'a, CloudResult<()>> {
        let Some(inner) = self.inner.node_class_reconciler() else {
            return Box::pin(async { Err(missing("ForgetNodeClass")) });
        };
        Box::pin(self.write("ForgetNodeClass", node_class, || inner.forget(node_class)))
    }
}

impl InstanceTagger for FencedCloudProvider {
    fn tag_registered<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        let Some(inner) = self.inner.instance_tagger() else {
            return Box::pin(async { Err(missing("TagRegistered")) });
        };
        Box::pin(self.write("TagRegistered", node_claim.name(), || {
            inner.tag_registered(node_claim)
        }))
    }
}

#[cfg(test)]
mod tests {
    //! The inner provider is a test double that records its writes and can hang one: what is
    //! under test is the wrapper's gate, not a cloud.

    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;

    /// Records every call that reached it; Create hangs while `hang` is set.
    #[derive(Default)]
    struct Recording {
        calls: Mutex<Vec<&'static str>>,
        hang: std::sync::atomic::AtomicBool,
    }

    impl Recording {
        fn calls(&self) -> Vec<&'static str> {
            self.calls.lock().expect("calls lock").clone()
        }
        fn called(&self, what: &'static str) {
            self.calls.lock().expect("calls lock").push(what);
        }
    }

    impl CloudProvider for Recording {
        fn name(&self) -> &str {
            "recording"
        }
        fn create<'a>(&'a self, claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
            self.called("create");
            let hang = self.hang.load(std::sync::atomic::Ordering::SeqCst);
            Box::pin(async move {
                if hang {
                    std::future::pending::<()>().await;
                }
                Ok(claim.clone())
            })
        }
        fn delete<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
            self.called("delete");
            Box::pin(async { Ok(()) })
        }
        fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
            self.called("get");
            Box::pin(async { Ok(claim()) })
        }
        fn find_launched<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
            self.called("find_launched");
            Box::pin(async { Ok(None) })
        }
        fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
            self.called("list");
            Box::pin(async { Ok(Vec::new()) })
        }
        fn get_instance_types<'a>(
            &'a self,
            _: &'a NodePool,
        ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
            self.called("get_instance_types");
            Box::pin(async { Ok(Vec::new()) })
        }
        fn catalog(&self) -> Option<Arc<CatalogSnapshot>> {
            None
        }
        fn reservation_capacity(&self, _: &str) -> Option<u32> {
            None
        }
        fn is_drifted<'a>(
            &'a self,
            _: &'a NodeClaim,
        ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
            self.called("is_drifted");
            Box::pin(async { Ok(None) })
        }
        fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
            Some(self)
        }
        fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
            Some(self)
        }
    }

    impl NodeClassReconciler for Recording {
        fn resolve<'a>(
            &'a self,
            _: &'a EC2NodeClass,
        ) -> BoxFuture<'a, CloudResult<NodeClassResolution>> {
            self.called("resolve");
            Box::pin(async { Ok(NodeClassResolution::default()) })
        }
        fn forget<'a>(&'a self, _: &'a str) -> BoxFuture<'a, CloudResult<()>> {
            self.called("forget");
            Box::pin(async { Ok(()) })
        }
    }

    impl InstanceTagger for Recording {
        fn tag_registered<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
            self.called("tag");
            Box::pin(async { Ok(()) })
        }
    }

    const CLASS_REF: &str =
        r#"{"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}"#;

    fn from_json<T: serde::de::DeserializeOwned>(text: &str) -> T {
        serde_json::from_str(text).expect("a valid object")
    }

    fn claim() -> NodeClaim {
        from_json(&format!(
            r#"{{"metadata": {{"name": "default-abc"}},
                "spec": {{"requirements": [], "nodeClassRef": {CLASS_REF}}}}}"#
        ))
    }

    fn node_pool() -> NodePool {
        from_json(&format!(
            r#"{{"metadata": {{"name": "default"}},
                "spec": {{"template": {{"spec": {{"requirements": [], "nodeClassRef": {CLASS_REF}}}}}}}}}"#
        ))
    }

    fn node_class() -> EC2NodeClass {
        from_json(
            r#"{"metadata": {"name": "default"}, "spec": {"role": "r", "amiFamily": "AL2023",
                "amiSelectorTerms": [{"id": "ami-1"}], "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}]}}"#,
        )
    }

    #[tokio::test]
    async fn a_standby_writes_nothing_to_the_cloud_and_reads_everything() {
        let inner = Arc::new(Recording::default());
        let (_leading, leader) = watch::channel(false);
        let fenced = FencedCloudProvider::new(inner.clone(), leader);
        let claim = claim();
        let refused = [
            fenced.create(&claim).await.err(),
            fenced.delete(&claim).await.err(),
            fenced
                .instance_tagger()
                .expect("tagger offered")
                .tag_registered(&claim)
                .await
                .err(),
            fenced
                .node_class_reconciler()
                .expect("reconciler offered")
                .forget("default")
                .await
                .err(),
            fenced
                .node_class_reconciler()
                .expect("reconciler offered")
                .resolve(&node_class())
                .await
                .err(),
        ];
        for error in refused {
            let error = error.expect("refused");
            assert!(error.is_not_leader(), "{error}");
            assert!(crate::leader::is_fenced(&error), "{error}");
            assert!(!error.is_retryable() && !error.is_insufficient_capacity());
        }
        assert!(fenced.get("aws:///z/i-1").await.is_ok());
        assert!(fenced.find_launched("default-abc").await.is_ok());
        assert!(fenced.list().await.is_ok());
        assert!(fenced.get_instance_types(&node_pool()).await.is_ok());
        assert!(fenced.is_drifted(&claim).await.is_ok());
        assert_eq!(
            inner.calls(),
            [
                "get",
                "find_launched",
                "list",
                "get_instance_types",
                "is_drifted"
            ],
            "only the reads reached the cloud"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_in_flight_is_abandoned_when_leadership_is_lost() {
        let inner = Arc::new(Recording::default());
        let (leading, leader) = watch::channel(true);
        let fenced = Arc::new(FencedCloudProvider::new(inner.clone(), leader));
        let claim = claim();
        fenced.create(&claim).await.expect("a leader launches");
        inner.hang.store(true, std::sync::atomic::Ordering::SeqCst);
        let in_flight = {
            let (fenced, claim) = (Arc::clone(&fenced), claim.clone());
            tokio::spawn(async move { fenced.create(&claim).await })
        };
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!in_flight.is_finished(), "the launch hangs");
        leading.send_replace(false);
        let abandoned = tokio::time::timeout(Duration::from_millis(1), in_flight)
            .await
            .expect("abandoned at once")
            .expect("task ran")
            .expect_err("no answer after leadership is lost");
        assert_eq!(
            abandoned,
            CloudProviderError::NotLeader {
                operation: "Create".into(),
                in_flight: true
            }
        );
        assert_eq!(inner.calls(), ["create", "create"]);
    }
}
