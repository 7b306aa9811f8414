//! EC2NodeClass status resolution: subnets, security groups and AMIs from the selector
//! terms, the instance profile from `role` / `instanceProfile`, and the conditions upstream
//! sets — `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady`,
//! `PlacementGroupReady`, `ValidationSucceeded`, and `Ready` when all of them hold — each
//! `False` with a message that
//! says what to fix. An AWS call that fails leaves its condition `Unknown` with the error, so
//! a transient outage is not reported as a misconfiguration.

use crate::ami::{AmiError, AmiProvider, AmiTerm, ResolvedAmi};
use crate::capacityreservation::CapacityReservationProvider;
use crate::instanceprofile::InstanceProfileProvider;
use crate::placementgroup::{PlacementGroupProvider, selector_text};
use crate::securitygroup::SecurityGroupProvider;
use crate::selectors::SelectorTerm;
use crate::subnet::SubnetProvider;
use crate::tags;
use crate::version::KubernetesVersion;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf::api::condition::types;
use kerf::api::ec2nodeclass::{Ami, SecurityGroup, Subnet};
use kerf::api::{Condition, ConditionStatus, EC2NodeClass, EC2NodeClassStatus};
use std::sync::Arc;

/// The provider's view of subnet / security-group terms of the API.
pub fn subnet_terms(nc: &EC2NodeClass) -> Vec<SelectorTerm> {
    nc.spec
        .subnet_selector_terms
        .iter()
        .map(|t| SelectorTerm {
            id: t.id.clone(),
            name: None,
            tags: t.tags.clone(),
        })
        .collect()
}

pub fn security_group_terms(nc: &EC2NodeClass) -> Vec<SelectorTerm> {
    nc.spec
        .security_group_selector_terms
        .iter()
        .map(|t| SelectorTerm {
            id: t.id.clone(),
            name: t.name.clone(),
            tags: t.tags.clone(),
        })
        .collect()
}

pub fn ami_terms(nc: &EC2NodeClass) -> Vec<AmiTerm> {
    nc.spec
        .ami_selector_terms
        .iter()
        .map(|t| AmiTerm {
            alias: t.alias.clone(),
            id: t.id.clone(),
            name: t.name.clone(),
            owner: t.owner.clone(),
            ssm_parameter: t.ssm_parameter.clone(),
            tags: t.tags.clone(),
        })
        .collect()
}

/// A resolved AMI as `status.amis` holds it.
pub fn status_ami(a: &ResolvedAmi) -> Ami {
    Ami {
        id: a.id.clone(),
        name: a.name.clone(),
        deprecated: a.deprecated.then_some(true),
        requirements: a.requirements.clone(),
    }
}

/// One condition's outcome before timestamps are applied.
struct Outcome {
    type_: &'static str,
    status: ConditionStatus,
    reason: String,
    message: String,
}

impl Outcome {
    fn ok(type_: &'static str) -> Self {
        Self {
            type_,
            status: ConditionStatus::True,
            reason: type_.to_owned(),
            message: String::new(),
        }
    }

    fn failed(type_: &'static str, reason: &str, message: String) -> Self {
        Self {
            type_,
            status: ConditionStatus::False,
            reason: reason.to_owned(),
            message,
        }
    }

    fn unknown(type_: &'static str, message: String) -> Self {
        Self {
            type_,
            status: ConditionStatus::Unknown,
            reason: "ResolutionFailed".to_owned(),
            message,
        }
    }
}

/// Resolves node class statuses.
pub struct NodeClassResolver {
    pub subnets: Arc<SubnetProvider>,
    pub security_groups: Arc<SecurityGroupProvider>,
    pub amis: Arc<AmiProvider>,
    pub instance_profiles: Arc<InstanceProfileProvider>,
    /// `None` with the `ReservedCapacity` gate off: reservations are then not resolved.
    pub capacity_reservations: Option<Arc<CapacityReservationProvider>>,
    pub placement_groups: Arc<PlacementGroupProvider>,
    /// The cluster's Kubernetes version (`1.31`), for alias resolution.
    pub kubernetes_version: KubernetesVersion,
}

