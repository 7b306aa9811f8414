//! The Interruption actor end to end: messages as EventBridge writes them go through an
//! in-memory queue with SQS's redelivery semantics into the controller, which runs against
//! the API emulator and launches into the simulated EC2. Each message kind acts on the
//! NodeClaim of the instance it names; a spot interruption issued by the simulated EC2
//! itself is forwarded as EventBridge JSON, deletes the NodeClaim and makes the next solve
//! avoid the interrupted offering.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kerf::cloudprovider::UnavailableOfferings;
use kerf::interruption::messages;
use kerf::labels;
use kerf_actors::Daemon;
use kerf_actors::mailbox::MailboxDepth;
use kerf_actors::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
};
use kerf_loadtest::apiserver::{Cluster, FaultTarget};
use kerf_loadtest::ec2::{Ec2Config, MemoryQueue, SimulatedCloudProvider, forward_interruptions};
use serde_json::{Value, json};

use crate::support::*;

/// Redelivery after half a second keeps the failure test short; a short long poll keeps
/// an idle queue responsive.
const VISIBILITY: Duration = Duration::from_millis(500);
const LONG_POLL: Duration = Duration::from_millis(200);

struct Stack {
    harness: Harness,
    daemon: Daemon,
    provider: Arc<SimulatedCloudProvider>,
    queue: Arc<MemoryQueue>,
}

impl Stack {
    /// The controller watching an in-memory queue, with a NodePool `pool` whose nodes are
    /// spot `m5.large`s (so each 1.5-CPU pod gets a node of its own).
    async fn start(pool: &str) -> Self {
        let harness = start_cluster().await;
        create_nodepool(
            &harness.cluster(),
            nodepool_with(
                pool,
                json!({"spec": {"template": {"spec": {"requirements": [
                    {"key": labels::CAPACITY_TYPE, "operator": "In", "values": ["spot"]},
                    {"key": labels::INSTANCE_TYPE, "operator": "In", "values": ["m5.large", "c5.large"]},
                ]}}}}),
            ),
        );
        let (provider, mut cloud) = simulated_cloud_with(Ec2Config {
            interruption_notice: Duration::from_secs(120),
            ..Ec2Config::instant(REGION)
        });
        // One unavailable-offerings state for the controller and the launches, as the AWS
        // provider shares it.
        let offerings = OfferingCache::start(
            UNAVAILABLE_OFFERINGS_TTL,
            MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
        );
        provider.share_unavailable_offerings(Arc::new(offerings.clone()));
        cloud.offerings = Some(offerings);
        let mut daemon = start_provisioner(&harness, cloud).await;
        let queue = Arc::new(MemoryQueue::with_timing("kerf-test", VISIBILITY, LONG_POLL));
        daemon.watch_interruptions(queue.clone());
        Self {
            harness,
            daemon,
            provider,
            queue,
        }
    }

    fn cluster(&self) -> Cluster {
        self.harness.cluster()
    }

    /// `count` pending pods and the launched NodeClaims they get, one each.
    async fn launched(&self, count: usize) -> Vec<Value> {
        let cluster = self.cluster();
        for i in 0..count {
            create_pending_pod(
                &cluster,
                &format!("web-{i}"),
                json!({}),
                pod_spec("1500m", "1Gi", json!({})),
            );
        }
        let mut launched = Vec::new();
        eventually("every pod's nodeclaim launched", || {
            launched = self
                .claims()
                .into_iter()
                .filter(|c| c["status"]["providerID"].is_string())
                .collect();
            launched.len() == count
        })
        .await;
        let state = &self.daemon.state;
        eventually("cluster state indexes them", || {
            launched
                .iter()
                .all(|c| state.nodeclaim_by_instance_id(&instance_id(c)).is_some())
        })
        .await;
        launched
    }

    fn claims(&self) -> Vec<Value> {
        self.cluster()
            .list("karpenter.sh/v1", "nodeclaims", None, "")
            .expect("nodeclaims list")
    }

    /// Whether `claim` is deleting or gone.
    fn is_deleted(&self, claim: &Value) -> bool {
        let name = name_of(claim);
        self.cluster()
            .get("karpenter.sh/v1", "nodeclaims", None, &name)
            .map_or(true, |c| c["metadata"]["deletionTimestamp"].is_string())
    }

    async fn until_queue_empty(&self) {
        let queue = &self.queue;
        eventually("every message handled and deleted", || queue.is_empty()).await;
    }

    async fn stop(self) {
        self.daemon.stop().await;
        self.harness.stop().await;
    }
}

pub(crate) fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub(crate) fn instance_id(claim: &Value) -> String {
    claim["status"]["providerID"]
        .as_str()
        .and_then(|p| p.rsplit('/').next())
        .unwrap_or_default()
        .to_owned()
}

