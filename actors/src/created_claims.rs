//! The registry of NodeClaims the NodeClaimCreator created and the pods each was created for
//! (its nominations), shared by the actors that read them. A created NodeClaim is kept
//! until the watch has surely delivered it, so the next round counts it as in-flight
//! capacity; its pods are held on it while it is in flight and for [`NOMINATION_WINDOW`]
//! after its Node is initialized (longer, up to [`NOMINATION_LIMIT`], for a pod the
//! kube-scheduler has not refused since or whose fit the Node shows), so later rounds do
//! not re-pack them from scratch. Writers: the NodeClaimCreator adds each before answering
//! the Provisioner and the lifecycle withdraws one whose launch was refused; a round adds
//! the pods it places in the room left on one ([`CreatedClaims::assign`]), releases those
//! that do not fit on its Node ([`CreatedClaims::release`]) and records the nodes it
//! places pods on ([`CreatedClaims::target`]). Readers: the Provisioner (in-flight claims
//! and held pods), the Batcher (a lapsing nomination starts a batch), the lifecycle (whom
//! to nominate, and whose nomination to withdraw: [`CreatedClaims::is_released`],
//! [`refusal_settles`]), the disruption loop ([`CreatedClaims::nominated_now`]: nominated
//! nodes are left alone, as upstream) and shutdown (claims still to launch).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use k8s_openapi::jiff::Timestamp;
use kerf::api::NodeClaim;
use kerf::api::condition::Conditions;
use kerf::pods::{LeanPod, PodLike};
use kerf::scheduling::PodRef;
use tokio::time::Instant;

use crate::state::{ClusterState, ObjectKey};

/// How long a created NodeClaim counts as in-flight capacity before its watch event
/// arrives. Events normally arrive within milliseconds; the bound only matters for a
/// NodeClaim deleted by someone else before the watch saw it, whose pods must not stay
/// covered by it for good.
pub const UNSEEN_NODECLAIM_GRACE: Duration = Duration::from_secs(30);

/// How long pods stay nominated to a NodeClaim after its Node is initialized: the time the
/// kube-scheduler gets to bind them before a round plans them afresh. Upstream's nomination
/// window, `max(2 × BATCH_MAX_DURATION, 10s)` at the default 10 s batch.
pub const NOMINATION_WINDOW: Duration = Duration::from_secs(20);

/// The longest pods stay nominated to a NodeClaim after its Node is initialized: past
/// [`NOMINATION_WINDOW`], a pod the kube-scheduler has not refused since ([`tried_since`]),
/// or whose fit the Node's own pods and room show ([`refusal_settles`]), stays nominated
/// and held until then while rounds find it still fitting there. When a thousand Nodes
/// initialize within seconds, ten thousand pods become bindable at once and the
/// kube-scheduler works through them at hundreds a second with per-pod backoff: the last of
/// them wait longer than the window for their first try, while the room planned for them is
/// still there. Upstream
/// keeps such a pod nominated as long as each round places it on the same node; planned
/// afresh instead, it is packed among the room other pods took meanwhile, and the pods that
/// no longer fit get new NodeClaims (the `scale-out-10k` scenario exercises this). A pod
/// whose room is really gone is released as soon as a round sees what took it
/// ([`CreatedClaims::release`]); one whose fit depends on peers elsewhere once the
/// kube-scheduler refuses it past the window, or a round finds its required topology spread
/// not allowing its Node's domain: held to the limit, such a pod would wait for it and
/// then for new capacity. The limit bounds the wait for a try that leaves no trace (a
/// refusal whose report is unchanged is not written again).
pub const NOMINATION_LIMIT: Duration = Duration::from_secs(60);

/// The pods one NodeClaim was created for, shared with each reader: a round reads every
/// NodeClaim's, and each nomination write borrows its pod from the list, so a copy per
/// reader would grow with every pending pod (a change copies the list only while it is read).
pub type HeldPods = Arc<Vec<PodRef>>;

/// The pods one NodeClaim was created for.
#[derive(Clone, Debug)]
struct Nomination {
    pods: HeldPods,
    created: Instant,
    /// When a round first saw its Node initialized.
    initialized: Option<Instant>,
    /// The uids of its pods a round found not fitting on its initialized Node
    /// ([`CreatedClaims::release`]): held no more, and their nominations withdrawn.
    released: HashSet<String>,
}

/// The registry; clones share it.
#[derive(Clone, Debug, Default)]
pub struct CreatedClaims {
    /// Each created NodeClaim until the store has it, behind an `Arc`: the table keeps the
    /// room of the most it ever held, and a NodeClaim's own struct is a kilobyte.
    claims: Arc<DashMap<String, (Arc<NodeClaim>, Instant)>>,
    /// The pods each created NodeClaim was planned for.
    nominated: Arc<DashMap<String, Nomination>>,
    /// When a round last placed pending pods on each existing node, by node name.
    targeted: Arc<DashMap<String, Instant>>,
}

