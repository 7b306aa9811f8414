//! The Tagger: once a NodeClaim has registered (its `status.nodeName` is known), tags its
//! machine with `Name` = the node name, `karpenter.sh/nodeclaim` and the cluster name —
//! keys the machine already has keep their values — and marks the NodeClaim
//! `karpenter.k8s.aws/tagged` so it is not tagged again, as upstream's AWS tagging
//! controller does. It talks to the provider through [`InstanceTagger`]. Requests come from
//! the PodWatcher on each NodeClaim change and from a sweep every [`SWEEP_PERIOD`]; NodeClaims
//! are tagged one at a time at most [`TAGS_PER_SECOND`] per second, because CreateTags shares
//! EC2's rate limit for mutating calls with CreateFleet. Only the leader tags.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use actix::prelude::*;
use kerf::api::NodeClaim;
use kerf::cloudprovider::{CloudProvider, CloudProviderError};
use kerf::labels;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::mailbox::{DeliverError, MailboxDepth, Outbox};
use crate::state::Change;
use crate::state::{ClusterState, ObjectKey};

/// A registration makes one request per NodeClaim change (several each); the capacity
/// absorbs a scale-up's burst, and the sweep repairs a dropped request.
pub const TAGGER_MAILBOX_CAPACITY: usize = 256;

/// How often every registered, untagged NodeClaim is requested again.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(60);

/// CreateTags calls per second at most. Upstream's tagging controller reconciles one
/// NodeClaim at a time (controller-runtime's default concurrency of 1) and sleeps a second
/// after each CreateTags call: one call per second.
pub const TAGS_PER_SECOND: u32 = 1;

/// Tag the machine of NodeClaim `name` if it is registered and not tagged yet.
#[derive(Message, Debug, Clone, PartialEq, Eq)]
#[rtype(result = "()")]
pub struct TagInstance {
    pub name: String,
}

/// Whether `claim` is registered, alive, launched and not yet tagged.
pub fn is_taggable(claim: &NodeClaim) -> bool {
    let annotations = claim.metadata.annotations.as_ref();
    let marked =
        |key: &str| annotations.and_then(|a| a.get(key)).map(String::as_str) == Some("true");
    let status = claim.status.as_ref();
    let registered = status
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let launched = claim.provider_id().is_some_and(|p| !p.is_empty());
    !(marked(labels::INSTANCE_TAGGED) && marked(labels::CLUSTER_NAME_TAGGED))
        && registered
        && launched
        && claim.metadata.deletion_timestamp.is_none()
}

/// The actor.
pub struct Tagger {
    state: Arc<ClusterState>,
    api: Api<NodeClaim>,
    cloud: Arc<dyn CloudProvider>,
    leader: watch::Receiver<bool>,
    depth: MailboxDepth,
    queue: VecDeque<String>,
    queued: BTreeSet<String>,
    busy: bool,
    next_call: Instant,
}

impl Tagger {
    pub fn new(
        client: Client,
        state: Arc<ClusterState>,
        cloud: Arc<dyn CloudProvider>,
        leader: watch::Receiver<bool>,
        depth: MailboxDepth,
    ) -> Self {
        Self {
            state,
            api: Api::all(client),
            cloud,
            leader,
            depth,
            queue: VecDeque::new(),
            queued: BTreeSet::new(),
            busy: false,
            next_call: Instant::now(),
        }
    }

    fn pump(&mut self, ctx: &mut Context<Self>) {
        if !*self.leader.borrow() {
            // The next leader's sweep requests every NodeClaim still untagged.
            self.queue.clear();
            self.queued.clear();
            return;
        }
        if self.busy {
            return;
        }
        let Some(name) = self.queue.pop_front() else {
            return;
        };
        self.queued.remove(&name);
        self.busy = true;
        crate::metrics::workqueue_depth(
            crate::metrics::controller::NODECLAIM_TAGGING,
            self.queue.len(),
        );
        let work = crate::metrics::reconcile(
            crate::metrics::controller::NODECLAIM_TAGGING,
            tag(
                self.api.clone(),
                Arc::clone(&self.state),
                Arc::clone(&self.cloud),
                name,
                self.next_call,
            ),
        );
        ctx.spawn(work.into_actor(self).map(|outcome, actor, ctx| {
            actor.busy = false;
            // A failed call counts too: a failure that comes at once (a closed client) must
            // not let the queue run through the provider unpaced.
            if !matches!(outcome, Ok(Tagged::Skipped)) {
                actor.next_call = Instant::now() + Duration::from_secs(1) / TAGS_PER_SECOND;
            }
            match outcome {
                Ok(_) => {}
                // Stepping down (or stopping): the next leader tags what is left.
                Err(error) if crate::leader::is_fenced(&error) || !*actor.leader.borrow() => {
                    tracing::debug!(%error, "tagging instance");
                }
                Err(error) => tracing::warn!(%error, "tagging instance"),
            }
            actor.pump(ctx);
        }));
    }
}