impl NodeClassResolver {
    /// The status `nc` should have now; `previous` keeps transition times of unchanged
    /// conditions.
    pub async fn resolve(&self, nc: &EC2NodeClass) -> EC2NodeClassStatus {
        let mut status = EC2NodeClassStatus::default();
        let mut outcomes = Vec::new();

        match self.subnets.list(&subnet_terms(nc)).await {
            Ok(found) if found.is_empty() => outcomes.push(Outcome::failed(
                types::SUBNETS_READY,
                "SubnetsNotFound",
                "SubnetSelector did not match any Subnets; check spec.subnetSelectorTerms (ids, tags) \
                 against the VPC's subnets"
                    .to_owned(),
            )),
            Ok(found) => {
                status.subnets = found
                    .iter()
                    .map(|s| Subnet {
                        id: s.id.clone(),
                        zone: s.zone.clone(),
                        zone_id: s.zone_id.clone(),
                    })
                    .collect();
                outcomes.push(Outcome::ok(types::SUBNETS_READY));
            }
            Err(e) => outcomes.push(Outcome::unknown(types::SUBNETS_READY, e.to_string())),
        }

        match self.security_groups.list(&security_group_terms(nc)).await {
            Ok(found) if found.is_empty() => outcomes.push(Outcome::failed(
                types::SECURITY_GROUPS_READY,
                "SecurityGroupsNotFound",
                "SecurityGroupSelector did not match any SecurityGroups; check \
                 spec.securityGroupSelectorTerms (ids, names, tags)"
                    .to_owned(),
            )),
            Ok(found) => {
                status.security_groups = found
                    .iter()
                    .map(|g| SecurityGroup {
                        id: g.id.clone(),
                        name: g.name.clone(),
                    })
                    .collect();
                outcomes.push(Outcome::ok(types::SECURITY_GROUPS_READY));
            }
            Err(e) => outcomes.push(Outcome::unknown(
                types::SECURITY_GROUPS_READY,
                e.to_string(),
            )),
        }

        let reservations = self.resolve_capacity_reservations(nc, &mut status).await;
        outcomes.push(self.resolve_amis(nc, &mut status).await);
        outcomes.push(self.resolve_instance_profile(nc, &mut status).await);
        outcomes.push(self.resolve_placement_group(nc).await);
        outcomes.push(validate(nc));

        let previous = nc
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or(&[]);
        let generation = nc.metadata.generation;
        let mut conditions: Vec<Condition> = outcomes
            .iter()
            .map(|o| condition(o, previous, generation))
            .collect();
        conditions.push(condition(&ready(&outcomes), previous, generation));
        // Reported, but not part of Ready (upstream never holds a class back for its
        // reservations): a class whose reservations ended still launches on-demand or spot.
        if let Some(reservations) = reservations {
            conditions.push(condition(&reservations, previous, generation));
        }
        status.conditions = conditions;
        status
    }

    /// `status.capacityReservations` from the selector terms; `None` with the gate off.
    async fn resolve_capacity_reservations(
        &self,
        nc: &EC2NodeClass,
        status: &mut EC2NodeClassStatus,
    ) -> Option<Outcome> {
        let provider = self.capacity_reservations.as_ref()?;
        let terms = &nc.spec.capacity_reservation_selector_terms;
        let now = k8s_openapi::jiff::Timestamp::now();
        Some(match provider.list(terms, now).await {
            Ok(found) if found.is_empty() && !terms.is_empty() => Outcome::failed(
                types::CAPACITY_RESERVATIONS_READY,
                "CapacityReservationsNotFound",
                "CapacityReservationSelector did not match any active capacity reservations; \
                 check spec.capacityReservationSelectorTerms (ids, tags, ownerID, \
                 instanceMatchCriteria) against the account's reservations"
                    .to_owned(),
            ),
            Ok(found) => {
                status.capacity_reservations = found.into_iter().map(|r| r.reservation).collect();
                Outcome::ok(types::CAPACITY_RESERVATIONS_READY)
            }
            Err(e) => Outcome::unknown(types::CAPACITY_RESERVATIONS_READY, e.to_string()),
        })
    }

    /// `PlacementGroupReady`: true without a selector or when it names an available group
    /// (the CRD has no status field for the group: launches resolve it through the same
    /// cache), false when it names none.
    async fn resolve_placement_group(&self, nc: &EC2NodeClass) -> Outcome {
        let selector = nc.spec.placement_group_selector.as_ref();
        match self.placement_groups.get(selector).await {
            Ok(None) if let Some(selector) = selector => Outcome::failed(
                types::PLACEMENT_GROUP_READY,
                "PlacementGroupNotFound",
                format!(
                    "Placement group {:?} not found: spec.placementGroupSelector names no \
                     available placement group in this region (check its name or id and \
                     that its state is available)",
                    selector_text(selector)
                ),
            ),
            Ok(_) => Outcome::ok(types::PLACEMENT_GROUP_READY),
            Err(e) => Outcome::unknown(types::PLACEMENT_GROUP_READY, e.to_string()),
        }
    }

