//! The simulated cloud as the controller calls it, with each side's heap kept apart. The
//! controller calls the simulated EC2 in-process (launches, describes, the interruption
//! queue), so those calls run on the controller's threads; what they allocate is EC2's state
//! (instances, tags, queued messages), not the controller's, and would otherwise be counted as
//! the controller's heap. So every call is polled as EC2's allocations
//! ([`kerf_heap::scoped`]), and what the controller keeps from the answers — the instance types —
//! is copied onto its own heap once, as the AWS provider's caches hold them in `kerf controller`.
//! Answers the controller reads and drops (a hydrated NodeClaim, a describe) are not copied:
//! freeing them does not change its figure either way.

use std::sync::{Arc, Mutex};

use kerf::api::{EC2NodeClass, NodeClaim, NodePool};
use kerf::catalog::{CatalogSnapshot, InstanceType};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudResult, DriftReason, InstanceTagger, NodeClassReconciler,
    NodeClassResolution,
};
use kerf::interruption::instance_status::{InstanceStatus, InstanceStatusSource, StatusError};
use kerf::interruption::{InterruptionQueue, QueueError, QueueMessage};
use kerf_loadtest::ec2::{MemoryQueue, SimulatedCloudProvider, SimulatedEc2};

/// The future `call` makes, made and polled as the simulated EC2's allocations.
fn outside<'a, T: 'a>(call: impl FnOnce() -> BoxFuture<'a, T>) -> BoxFuture<'a, T> {
    let ec2 = Some(kerf_heap::Owner::EC2);
    kerf_heap::with_owner(ec2, || Box::pin(kerf_heap::scoped(ec2, call())))
}

/// The simulated cloud provider, called from the controller.
pub struct Cloud {
    inner: Arc<SimulatedCloudProvider>,
    /// The provider's last instance types and the controller's copies of them.
    instance_types: Mutex<Option<Copies>>,
}

struct Copies {
    source: Vec<Arc<InstanceType>>,
    copies: Vec<Arc<InstanceType>>,
}

impl Cloud {
    pub fn new(inner: Arc<SimulatedCloudProvider>) -> Self {
        Self {
            inner,
            instance_types: Mutex::new(None),
        }
    }

    /// The controller's copies of `source`, made again only when the provider's list changes.
    fn own(&self, source: Vec<Arc<InstanceType>>) -> Vec<Arc<InstanceType>> {
        let mut cached = match self.instance_types.lock() {
            Ok(cached) => cached,
            Err(poisoned) => poisoned.into_inner(),
        };
        let same = |c: &Copies| {
            c.source.len() == source.len()
                && c.source.iter().zip(&source).all(|(a, b)| Arc::ptr_eq(a, b))
        };
        if let Some(copies) = cached.as_ref().filter(|c| same(c)) {
            return copies.copies.clone();
        }
        let copies: Vec<_> = source.iter().map(|it| Arc::new((**it).clone())).collect();
        *cached = Some(Copies {
            source,
            copies: copies.clone(),
        });
        copies
    }
}

impl CloudProvider for Cloud {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn create<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        outside(|| self.inner.create(node_claim))
    }

    fn delete<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        outside(|| self.inner.delete(node_claim))
    }

    fn get<'a>(&'a self, provider_id: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        outside(|| self.inner.get(provider_id))
    }

    fn find_launched<'a>(
        &'a self,
        node_claim: &'a str,
    ) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        outside(|| self.inner.find_launched(node_claim))
    }

    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        outside(|| self.inner.list())
    }

    fn get_instance_types<'a>(
        &'a self,
        node_pool: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(async move {
            let source = outside(|| self.inner.get_instance_types(node_pool)).await?;
            Ok(self.own(source))
        })
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
        outside(|| self.inner.is_drifted(node_claim))
    }

    fn node_class_reconciler(&self) -> Option<&dyn NodeClassReconciler> {
        self.inner.node_class_reconciler().map(|_| self as _)
    }

    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        self.inner.instance_tagger().map(|_| self as _)
    }
}

impl NodeClassReconciler for Cloud {
    fn resolve<'a>(
        &'a self,
        node_class: &'a EC2NodeClass,
    ) -> BoxFuture<'a, CloudResult<NodeClassResolution>> {
        outside(|| NodeClassReconciler::resolve(self.inner.as_ref(), node_class))
    }

    fn forget<'a>(&'a self, node_class: &'a str) -> BoxFuture<'a, CloudResult<()>> {
        outside(|| NodeClassReconciler::forget(self.inner.as_ref(), node_class))
    }
}

impl InstanceTagger for Cloud {
    fn tag_registered<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        outside(|| self.inner.tag_registered(node_claim))
    }
}

/// The simulated region's interruption queue, read by the controller.
pub struct Queue(pub Arc<MemoryQueue>);

impl InterruptionQueue for Queue {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, QueueError>> {
        outside(|| self.0.receive())
    }

    fn delete<'a>(&'a self, message: &'a QueueMessage) -> BoxFuture<'a, Result<(), QueueError>> {
        outside(|| InterruptionQueue::delete(self.0.as_ref(), message))
    }
}

/// The simulated EC2's instance statuses, polled by the controller.
pub struct Statuses(pub SimulatedEc2);

impl InstanceStatusSource for Statuses {
    fn describe<'a>(
        &'a self,
        instance_ids: &'a [String],
    ) -> BoxFuture<'a, Result<Vec<InstanceStatus>, StatusError>> {
        outside(|| self.0.describe(instance_ids))
    }
}
