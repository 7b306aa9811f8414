//! The `/explain` endpoint's answer ([`kerf::explain::controller`]): what only this replica
//! holds — the unavailable-offerings cache, the nominations, the disruption loop's last pass —
//! read from the shared handles without messaging any actor, so a slow or busy actor never
//! delays it and it runs on every replica, leader or not (it says which). The handles exist
//! only once the daemon started the actors after binding the port: until then (and without a
//! cloud provider) their parts are empty.

use std::sync::OnceLock;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kerf::explain::controller::{
    ControllerState, DisruptionPass, Nomination, Unavailable, UnavailableOffering,
};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::created_claims::{CreatedClaims, NOMINATION_WINDOW};
use crate::disruption::Progress;
use crate::offering_cache::TableView;
use crate::state::ClusterState;

/// The handles the answer reads, set by the daemon as it starts each part.
#[derive(Default)]
pub struct ExplainSources {
    pub leader: OnceLock<watch::Receiver<bool>>,
    pub offerings: OnceLock<TableView>,
    pub nominations: OnceLock<CreatedClaims>,
    pub disruption: OnceLock<watch::Receiver<Progress>>,
}

impl ExplainSources {
    /// The answer now.
    pub fn state(&self, cluster: &ClusterState) -> ControllerState {
        let now = Instant::now();
        let wall = Timestamp::now();
        // Whole seconds, as the API writes times.
        let at = |until: Instant| {
            let left = until.saturating_duration_since(now);
            let exact = wall
                .checked_add(SignedDuration::try_from(left).unwrap_or(SignedDuration::MAX))
                .unwrap_or(wall);
            Timestamp::from_second(exact.as_second()).unwrap_or(exact)
        };
        let mut answer = ControllerState {
            leader: self.leader.get().is_some_and(|l| *l.borrow()),
            synced: cluster.synced(),
            ..ControllerState::default()
        };
        if let Some(offerings) = self.offerings.get() {
            offerings.read(|table| {
                answer.unavailable_offerings = table
                    .offerings()
                    .into_iter()
                    .map(
                        |(instance_type, zone, capacity_type, until)| UnavailableOffering {
                            instance_type: instance_type.to_owned(),
                            zone: zone.to_owned(),
                            capacity_type: capacity_type.to_owned(),
                            expires: at(until),
                        },
                    )
                    .collect();
                let unavailable = |list: Vec<(&str, Instant)>| {
                    list.into_iter()
                        .map(|(name, until)| Unavailable {
                            name: name.to_owned(),
                            expires: at(until),
                        })
                        .collect()
                };
                answer.unavailable_capacity_types = unavailable(table.capacity_types());
                answer.unavailable_subnets = unavailable(table.subnets());
            });
        }
        if let Some(created) = self.nominations.get() {
            let nominated = created.nominated_now(cluster, NOMINATION_WINDOW);
            let (claims, nodes) = nominated.names();
            for claim in claims {
                let pods = created
                    .nominated_pods(claim)
                    .iter()
                    .map(|p| format!("{}/{}", p.namespace, p.name))
                    .collect();
                answer.nominations.push(Nomination {
                    name: claim.to_owned(),
                    existing_node: false,
                    pods,
                });
            }
            answer
                .nominations
                .extend(nodes.into_iter().map(|node| Nomination {
                    name: node.to_owned(),
                    existing_node: true,
                    pods: Vec::new(),
                }));
        }
        if let Some(progress) = self.disruption.get() {
            let progress = progress.borrow();
            answer.disruption = Some(DisruptionPass {
                passes: progress.passes,
                idle: progress.idle,
                next_consolidatable: progress.next_consolidatable,
                commands: progress
                    .commands
                    .iter()
                    .map(|(method, nodes)| format!("{method:?}: {}", nodes.join(", ")))
                    .collect(),
            });
        }
        answer
    }
}