/// The NodeClaims and nodes nominated for pending pods at one moment
/// ([`CreatedClaims::nominated_now`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Nominated {
    claims: HashSet<String>,
    nodes: HashSet<String>,
    next_lapse: Option<Instant>,
}

impl Nominated {
    /// Whether the node `node`, of NodeClaim `claim`, is nominated.
    pub fn contains(&self, node: &str, claim: &str) -> bool {
        self.claims.contains(claim) || self.nodes.contains(node)
    }

    /// When time alone next ends a nomination (others end with a change of the cluster: a
    /// Node initialized, a pod tried).
    pub fn next_lapse(&self) -> Option<Instant> {
        self.next_lapse
    }

    /// The nominated NodeClaims (by name) and existing nodes (by node name), sorted.
    pub fn names(&self) -> (Vec<&str>, Vec<&str>) {
        let mut claims: Vec<&str> = self.claims.iter().map(String::as_str).collect();
        let mut nodes: Vec<&str> = self.nodes.iter().map(String::as_str).collect();
        claims.sort_unstable();
        nodes.sort_unstable();
        (claims, nodes)
    }

    fn lapses_at(&mut self, at: Instant) {
        self.next_lapse = Some(self.next_lapse.map_or(at, |next| next.min(at)));
    }
}

impl CreatedClaims {
    /// Created NodeClaims `state` does not hold yet, younger than the grace. The others are
    /// forgotten: the store has them now (a thousand-node scale-up's copies are megabytes,
    /// and the next insert, which also forgets them, may not come for hours).
    pub fn unseen(&self, state: &ClusterState) -> Vec<NodeClaim> {
        self.claims.retain(|name, (_, created)| {
            let key = ObjectKey::new(None, name);
            // Gone already counts as seen: a NodeClaim deleted (and released) within
            // milliseconds, as after insufficient capacity, must not cover its pods.
            created.elapsed() < UNSEEN_NODECLAIM_GRACE
                && state.nodeclaims.get(&key).is_none()
                && !state.nodeclaims.recently_deleted(&key)
        });
        self.claims
            .iter()
            .map(|entry| NodeClaim::clone(&entry.value().0))
            .collect()
    }

    /// The store holds NodeClaim `name` now (its first reconcile read it there): the copy
    /// kept for rounds until then is dropped, its nomination kept. A large round's thousand
    /// copies would otherwise stay beside the store's until the next round.
    pub(crate) fn seen(&self, name: &str) {
        self.claims.remove(name);
    }

    /// The pods nominated to each NodeClaim, by NodeClaim name: one this NodeClaimCreator created
    /// that is not being deleted, until [`NOMINATION_WINDOW`] after its Node is initialized
    /// (the kube-scheduler binds them meanwhile; the pods it did not take are then planned
    /// afresh), and past it, until [`NOMINATION_LIMIT`], the pending ones it has not tried
    /// since. Nominations of NodeClaims that are done or gone are dropped.
    pub fn nominations(&self, state: &ClusterState) -> HashMap<String, HeldPods> {
        let mut held = HashMap::new();
        self.nominated.retain(|name, nomination| {
            let progress = progress(state, name, nomination.created);
            if matches!(progress, Progress::Initialized(_)) {
                nomination.initialized.get_or_insert_with(Instant::now);
            }
            match nomination.holds(state, progress, NOMINATION_WINDOW) {
                Holds::Over => false,
                // Kept while it lasts: the lifecycle withdraws its pods' nominations as the
                // kube-scheduler refuses them.
                Holds::Nothing => true,
                Holds::Pods(pods) => {
                    held.insert(name.clone(), pods);
                    true
                }
            }
        });
        held
    }

    /// The NodeClaims whose Node a round saw initialized [`NOMINATION_WINDOW`] ago or more:
    /// the kube-scheduler has had its time to bind their pods, so a pod still held there is
    /// one it may have refused without a trace, and a round judges its fit itself.
    pub fn past_window(&self) -> HashSet<String> {
        self.nominated
            .iter()
            .filter(|entry| {
                let seen = entry.value().initialized;
                seen.is_some_and(|at| at.elapsed() >= NOMINATION_WINDOW)
            })
            .map(|entry| entry.key().clone())
            .collect()
    }

    /// What is nominated now with a nomination `window` (at most [`NOMINATION_WINDOW`]),
    /// as the disruption loop asks (upstream leaves a nominated node alone): the NodeClaims
    /// whose nominations hold pods ([`CreatedClaims::nominations`] with that window, read
    /// without starting any), and the nodes a round placed pending pods on within it
    /// ([`CreatedClaims::target`]).
    pub fn nominated_now(&self, state: &ClusterState, window: Duration) -> Nominated {
        let now = Instant::now();
        let mut nominated = Nominated::default();
        for entry in self.nominated.iter() {
            let nomination = entry.value();
            let progress = progress(state, entry.key(), nomination.created);
            if !matches!(nomination.holds(state, progress, window), Holds::Pods(_)) {
                continue;
            }
            nominated.claims.insert(entry.key().clone());
            // One in flight lapses no sooner than its Node is initialized: a change.
            if let Progress::Initialized(at) = progress {
                let since = nomination.since_initialized(at);
                let left = window
                    .checked_sub(since)
                    .unwrap_or_else(|| NOMINATION_LIMIT.saturating_sub(since));
                nominated.lapses_at(now + left);
            }
        }
        for entry in self.targeted.iter() {
            let lapse = *entry.value() + window;
            if lapse > now {
                nominated.nodes.insert(entry.key().clone());
                nominated.lapses_at(lapse);
            }
        }
        nominated
    }