    async fn resolve_amis(&self, nc: &EC2NodeClass, status: &mut EC2NodeClassStatus) -> Outcome {
        match self.amis.list(&ami_terms(nc), &self.kubernetes_version.get()).await {
            Ok(found) if found.is_empty() => Outcome::failed(
                types::AMIS_READY,
                "AMINotFound",
                "AMISelector did not match any AMIs; check spec.amiSelectorTerms (ids, names, owners, tags, \
                 ssmParameter) and that the images are available in this region"
                    .to_owned(),
            ),
            Ok(found) => {
                status.amis = found.iter().map(status_ami).collect();
                Outcome::ok(types::AMIS_READY)
            }
            Err(AmiError::Alias(e)) => Outcome::failed(types::AMIS_READY, "UnsupportedAlias", e.to_string()),
            Err(e @ AmiError::AliasNotResolved { .. }) => {
                Outcome::failed(types::AMIS_READY, "AMINotFound", e.to_string())
            }
            Err(e) => Outcome::unknown(types::AMIS_READY, e.to_string()),
        }
    }

    async fn resolve_instance_profile(
        &self,
        nc: &EC2NodeClass,
        status: &mut EC2NodeClassStatus,
    ) -> Outcome {
        let result = match (nc.instance_profile(), nc.role()) {
            (Some(profile), _) => self
                .instance_profiles
                .check_exists(profile)
                .await
                .map(|()| profile.to_owned()),
            (None, Some(_)) if let Some(problem) = nc.role_name_problem() => {
                return Outcome::failed(types::INSTANCE_PROFILE_READY, "RoleNameTooLong", problem);
            }
            (None, Some(role)) => self.instance_profiles.ensure(nc.name(), role).await,
            (None, None) => {
                return Outcome::failed(
                    types::INSTANCE_PROFILE_READY,
                    "InstanceProfileNotSpecified",
                    "set spec.role (kerf manages an instance profile for it) or spec.instanceProfile".to_owned(),
                );
            }
        };
        match result {
            Ok(name) => {
                status.instance_profile = Some(name);
                Outcome::ok(types::INSTANCE_PROFILE_READY)
            }
            Err(e @ crate::instanceprofile::InstanceProfileError::Api(_)) => {
                Outcome::unknown(types::INSTANCE_PROFILE_READY, e.to_string())
            }
            Err(e) => Outcome::failed(
                types::INSTANCE_PROFILE_READY,
                "InstanceProfileNotFound",
                e.to_string(),
            ),
        }
    }
}

/// Checks the spec can be launched as written.
fn validate(nc: &EC2NodeClass) -> Outcome {
    let restricted: Vec<&String> = nc
        .spec
        .tags
        .keys()
        .filter(|k| tags::is_restricted(k))
        .collect();
    if !restricted.is_empty() {
        return Outcome::failed(
            types::VALIDATION_SUCCEEDED,
            "TagValidationFailed",
            format!(
                "spec.tags may not set keys kerf manages: {}",
                restricted
                    .iter()
                    .map(|k| format!("{k:?}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        );
    }
    Outcome::ok(types::VALIDATION_SUCCEEDED)
}

fn ready(outcomes: &[Outcome]) -> Outcome {
    let unhealthy: Vec<String> = outcomes
        .iter()
        .filter(|o| o.status != ConditionStatus::True)
        .map(|o| format!("{}={:?}: {}", o.type_, o.status, o.message))
        .collect();
    if unhealthy.is_empty() {
        Outcome::ok(types::READY)
    } else {
        Outcome::failed(types::READY, "UnhealthyDependents", unhealthy.join("; "))
    }
}

fn condition(o: &Outcome, previous: &[Condition], generation: Option<i64>) -> Condition {
    let last_transition_time = previous
        .iter()
        .find(|c| c.type_ == o.type_ && c.status == o.status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| Time(k8s_openapi::jiff::Timestamp::now()));
    Condition {
        type_: o.type_.to_owned(),
        status: o.status,
        observed_generation: generation,
        last_transition_time,
        reason: o.reason.clone(),
        message: o.message.clone(),
    }
}
