//! What the actors' unit tests share: a cloud provider that refuses what a test needs
//! refused and records the tagging calls it gets, so each test states only the error it
//! wants instead of implementing the whole trait again; and the reading of a counter from
//! the rendered metrics.

use std::sync::{Arc, Mutex};

use kerf::api::{NodeClaim, NodePool};
use kerf::catalog::{CatalogSnapshot, InstanceType};
use kerf::cloudprovider::{
    BoxFuture, CloudProvider, CloudProviderError, CloudResult, DriftReason, InstanceTagger,
};
use tokio::time::Instant;

/// A provider whose launches, lookups and tags fail with the error `refusal` makes; the
/// rest (deletes, lists, instance types, drift) succeed with nothing. It records when each
/// tagging call came, and answers the catalog a test set ([`Self::set_catalog`]).
pub struct RefusingCloud {
    refusal: fn() -> CloudProviderError,
    tag_calls: Mutex<Vec<Instant>>,
    catalog: Mutex<Option<Arc<CatalogSnapshot>>>,
    reservations: Mutex<std::collections::HashMap<String, u32>>,
}

impl RefusingCloud {
    pub fn new(refusal: fn() -> CloudProviderError) -> Arc<Self> {
        Arc::new(Self {
            refusal,
            tag_calls: Mutex::new(Vec::new()),
            catalog: Mutex::new(None),
            reservations: Mutex::default(),
        })
    }

    /// What [`CloudProvider::reservation_capacity`] answers for `id` from now on.
    pub fn set_reservation_capacity(&self, id: &str, room: u32) {
        self.reservations
            .lock()
            .expect("reservations lock")
            .insert(id.to_owned(), room);
    }

    /// What [`CloudProvider::catalog`] answers from now on, as a refresh would publish it.
    pub fn set_catalog(&self, catalog: CatalogSnapshot) {
        *self.catalog.lock().expect("catalog lock") = Some(Arc::new(catalog));
    }

    /// When each `tag_registered` call came, in order.
    pub fn tag_calls(&self) -> Vec<Instant> {
        self.tag_calls.lock().expect("tag calls lock").clone()
    }

    fn refused<'a, T: Send + 'a>(&self) -> BoxFuture<'a, CloudResult<T>> {
        let error = (self.refusal)();
        Box::pin(async move { Err(error) })
    }
}

impl CloudProvider for RefusingCloud {
    fn name(&self) -> &str {
        "refusing-test"
    }
    fn create<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        self.refused()
    }
    fn delete<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(async { Ok(()) })
    }
    fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, CloudResult<NodeClaim>> {
        self.refused()
    }
    fn find_launched<'a>(&'a self, _: &'a str) -> BoxFuture<'a, CloudResult<Option<NodeClaim>>> {
        Box::pin(async { Ok(None) })
    }
    fn list(&self) -> BoxFuture<'_, CloudResult<Vec<NodeClaim>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn get_instance_types<'a>(
        &'a self,
        _: &'a NodePool,
    ) -> BoxFuture<'a, CloudResult<Vec<Arc<InstanceType>>>> {
        Box::pin(async { Ok(Vec::new()) })
    }
    fn catalog(&self) -> Option<Arc<CatalogSnapshot>> {
        self.catalog.lock().expect("catalog lock").clone()
    }
    fn reservation_capacity(&self, id: &str) -> Option<u32> {
        self.reservations
            .lock()
            .expect("reservations lock")
            .get(id)
            .copied()
    }
    fn is_drifted<'a>(
        &'a self,
        _: &'a NodeClaim,
    ) -> BoxFuture<'a, CloudResult<Option<DriftReason>>> {
        Box::pin(async { Ok(None) })
    }
    fn instance_tagger(&self) -> Option<&dyn InstanceTagger> {
        Some(self)
    }
}

impl InstanceTagger for RefusingCloud {
    fn tag_registered<'a>(&'a self, _: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        self.tag_calls
            .lock()
            .expect("tag calls lock")
            .push(Instant::now());
        self.refused()
    }
}

/// The value of counter `series` (its name and labels as rendered, e.g.
/// `kerf_mailbox_dropped_total{mailbox="x"}`) in the process's metrics; 0 before its first
/// increment.
pub fn counter(series: &str) -> u64 {
    let prefix = format!("{series} ");
    crate::metrics::render()
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().expect("a counter value"))
}

/// How many times the supervisor restarted actor (or task) `name`.
pub fn restarts(name: &str) -> u64 {
    counter(&format!(
        "{}{{actor=\"{name}\"}}",
        crate::metrics::ACTOR_RESTARTS
    ))
}