impl Actor for Tagger {
    type Context = Context<Self>;
}

impl Handler<TagInstance> for Tagger {
    type Result = ();

    fn handle(&mut self, request: TagInstance, ctx: &mut Context<Self>) {
        self.depth.taken();
        if !*self.leader.borrow() {
            return;
        }
        let taggable = self
            .state
            .nodeclaims
            .get(&ObjectKey::new(None, &request.name))
            .is_some_and(|c| is_taggable(&c));
        if taggable && self.queued.insert(request.name.clone()) {
            self.queue.push_back(request.name);
        }
        self.pump(ctx);
    }
}

/// What one tagging step did.
enum Tagged {
    /// The provider was asked (the rate limit counts it).
    Called,
    /// Nothing to do any more (tagged, deleted, or not registered after all).
    Skipped,
}

/// Why tagging one NodeClaim failed (logged; the sweep retries).
#[derive(Debug, thiserror::Error)]
pub enum TagError {
    #[error("tagging the instance of nodeclaim {name}: {source}")]
    Tag {
        name: String,
        #[source]
        source: CloudProviderError,
    },
    #[error("marking nodeclaim {name} tagged: {source}")]
    Mark {
        name: String,
        #[source]
        source: kube::Error,
    },
}

async fn tag(
    api: Api<NodeClaim>,
    state: Arc<ClusterState>,
    cloud: Arc<dyn CloudProvider>,
    name: String,
    not_before: Instant,
) -> Result<Tagged, TagError> {
    let Some(tagger) = cloud.instance_tagger() else {
        return Ok(Tagged::Skipped);
    };
    tokio::time::sleep_until(not_before).await;
    // Read after the wait: the claim may have been tagged, deleted or replaced meanwhile.
    let Some(claim) = state.nodeclaims.get(&ObjectKey::new(None, &name)) else {
        return Ok(Tagged::Skipped);
    };
    if !is_taggable(&claim) {
        return Ok(Tagged::Skipped);
    }
    match tagger.tag_registered(&claim).await {
        Ok(()) => {}
        // The machine is gone: the NodeClaim's lifecycle deals with that, not tagging.
        Err(e) if e.is_not_found() => return Ok(Tagged::Called),
        Err(source) => return Err(TagError::Tag { name, source }),
    }
    let mark = json!({"metadata": {"annotations": {
        labels::INSTANCE_TAGGED: "true",
        labels::CLUSTER_NAME_TAGGED: "true",
    }}});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(mark))
        .await
    {
        Ok(_) => {
            tracing::debug!(nodeclaim = name, "tagged instance");
            Ok(Tagged::Called)
        }
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(Tagged::Called),
        Err(source) => Err(TagError::Mark { name, source }),
    }
}

/// Requests every taggable NodeClaim once cluster state has synced, then every
/// [`SWEEP_PERIOD`], until `shutdown`.
pub async fn sweep(
    state: Arc<ClusterState>,
    out: Outbox<TagInstance>,
    mut shutdown: watch::Receiver<bool>,
) {
    tokio::select! {
        () = state.wait_synced() => {}
        _ = shutdown.wait_for(|s| *s) => return,
    }
    loop {
        for claim in state.nodeclaims.snapshot() {
            if !is_taggable(&claim) {
                continue;
            }
            let request = TagInstance {
                name: claim.name().to_owned(),
            };
            if let Err(DeliverError::Closed(_)) = out.deliver(request).await {
                return;
            }
        }
        tokio::select! {
            () = tokio::time::sleep(SWEEP_PERIOD) => {}
            _ = shutdown.wait_for(|s| *s) => return,
        }
    }
}