    /// Records that a round placed pending pods on the existing nodes `nodes` (by node
    /// name): each is nominated for [`NOMINATION_WINDOW`] from now, as upstream nominates
    /// every node a round plans pods onto, whoever created it.
    pub fn target<'a>(&self, nodes: impl IntoIterator<Item = &'a str>) {
        let now = Instant::now();
        self.targeted
            .retain(|_, at| now.duration_since(*at) < NOMINATION_WINDOW);
        for node in nodes {
            self.targeted.insert(node.to_owned(), now);
        }
    }

    /// When the first nomination window or limit ends after `after`: a moment pods a
    /// NodeClaim held are to be planned afresh. Only windows a round has seen start (its
    /// Node initialized) count.
    pub fn next_lapse_after(&self, after: Instant) -> Option<Instant> {
        self.nominated
            .iter()
            .filter_map(|entry| entry.value().initialized)
            .flat_map(|initialized| {
                [
                    initialized + NOMINATION_WINDOW,
                    initialized + NOMINATION_LIMIT,
                ]
            })
            .filter(|lapse| *lapse > after)
            .min()
    }

    /// The pods NodeClaim `name` was created for, while its nomination lasts.
    pub fn nominated_pods(&self, name: &str) -> HeldPods {
        self.nominated
            .get(name)
            .map(|nomination| Arc::clone(&nomination.pods))
            .unwrap_or_default()
    }

    /// Adds to NodeClaim `name`'s pods those a later round placed in its remaining room,
    /// within its nomination window (a NodeClaim past it, or not created here, gets none):
    /// the next round holds them there as it holds the pods the NodeClaim was created for,
    /// and its registration nominates them. Left out, they would be solved again from
    /// scratch each round, packed differently among the pods that arrived since, and could
    /// spill onto new NodeClaims while the room planned for them boots. Returns how many
    /// were added (pods already there are not added twice).
    pub fn assign(&self, name: &str, pods: &[PodRef]) -> usize {
        let Some(mut nomination) = self.nominated.get_mut(name) else {
            return 0;
        };
        if nomination
            .initialized
            .is_some_and(|seen| seen.elapsed() >= NOMINATION_WINDOW)
        {
            return 0;
        }
        for pod in pods {
            nomination.released.remove(pod.uid.as_str());
        }
        let held = Arc::make_mut(&mut nomination.pods);
        let before = held.len();
        for pod in pods {
            if !held.iter().any(|h| h.uid == pod.uid) {
                held.push(pod.clone());
            }
        }
        held.len() - before
    }

    /// Records that a round found `pods` (by uid), held on NodeClaim `name`'s initialized
    /// Node, not fitting beside the pods the kube-scheduler bound there: they are held
    /// no more (rounds plan them afresh) and the lifecycle withdraws their nominations
    /// ([`CreatedClaims::is_released`]). A later round that places one there again
    /// ([`CreatedClaims::assign`]) holds it again.
    pub fn release<'a>(&self, name: &str, pods: impl IntoIterator<Item = &'a str>) {
        if let Some(mut nomination) = self.nominated.get_mut(name) {
            nomination
                .released
                .extend(pods.into_iter().map(str::to_owned));
        }
    }

    /// Whether a round released pod `uid` from NodeClaim `name` ([`CreatedClaims::release`]).
    pub fn is_released(&self, name: &str, uid: &str) -> bool {
        self.nominated
            .get(name)
            .is_some_and(|nomination| nomination.released.contains(uid))
    }

    /// NodeClaims created here whose launch has not ended: not `Launched`, not deleting,
    /// and either in `state` or created within the grace (their watch event may be on its
    /// way). A stopping leader waits for these, not only for launches already running: a
    /// NodeClaim's launch starts only once the lifecycle has seen it and set its finalizer.
    pub fn awaiting_launch(&self, state: &ClusterState) -> usize {
        self.nominated
            .iter()
            .filter(|entry| awaits_launch(state, entry.key(), entry.value().created))
            .count()
    }

    /// Records a NodeClaim just created for `pods`, forgetting ones past the grace.
    pub(super) fn insert(&self, claim: NodeClaim, pods: Vec<PodRef>) {
        self.claims
            .retain(|_, (_, created)| created.elapsed() < UNSEEN_NODECLAIM_GRACE);
        let name = claim.metadata.name.clone().unwrap_or_default();
        let now = Instant::now();
        let nomination = Nomination {
            pods: Arc::new(pods),
            created: now,
            initialized: None,
            released: HashSet::new(),
        };
        self.nominated.insert(name.clone(), nomination);
        self.claims.insert(name, (Arc::new(claim), now));
    }

    /// Records `claim`, created for `pods`, as the NodeClaimCreator does after its create.
    #[cfg(test)]
    pub(crate) fn record(&self, claim: NodeClaim, pods: Vec<PodRef>) {
        self.insert(claim, pods);
    }

    /// Forgets a NodeClaim that is being deleted: it is no capacity any more.
    pub(crate) fn withdraw(&self, name: &str) {
        self.claims.remove(name);
        self.nominated.remove(name);
    }
}