fn label(claim: &Value, key: &str) -> String {
    claim["metadata"]["labels"][key]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn events_about(cluster: &Cluster, name: &str, reason: &str) -> usize {
    cluster
        .list("v1", "events", Some("default"), "")
        .expect("events list")
        .iter()
        .filter(|e| e["involvedObject"]["name"] == name && e["reason"] == reason)
        .count()
}

async fn metrics(daemon: &Daemon) -> String {
    http_get(daemon.metrics_addr, "/metrics").await.1
}

#[test]
fn each_message_kind_acts_on_the_nodeclaim_of_the_instance_it_names() {
    run(|| async {
        let pool = "kinds";
        let stack = Stack::start(pool).await;
        let claims = stack.launched(6).await;
        let [
            rebalance,
            stopping,
            terminated,
            scheduled,
            reservation,
            untouched,
        ] = <[Value; 6]>::try_from(claims).expect("six claims");
        let now = Timestamp::now();
        let region = REGION;
        for body in [
            messages::rebalance_recommendation("m1", region, now, &instance_id(&rebalance)),
            messages::state_change("m2", region, now, &instance_id(&stopping), "stopping"),
            messages::state_change("m3", region, now, &instance_id(&terminated), "terminated"),
            messages::scheduled_change("m4", region, now, &[&instance_id(&scheduled)]),
            messages::capacity_reservation_interruption(
                "m5",
                region,
                now,
                &instance_id(&reservation),
            ),
            // A state the controller ignores, and an instance kerf does not know.
            messages::state_change("m6", region, now, &instance_id(&untouched), "running"),
            messages::spot_interruption("m7", region, now, "i-00000000000000000"),
        ] {
            stack.queue.send(body);
        }
        stack.until_queue_empty().await;
        for claim in [&stopping, &terminated, &scheduled, &reservation] {
            eventually("the named nodeclaim is deleted", || stack.is_deleted(claim)).await;
        }
        assert!(
            !stack.is_deleted(&rebalance),
            "a rebalance recommendation only tells"
        );
        assert!(!stack.is_deleted(&untouched), "no message meant this one");

        let cluster = stack.cluster();
        for (claim, reason) in [
            (&rebalance, "SpotRebalanceRecommendation"),
            (&stopping, "InstanceStopping"),
            (&terminated, "InstanceTerminating"),
            (&scheduled, "InstanceUnhealthy"),
            (&reservation, "CapacityReservationInstanceInterrupted"),
            (&stopping, "TerminatingOnInterruption"),
        ] {
            let name = name_of(claim);
            eventually(&format!("{reason} event on {name}"), || {
                events_about(&cluster, &name, reason) > 0
            })
            .await;
        }
        assert_eq!(
            events_about(&cluster, &name_of(&rebalance), "TerminatingOnInterruption"),
            0
        );

        // The reserved offering of the capacity reservation interruption is marked.
        let offerings = stack.daemon.offerings.as_ref().expect("an offering cache");
        let (itype, zone) = (
            label(&reservation, labels::INSTANCE_TYPE),
            label(&reservation, labels::ZONE),
        );
        eventually("the reserved offering is marked", || {
            offerings.is_unavailable(&itype, &zone, labels::CAPACITY_TYPE_RESERVED, &[])
        })
        .await;

        let text = metrics(&stack.daemon).await;
        for reason in [
            "instance_stopped",
            "instance_terminated",
            "scheduled_change",
            "capacity_reservation_interrupted",
        ] {
            let line = format!(
                "karpenter_nodeclaims_disrupted_total{{reason=\"{reason}\",nodepool=\"{pool}\",capacity_type=\"spot\"}} 1"
            );
            assert!(text.contains(&line), "{line} missing:\n{text}");
        }
        for kind in ["rebalance_recommendation", "no_op", "spot_interrupted"] {
            let series = format!(
                "karpenter_interruption_received_messages_total{{message_type=\"{kind}\"}}"
            );
            assert!(text.contains(&series), "{series} missing");
        }
        assert!(text.contains("karpenter_interruption_message_queue_duration_seconds_bucket"));
        stack.stop().await;
    });
}

#[test]
fn duplicate_late_and_unparseable_messages_are_harmless_and_deleted() {
    run(|| async {
        let pool = "duplicates";
        let stack = Stack::start(pool).await;
        let claims = stack.launched(2).await;
        let (gone, kept) = (&claims[0], &claims[1]);
        let now = Timestamp::now();
        let stop =
            |id: &str| messages::state_change(id, REGION, now, &instance_id(gone), "stopping");
        for body in [
            stop("d1"),
            stop("d2"),
            messages::state_change("d3", REGION, now, &instance_id(gone), "terminated"),
            "not an event".to_owned(),
            include_str!("../../../src/interruption/fixtures/unknown_kind.json").to_owned(),
        ] {
            stack.queue.send(body);
        }
        stack.until_queue_empty().await;
        eventually("the nodeclaim is deleted", || stack.is_deleted(gone)).await;
        eventually("and released", || {
            stack
                .cluster()
                .get("karpenter.sh/v1", "nodeclaims", None, &name_of(gone))
                .is_err()
        })
        .await;
        // Late: the NodeClaim is gone by now.
        stack.queue.send(stop("d4"));
        stack.until_queue_empty().await;
        assert_eq!(
            stack.queue.deleted(),
            6,
            "every message deleted, the unparseable one too"
        );
        assert!(!stack.is_deleted(kept));

        let text = metrics(&stack.daemon).await;
        let counted: Vec<&str> = text
            .lines()
            .filter(|l| {
                l.starts_with("karpenter_nodeclaims_disrupted_total")
                    && l.contains(&format!("nodepool=\"{pool}\""))
            })
            .collect();
        assert_eq!(
            counted,
            vec![format!(
                "karpenter_nodeclaims_disrupted_total{{reason=\"instance_stopped\",nodepool=\"{pool}\",capacity_type=\"spot\"}} 1"
            )],
            "one disruption for one NodeClaim, however many messages"
        );
        assert!(
            text.contains("kerf_interruption_unparseable_messages_total"),
            "{text}"
        );
        stack.stop().await;
    });
}

#[test]
fn a_message_whose_handling_fails_is_delivered_again_and_then_acted_on() {
    run(|| async {
        let stack = Stack::start("redelivery").await;
        let claims = stack.launched(1).await;
        stack.harness.server.faults().fail_next(
            FaultTarget {
                method: "DELETE".to_owned(),
                plural: "nodeclaims".to_owned(),
                subresource: None,
            },
            1,
        );
        let body = messages::state_change(
            "r1",
            REGION,
            Timestamp::now(),
            &instance_id(&claims[0]),
            "shutting-down",
        );
        stack.queue.send(body);
        eventually("the nodeclaim is deleted on the second delivery", || {
            stack.is_deleted(&claims[0])
        })
        .await;
        stack.until_queue_empty().await;
        assert_eq!(stack.harness.server.faults().injected_failures(), 1);
        assert_eq!(stack.queue.deleted(), 1);
        stack.stop().await;
    });
}

#[test]
fn a_spot_interruption_from_ec2_deletes_the_nodeclaim_and_the_next_solve_avoids_the_offering() {
    run(|| async {
        let pool = "spot";
        let stack = Stack::start(pool).await;
        let _forwarding = forward_interruptions(stack.provider.ec2(), stack.queue.clone());
        let claims = stack.launched(1).await;
        let interrupted = &claims[0];
        let (itype, zone) = (
            label(interrupted, labels::INSTANCE_TYPE),
            label(interrupted, labels::ZONE),
        );
        stack
            .provider
            .ec2()
            .interrupt_spot(&instance_id(interrupted))
            .expect("a running spot instance");

        eventually("the interrupted nodeclaim is deleted", || {
            stack.is_deleted(interrupted)
        })
        .await;
        // The mark goes through the OfferingCache's mailbox: it lands soon after the delete.
        let offerings = stack.daemon.offerings.as_ref().expect("an offering cache");
        eventually(
            "the interrupted spot offering is unavailable for the next solves",
            || offerings.is_unavailable(&itype, &zone, labels::CAPACITY_TYPE_SPOT, &[]),
        )
        .await;
        let mut replacement = None;
        eventually("a replacement launches for the displaced pod", || {
            replacement = stack.claims().into_iter().find(|c| {
                name_of(c) != name_of(interrupted) && c["status"]["providerID"].is_string()
            });
            replacement.is_some()
        })
        .await;
        let replacement = replacement.expect("found");
        assert_ne!(
            (
                label(&replacement, labels::INSTANCE_TYPE),
                label(&replacement, labels::ZONE)
            ),
            (itype, zone),
            "the replacement avoids the interrupted offering"
        );
        let cluster = stack.cluster();
        eventually("SpotInterrupted event", || {
            events_about(&cluster, &name_of(interrupted), "SpotInterrupted") > 0
        })
        .await;
        let text = metrics(&stack.daemon).await;
        let line = format!(
            "karpenter_nodeclaims_disrupted_total{{reason=\"spot_interrupted\",nodepool=\"{pool}\",capacity_type=\"spot\"}} 1"
        );
        assert!(text.contains(&line), "{line} missing:\n{text}");
        stack.stop().await;
    });
}