/// The PodWatcher's hook: a NodeClaim that became taggable is requested (dropped on a full
/// mailbox, which the sweep repairs).
pub fn on_change(
    state: Arc<ClusterState>,
    out: Outbox<TagInstance>,
) -> impl FnMut(&NodeClaim, Change) + Send + 'static {
    move |claim, change| {
        if change != Change::Applied || !state.synced() || !is_taggable(claim) {
            return;
        }
        let request = TagInstance {
            name: claim.name().to_owned(),
        };
        if let Err(err @ DeliverError::Closed(_)) = out.try_deliver(request) {
            tracing::warn!(error = %err, "requesting instance tagging");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offering_cache::testing::paused;
    use crate::testing::RefusingCloud;

    fn claim(status: serde_json::Value, metadata: serde_json::Value) -> NodeClaim {
        let mut meta = json!({"name": "default-abcde"});
        if let (Some(m), serde_json::Value::Object(extra)) = (meta.as_object_mut(), metadata) {
            m.extend(extra);
        }
        serde_json::from_value(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": meta,
            "spec": {"requirements": [], "nodeClassRef":
                {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}},
            "status": status,
        }))
        .expect("test nodeclaim parses")
    }

    #[test]
    fn only_registered_live_untagged_claims_are_tagged() {
        let registered =
            json!({"providerID": "aws:///us-east-1a/i-0123", "nodeName": "ip-10-0-0-1"});
        assert!(is_taggable(&claim(registered.clone(), json!({}))));
        assert!(!is_taggable(&claim(
            json!({"providerID": "aws:///us-east-1a/i-0123"}),
            json!({})
        )));
        assert!(!is_taggable(&claim(json!({"nodeName": "n"}), json!({}))));
        assert!(!is_taggable(&claim(
            registered.clone(),
            json!({"deletionTimestamp": "2024-01-01T00:00:00Z", "finalizers": ["x"]})
        )));
        assert!(!is_taggable(&claim(
            registered.clone(),
            json!({"annotations": {"karpenter.k8s.aws/tagged": "true",
                "compatibility.karpenter.k8s.aws/cluster-name-tagged": "true"}})
        )));
        // Tagged before the cluster-name tag was added: tagged again for it.
        assert!(is_taggable(&claim(
            registered,
            json!({"annotations": {"karpenter.k8s.aws/tagged": "true"}})
        )));
    }

    fn throttled() -> CloudProviderError {
        CloudProviderError::Throttled {
            operation: "CreateTags".into(),
            message: "RequestLimitExceeded".into(),
        }
    }

    #[test]
    fn failed_calls_are_paced_as_successful_ones_are() {
        paused(|| async {
            let (state, mut writers) = ClusterState::new();
            let names: Vec<String> = (0..4).map(|i| format!("default-{i}")).collect();
            for (i, name) in names.iter().enumerate() {
                let mut claim = claim(
                    json!({"providerID": format!("aws:///us-east-1a/i-{i}"), "nodeName": name}),
                    json!({}),
                );
                claim.metadata.name = Some(name.clone());
                writers.nodeclaims.apply(ObjectKey::new(None, name), claim);
            }
            // Every CreateTags fails at once, as throttled.
            let provider = RefusingCloud::new(throttled);
            // The mark is never written (every tag fails first): no API server is needed.
            let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a url"));
            let client = Client::try_from(config).expect("a client");
            let (_leading, leader) = watch::channel(true);
            let depth = MailboxDepth::new("tagger", TAGGER_MAILBOX_CAPACITY);
            let tagger = Tagger::new(client, state, provider.clone(), leader, depth.clone());
            let out = Outbox::to_addr(&tagger.start(), depth);
            for name in &names {
                out.deliver(TagInstance { name: name.clone() })
                    .await
                    .expect("the tagger takes requests");
            }
            tokio::time::sleep(Duration::from_secs(10)).await;

            let calls = provider.tag_calls();
            assert_eq!(calls.len(), names.len(), "each NodeClaim tried once");
            for pair in calls.windows(2) {
                assert!(
                    pair[1] - pair[0] >= Duration::from_secs(1) / TAGS_PER_SECOND,
                    "failed CreateTags calls came {:?} apart",
                    pair[1] - pair[0]
                );
            }
        });
    }
}