/// What a nomination holds now.
enum Holds {
    Pods(HeldPods),
    /// No pod, for now: every pod it held was released, or past the window refused or bound.
    Nothing,
    /// Its NodeClaim is gone, or the limit has passed.
    Over,
}

impl Nomination {
    /// What it holds with its NodeClaim at `progress`: all its pods a round has not
    /// released for `window` after its Node was initialized
    /// ([`Nomination::since_initialized`]), then those still pending it can keep
    /// ([`still_held`]).
    fn holds(&self, state: &ClusterState, progress: Progress, window: Duration) -> Holds {
        let at = match progress {
            Progress::Gone => return Holds::Over,
            Progress::InFlight => return Holds::Pods(Arc::clone(&self.pods)),
            Progress::Initialized(at) => at,
        };
        let since = self.since_initialized(at);
        if since >= NOMINATION_LIMIT {
            return Holds::Over;
        }
        if since < window && self.released.is_empty() {
            return Holds::Pods(Arc::clone(&self.pods));
        }
        let past_window = since >= window;
        let kept: Vec<PodRef> = self
            .pods
            .iter()
            .filter(|pod| !self.released.contains(pod.uid.as_str()))
            .filter(|pod| !past_window || still_held(state, pod, at))
            .cloned()
            .collect();
        if kept.is_empty() {
            Holds::Nothing
        } else {
            Holds::Pods(Arc::new(kept))
        }
    }

    /// How long ago its Node was initialized, as nominations count it: since a round first
    /// saw it so (the rounds' clock), else since its NodeClaim's `Initialized` time `at` (a
    /// reader between rounds: no round may come once every pod is bound); zero when
    /// neither is known.
    fn since_initialized(&self, at: Option<Timestamp>) -> Duration {
        match self.initialized {
            Some(seen) => seen.elapsed(),
            None => at
                .and_then(|at| Duration::try_from(Timestamp::now().duration_since(at)).ok())
                .unwrap_or_default(),
        }
    }
}

/// Where a created NodeClaim is on its way to an initialized Node.
#[derive(Clone, Copy)]
enum Progress {
    /// Deleted, deleting, or never delivered by the watch within the grace.
    Gone,
    InFlight,
    /// With the NodeClaim's `Initialized` time, once its status says so.
    Initialized(Option<Timestamp>),
}

/// Whether `pod`, past its nomination window, stays held on its Node initialized at
/// `initialized` (with no time, while pending): while it is pending and either the
/// kube-scheduler has not refused it since ([`tried_since`]) or its fit is one the rounds
/// judge themselves ([`refusal_settles`] says no).
fn still_held(state: &ClusterState, pod: &PodRef, initialized: Option<Timestamp>) -> bool {
    state.pod(pod).is_some_and(|stored| {
        !kerf::pods::is_bound(&stored)
            && !initialized.is_some_and(|at| refusal_settles(&stored, at))
    })
}

/// Whether the kube-scheduler's refusal of `pod` since its Node was initialized at
/// `initialized` ends the pod's nomination once the window has passed. For a pod whose fit
/// the Node's own pods and room decide ([`kerf::pods::fit_settled_by_host`]) the rounds
/// judge it from what is bound there ([`CreatedClaims::release`]), and the refusal does
/// not: it may have been decided on a view that did not have the Node yet, and through a
/// large scale-up the kube-scheduler's next try comes after the window. Released on such a
/// report, a pod loses the room held for it to pods the kube-scheduler places meanwhile,
/// and a one-per-node pod that loses its room needs a NodeClaim of its own.
pub fn refusal_settles(pod: &LeanPod, initialized: Timestamp) -> bool {
    tried_since(pod, initialized) && !kerf::pods::fit_settled_by_host(pod)
}

/// Whether the kube-scheduler tried `pod` since its Node was initialized at `initialized`
/// and found it no place: its latest verdict is `Unschedulable` and came in a later second,
/// by the condition's `lastTransitionTime` (set when the pod turned unschedulable) or by the
/// time of the scheduler's last status write ([`PodLike::scheduler_reported_at`]:
/// kube-scheduler keeps the transition time while the pod stays unschedulable, and rewrites
/// the report when its message changes).
pub fn tried_since(pod: &LeanPod, initialized: Timestamp) -> bool {
    last_refused(pod).is_some_and(|at| at.as_second() > initialized.as_second())
}

/// When the kube-scheduler last reported `pod` unschedulable, if that is its latest verdict:
/// the later of the condition's `lastTransitionTime` and the scheduler's last status write
/// (see [`tried_since`]). The times have no finer grain than a second.
pub fn last_refused(pod: &LeanPod) -> Option<Timestamp> {
    let condition = kerf::pods::unschedulable_condition(pod)?;
    let transitioned = condition.last_transition_time;
    transitioned.max(pod.scheduler_reported_at())
}

fn awaits_launch(state: &ClusterState, name: &str, created: Instant) -> bool {
    let key = ObjectKey::new(None, name);
    match state.nodeclaims.get(&key) {
        Some(claim) => {
            claim.metadata.deletion_timestamp.is_none()
                && !claim.is_condition_true(kerf::api::condition::types::LAUNCHED)
        }
        None => {
            created.elapsed() < UNSEEN_NODECLAIM_GRACE && !state.nodeclaims.recently_deleted(&key)
        }
    }
}

/// How far NodeClaim `name`, created at `created`, has got.
fn progress(state: &ClusterState, name: &str, created: Instant) -> Progress {
    let key = ObjectKey::new(None, name);
    let Some(claim) = state.nodeclaims.get(&key) else {
        let unseen =
            created.elapsed() < UNSEEN_NODECLAIM_GRACE && !state.nodeclaims.recently_deleted(&key);
        return if unseen {
            Progress::InFlight
        } else {
            Progress::Gone
        };
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Progress::Gone;
    }
    let node = claim
        .status
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
        .and_then(|n| state.nodes.get(&ObjectKey::new(None, n)));
    let initialized = node.is_some_and(|node| {
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(kerf::labels::INITIALIZED))
            .is_some_and(|v| v == "true")
    });
    if initialized {
        let at = claim
            .conditions()
            .condition(kerf::api::condition::types::INITIALIZED)
            .filter(|c| c.is_true())
            .map(|c| c.last_transition_time.0);
        Progress::Initialized(at)
    } else {
        Progress::InFlight
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::{NodeClaimSpec, NodeClassReference};

    fn claim(name: &str) -> NodeClaim {
        NodeClaim::new(
            name,
            NodeClaimSpec {
                taints: Vec::new(),
                startup_taints: Vec::new(),
                requirements: Vec::new(),
                resources: None,
                node_class_ref: NodeClassReference {
                    group: kerf::labels::AWS_GROUP.to_owned(),
                    kind: "EC2NodeClass".to_owned(),
                    name: "default".to_owned(),
                },
                expire_after: kerf::api::NillableDuration::parse("720h").expect("valid"),
                termination_grace_period: None,
            },
        )
    }

    fn names(claims: &[NodeClaim]) -> Vec<String> {
        let mut names: Vec<String> = claims.iter().map(|c| c.name().to_owned()).collect();
        names.sort();
        names
    }

    #[tokio::test(start_paused = true)]
    async fn created_claims_count_until_seen_withdrawn_or_past_the_grace() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        created.insert(claim("a"), Vec::new());
        created.insert(claim("b"), Vec::new());
        created.insert(claim("c"), Vec::new());
        assert_eq!(names(&created.unseen(&state)), ["a", "b", "c"]);

        writers
            .nodeclaims
            .apply(ObjectKey::new(None, "a"), claim("a"));
        created.withdraw("b");
        assert_eq!(names(&created.unseen(&state)), ["c"]);
        assert_eq!(
            created.claims.len(),
            1,
            "the copy of a seen NodeClaim is dropped"
        );

        created.seen("c");
        assert!(
            created.claims.is_empty(),
            "the copy of a seen NodeClaim is dropped"
        );
        assert!(created.nominated.contains_key("c"), "its nomination stays");
        created.insert(claim("c"), Vec::new());
        tokio::time::advance(UNSEEN_NODECLAIM_GRACE).await;
        assert!(created.unseen(&state).is_empty());
        assert!(created.claims.is_empty());
        created.insert(claim("c"), Vec::new());
        created.insert(claim("d"), Vec::new());
        tokio::time::advance(UNSEEN_NODECLAIM_GRACE).await;
        created.insert(claim("e"), Vec::new());
        assert_eq!(created.claims.len(), 1, "old entries are dropped on insert");
    }

    fn pods(names: &[&str]) -> Vec<PodRef> {
        names
            .iter()
            .map(|n| PodRef::new("default", *n, *n))
            .collect()
    }

    fn node(name: &str, initialized: bool) -> k8s_openapi::api::core::v1::Node {
        let label = if initialized { "true" } else { "false" };
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "labels": {kerf::labels::INITIALIZED: label}}
        }))
        .expect("valid node")
    }

    fn on_node(name: &str, node: &str) -> NodeClaim {
        let mut claim = claim(name);
        claim.status = Some(
            serde_json::from_value(serde_json::json!({"nodeName": node})).expect("valid status"),
        );
        claim
    }

    #[tokio::test(start_paused = true)]
    async fn nominations_last_while_the_nodeclaim_is_in_flight() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        for (name, pod) in [("unseen", "p1"), ("launched", "p2"), ("registering", "p3")] {
            created.insert(claim(name), pods(&[pod]));
        }
        created.insert(claim("initialized"), pods(&["p4"]));
        created.insert(claim("deleting"), pods(&["p5"]));
        created.insert(claim("refused"), pods(&["p6"]));
        created.withdraw("refused");
        let key = |n: &str| ObjectKey::new(None, n);
        writers.nodeclaims.apply(key("launched"), claim("launched"));
        writers
            .nodeclaims
            .apply(key("registering"), on_node("registering", "node-a"));
        writers.nodes.apply(key("node-a"), node("node-a", false));
        writers
            .nodeclaims
            .apply(key("initialized"), on_node("initialized", "node-b"));
        writers.nodes.apply(key("node-b"), node("node-b", true));
        let mut deleting = claim("deleting");
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2024-01-01T00:00:00Z")).expect("a time");
        writers.nodeclaims.apply(key("deleting"), deleting);

        let nominations = created.nominations(&state);
        let mut held: Vec<(&str, &str)> = nominations
            .iter()
            .flat_map(|(claim, pods)| pods.iter().map(move |p| (claim.as_str(), p.uid.as_str())))
            .collect();
        held.sort();
        assert_eq!(
            held,
            [
                ("initialized", "p4"),
                ("launched", "p2"),
                ("registering", "p3"),
                ("unseen", "p1")
            ]
        );

        tokio::time::advance(NOMINATION_WINDOW.max(UNSEEN_NODECLAIM_GRACE)).await;
        let mut left: Vec<String> = created.nominations(&state).into_keys().collect();
        left.sort();
        assert_eq!(
            left,
            ["launched", "registering"],
            "the window after initialization and the grace of an unseen NodeClaim end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_nodeclaim_is_past_its_window_a_window_after_a_round_saw_it_initialized() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        for name in ["unseen", "ready"] {
            created.insert(claim(name), pods(&[name]));
        }
        let ready = on_node("ready", "node-b");
        writers
            .nodeclaims
            .apply(ObjectKey::new(None, "ready"), ready);
        let node_b = node("node-b", true);
        writers.nodes.apply(ObjectKey::new(None, "node-b"), node_b);
        created.nominations(&state);
        tokio::time::advance(NOMINATION_WINDOW - Duration::from_secs(1)).await;
        assert!(created.past_window().is_empty(), "a second to go");
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(created.past_window(), HashSet::from(["ready".to_owned()]));
    }

    #[tokio::test(start_paused = true)]
    async fn what_is_nominated_now_is_read_without_starting_a_window() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        created.insert(claim("booting"), pods(&["p1"]));
        created.insert(claim("ready"), pods(&["p2"]));
        created.insert(claim("long-ready"), pods(&["p3"]));
        let key = |n: &str| ObjectKey::new(None, n);
        writers.nodeclaims.apply(key("booting"), claim("booting"));
        writers
            .nodeclaims
            .apply(key("ready"), on_node("ready", "node-b"));
        writers.nodes.apply(key("node-b"), node("node-b", true));
        let mut long_ready = on_node("long-ready", "node-c");
        long_ready.status = Some(
            serde_json::from_value(serde_json::json!({"nodeName": "node-c", "conditions": [{
                "type": "Initialized", "status": "True", "reason": "Initialized",
                "message": "", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}))
            .expect("valid status"),
        );
        writers.nodeclaims.apply(key("long-ready"), long_ready);
        writers.nodes.apply(key("node-c"), node("node-c", true));
        created.target(["node-x"]);
        let nominated = created.nominated_now(&state, NOMINATION_WINDOW);
        assert!(nominated.contains("", "booting"));
        assert!(nominated.contains("node-b", "ready"));
        assert!(
            nominated.contains("node-x", "claim-x"),
            "a targeted node, by its name"
        );
        assert!(!nominated.contains("node-y", "claim-y"));
        assert_eq!(
            nominated.next_lapse(),
            Some(Instant::now() + NOMINATION_WINDOW),
            "node-x's nomination and node-b's window end a window from now"
        );
        assert!(
            !nominated.contains("node-c", "long-ready"),
            "between rounds, the window counts from the NodeClaim's Initialized time"
        );

        tokio::time::advance(NOMINATION_WINDOW).await;
        let nominated = created.nominated_now(&state, NOMINATION_WINDOW);
        assert!(
            nominated.contains("node-b", "ready"),
            "reading started no window: no round has seen node-b initialized, and its \
             NodeClaim does not say when it was"
        );
        assert!(
            !nominated.contains("node-x", "claim-x"),
            "a target lasts the window"
        );

        created.nominations(&state);
        tokio::time::advance(NOMINATION_WINDOW).await;
        let nominated = created.nominated_now(&state, NOMINATION_WINDOW);
        assert!(
            !nominated.contains("node-b", "ready"),
            "a window after a round saw it initialized, with none of its pods pending"
        );
        assert!(nominated.contains("", "booting"), "in flight still");
    }

    #[tokio::test(start_paused = true)]
    async fn the_end_of_a_nomination_window_retriggers_the_pending_pods() {
        use crate::batcher::triggers::{Retrigger, on_nomination_lapse};
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        created.insert(claim("a"), pods(&["p1"]));
        let key = |n: &str| ObjectKey::new(None, n);
        writers.nodeclaims.apply(key("a"), on_node("a", "node-a"));
        writers.nodes.apply(key("node-a"), node("node-a", true));
        let start = Instant::now();
        assert_eq!(created.next_lapse_after(start), None, "no round saw it yet");
        created.nominations(&state);
        assert_eq!(
            created.next_lapse_after(start),
            Some(start + NOMINATION_WINDOW)
        );

        let requests = Retrigger::default();
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(on_nomination_lapse(
            created.clone(),
            requests.clone(),
            shutdown,
        ));
        requests.requested().await;
        assert_eq!(
            Instant::now(),
            start + NOMINATION_WINDOW,
            "not before, not after"
        );
        requests.requested().await;
        assert_eq!(
            Instant::now(),
            start + NOMINATION_LIMIT,
            "the pods not tried yet are released at the limit"
        );
        let again = tokio::time::timeout(NOMINATION_LIMIT * 2, requests.requested()).await;
        assert!(again.is_err(), "a window and its limit end once");
        stop.send_replace(true);
        task.await.expect("the task ends on shutdown");
    }

    #[test]
    fn readers_share_a_nodeclaims_pods_and_a_change_leaves_their_copy_as_it_was() {
        let (state, _writers) = ClusterState::new();
        let created = CreatedClaims::default();
        created.insert(claim("a"), pods(&["p1"]));
        let read = created.nominated_pods("a");
        let round = created.nominations(&state);
        assert!(Arc::ptr_eq(&read, &round["a"]), "one list, not a copy each");
        assert_eq!(created.assign("a", &pods(&["p2"])), 1);
        assert_eq!(read.len(), 1, "a reader keeps the list it read");
        assert_eq!(created.nominated_pods("a").len(), 2);
    }

    #[test]
    fn pods_placed_later_join_a_nodeclaims_own_once_and_only_while_it_holds_pods() {
        let created = CreatedClaims::default();
        created.insert(claim("a"), pods(&["p1"]));
        assert_eq!(created.assign("a", &pods(&["p2", "p1", "p3"])), 2);
        assert_eq!(created.assign("a", &pods(&["p3"])), 0, "already held");
        let held: Vec<String> = created
            .nominated_pods("a")
            .iter()
            .map(|p| p.uid.clone())
            .collect();
        assert_eq!(held, ["p1", "p2", "p3"]);
        created.withdraw("a");
        assert_eq!(created.assign("a", &pods(&["p4"])), 0, "withdrawn");
        assert_eq!(
            created.assign("other", &pods(&["p4"])),
            0,
            "not created here"
        );
        assert!(created.nominated_pods("a").is_empty());
    }

    fn pod(name: &str, scheduled: Option<&str>) -> LeanPod {
        let conditions = scheduled.map(|at| {
            serde_json::json!([{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "lastTransitionTime": at}])
        });
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(serde_json::json!({
            "metadata": {"name": name, "namespace": "default", "uid": name},
            "status": {"phase": "Pending", "conditions": conditions.unwrap_or_default()}
        }))
        .expect("valid pod")
        .into()
    }

    #[test]
    fn a_pod_is_tried_once_reported_unschedulable_in_a_later_second() {
        let initialized: Timestamp = "2026-01-01T00:00:10Z".parse().expect("a time");
        let tried = |reported| tried_since(&pod("p", reported), initialized);
        assert!(!tried(None));
        assert!(!tried(Some("2026-01-01T00:00:09Z")), "before: says nothing");
        assert!(
            !tried(Some("2026-01-01T00:00:10Z")),
            "the same second: unknown order"
        );
        assert!(tried(Some("2026-01-01T00:00:11Z")));
        // kube-scheduler keeps the transition time of a pod that stays unschedulable; its
        // rewritten report shows in the time of its status write.
        let mut rewritten = pod("p", Some("2026-01-01T00:00:01Z")).to_pod();
        let write = |at: &str| {
            serde_json::from_value(serde_json::json!({
                "manager": kerf::pods::SCHEDULER_FIELD_MANAGER, "operation": "Update",
                "subresource": "status", "time": at
            }))
            .expect("a managed fields entry")
        };
        rewritten.metadata.managed_fields = Some(vec![write("2026-01-01T00:00:10Z")]);
        assert!(!tried_since(&rewritten.clone().into(), initialized));
        rewritten.metadata.managed_fields = Some(vec![write("2026-01-01T00:00:12Z")]);
        assert!(tried_since(&rewritten.into(), initialized));
    }

    #[test]
    fn a_refusal_settles_only_what_the_node_cannot_show() {
        let initialized: Timestamp = "2026-01-01T00:00:10Z".parse().expect("a time");
        let refused = pod("p", Some("2026-01-01T00:00:11Z"));
        assert!(
            !refusal_settles(&refused, initialized),
            "the Node's pods and room show whether a plain pod fits"
        );
        let mut spread = pod("spread", Some("2026-01-01T00:00:11Z")).to_pod();
        spread.spec = Some(
            serde_json::from_value(serde_json::json!({"containers": [],
                "topologySpreadConstraints": [{"maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule"}]}))
            .expect("valid spec"),
        );
        assert!(
            refusal_settles(&spread.into(), initialized),
            "a zone's count is not on the Node"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_past_the_window_releases_only_pods_their_node_cannot_judge() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        let names = [
            "untried",
            "refused",
            "refused-before",
            "spread",
            "bound",
            "released",
        ];
        created.insert(claim("a"), pods(&names));
        let key = |n: &str| ObjectKey::new(None, n);
        let mut initialized = on_node("a", "node-a");
        initialized.status = Some(
            serde_json::from_value(serde_json::json!({"nodeName": "node-a", "conditions": [{
                "type": "Initialized", "status": "True", "reason": "Initialized",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:10Z"
            }]}))
            .expect("valid status"),
        );
        writers.nodeclaims.apply(key("a"), initialized);
        writers.nodes.apply(key("node-a"), node("node-a", true));
        let after = Some("2026-01-01T00:00:11Z");
        let reports = [
            ("untried", None),
            ("refused", after),
            ("refused-before", Some("2026-01-01T00:00:09Z")),
            ("spread", after),
            ("bound", None),
            ("released", None),
        ];
        for (name, reported) in reports {
            let mut stored = pod(name, reported).to_pod();
            let spec = match name {
                "bound" => serde_json::json!({"containers": [], "nodeName": "node-a"}),
                // Its fit depends on peers elsewhere: the refusal releases it.
                "spread" => serde_json::json!({"containers": [], "topologySpreadConstraints": [{
                    "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule"}]}),
                _ => serde_json::json!({"containers": []}),
            };
            stored.spec = Some(serde_json::from_value(spec).expect("valid spec"));
            writers
                .pods
                .apply(ObjectKey::new(Some("default"), name), stored);
        }
        let held = |created: &CreatedClaims| -> Vec<String> {
            let nominations = created.nominations(&state);
            let pods = nominations.get("a").map(|p| p.to_vec()).unwrap_or_default();
            pods.into_iter().map(|p| p.uid.clone()).collect()
        };
        assert_eq!(held(&created), names, "within the window, every pod");
        created.release("a", ["released"]);
        assert!(created.is_released("a", "released"));
        assert_eq!(
            held(&created),
            names[..5],
            "a pod a round found without room goes at once"
        );

        tokio::time::advance(NOMINATION_WINDOW).await;
        assert_eq!(
            held(&created),
            ["untried", "refused", "refused-before"],
            "past it, the pending pods but those refused whose node cannot judge their fit"
        );
        assert_eq!(
            created.assign("a", &pods(&["late"])),
            0,
            "no pods join past the window"
        );
        assert_eq!(
            created.nominated_pods("a").len(),
            names.len(),
            "the lifecycle still sees every pod it nominated"
        );

        tokio::time::advance(NOMINATION_LIMIT - NOMINATION_WINDOW).await;
        assert!(held(&created).is_empty(), "the limit releases the rest");
        assert!(created.nominated_pods("a").is_empty());
    }

    fn launched(name: &str) -> NodeClaim {
        let mut claim = claim(name);
        claim.status = Some(
            serde_json::from_value(serde_json::json!({"conditions": [{
                "type": "Launched", "status": "True", "reason": "Launched", "message": "",
                "lastTransitionTime": "2024-01-01T00:00:00Z"
            }]}))
            .expect("valid status"),
        );
        claim
    }

    #[tokio::test(start_paused = true)]
    async fn a_claim_awaits_launch_until_launched_or_deleting_and_unseen_ones_only_for_the_grace() {
        let (state, mut writers) = ClusterState::new();
        let created = CreatedClaims::default();
        for name in ["unseen", "seen", "launched", "deleting"] {
            created.insert(claim(name), Vec::new());
        }
        let key = |n: &str| ObjectKey::new(None, n);
        writers.nodeclaims.apply(key("seen"), claim("seen"));
        writers
            .nodeclaims
            .apply(key("launched"), launched("launched"));
        let mut deleting = claim("deleting");
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(serde_json::json!("2024-01-01T00:00:00Z")).expect("a time");
        writers.nodeclaims.apply(key("deleting"), deleting);
        assert_eq!(created.awaiting_launch(&state), 2, "unseen and seen");

        writers.nodeclaims.apply(key("seen"), launched("seen"));
        assert_eq!(created.awaiting_launch(&state), 1, "unseen");
        tokio::time::advance(UNSEEN_NODECLAIM_GRACE).await;
        assert_eq!(created.awaiting_launch(&state), 0);
    }
}
