//! EC2NodeClass resolution and instance tagging for the simulated provider, so the controller
//! running on the simulated cluster keeps node class statuses as it does on AWS. Subnets and
//! security groups are selected from the simulated VPC ([`super::network`]) as EC2's filters
//! select them, so a selector that matches nothing leaves the class not Ready with
//! upstream's messages, as on AWS. The region has one AMI, the provider's current image,
//! which an alias selects, and an id, name or owner term naming it; tag terms (the user's
//! own images) and SSM parameters outside EKS's public paths select nothing, so the class
//! is not Ready with upstream's `AMINotFound`, as in an account without such an image.
//! Instance profiles are not simulated: `spec.instanceProfile` is taken as given and
//! `spec.role` gets the name the AWS provider would manage. Capacity reservations are
//! selected from the region's by id or tags (a tag value `*` matches any), as
//! DescribeCapacityReservations filters them, and remembered for the class's launches.

use super::network::Network;
use super::provider::{SimulatedCloudProvider, tags};
use super::{Ec2Error, Filter};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf::api::condition::types;
use kerf::api::ec2nodeclass::{Ami, AmiSelectorTerm, CapacityReservation, InstanceMatchCriteria};
use kerf::api::nodeclass_hash::{fnv1a64, hash_annotations};
use kerf::api::{Condition, ConditionStatus, EC2NodeClass, EC2NodeClassStatus, NodeClaim};
use kerf::cloudprovider::{
    BoxFuture, CloudProviderError, CloudResult, InstanceTagger, NodeClassReconciler,
    NodeClassResolution, launched_provider_id, parse_aws_provider_id,
};
use std::collections::BTreeMap;

impl SimulatedCloudProvider {
    fn instance_profile(&self, node_class: &EC2NodeClass) -> Option<String> {
        match (node_class.instance_profile(), node_class.role()) {
            (Some(profile), _) => Some(profile.to_owned()),
            (None, Some(_)) => Some(format!(
                "{}_{}",
                self.cluster_name(),
                fnv1a64(format!("{}{}", self.ec2().config().region, node_class.name()).as_bytes())
            )),
            (None, None) => None,
        }
    }

    /// The region's image, if one of the class's terms selects it.
    fn amis(&self, node_class: &EC2NodeClass) -> Vec<Ami> {
        let image = Ami {
            id: self.image_id(),
            name: Some(format!("simulated-{}", node_class.ami_family().as_str())),
            deprecated: None,
            requirements: Vec::new(),
        };
        let selected = node_class
            .spec
            .ami_selector_terms
            .iter()
            .any(|term| selects(term, &image));
        if selected { vec![image] } else { Vec::new() }
    }

    /// The region's reservations the class's terms select, sorted by id, remembered for
    /// its NodeClaims' launches.
    fn capacity_reservations(&self, node_class: &EC2NodeClass) -> Vec<CapacityReservation> {
        let terms = &node_class.spec.capacity_reservation_selector_terms;
        let now = super::provider::system_time(std::time::SystemTime::now());
        let selected: Vec<CapacityReservation> = self
            .ec2()
            .describe_capacity_reservations()
            .into_iter()
            .map(|v| v.reservation)
            .filter(|r| {
                terms.iter().any(|t| match &t.id {
                    Some(id) => *id == r.id,
                    None => {
                        !t.tags.is_empty()
                            && t.tags.iter().all(|(k, v)| {
                                r.tags.get(k).is_some_and(|have| v == "*" || have == v)
                            })
                    }
                })
            })
            .map(|r| {
                let reservation_type = super::provider::reservation_type(&r);
                let end_time = r.end_time.map(|t| Time(super::provider::system_time(t)));
                CapacityReservation {
                    state: kerf::catalog::reservation_state(
                        reservation_type,
                        end_time.as_ref().map(|t| t.0.as_second()),
                        now.as_second(),
                    ),
                    availability_zone: r.zone,
                    end_time,
                    id: r.id,
                    instance_match_criteria: InstanceMatchCriteria::Targeted,
                    instance_type: r.instance_type,
                    interruptible: Some(r.interruptible),
                    owner_id: "123456789012".to_owned(),
                    reservation_type,
                }
            })
            .collect();
        self.selected_reservations
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(
                node_class.name().to_owned(),
                selected.iter().map(|r| r.id.clone()).collect(),
            );
        selected
    }

    fn resolve_status(&self, node_class: &EC2NodeClass) -> EC2NodeClassStatus {
        let network = Network::new(self.cluster_name(), self.zones());
        let subnets = network.subnets(&node_class.spec.subnet_selector_terms);
        let security_groups =
            network.security_groups(&node_class.spec.security_group_selector_terms);
        let instance_profile = self.instance_profile(node_class);
        let amis = self.amis(node_class);
        let reservations = self.capacity_reservations(node_class);
        let generation = node_class.metadata.generation;
        let condition = |type_: &str, problem: Option<(&str, &str)>| {
            let (status, reason, message) = match problem {
                None => (ConditionStatus::True, type_, ""),
                Some((reason, message)) => (ConditionStatus::False, reason, message),
            };
            Condition {
                type_: type_.to_owned(),
                status,
                observed_generation: generation,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
                reason: reason.to_owned(),
                message: message.to_owned(),
            }
        };
        let mut conditions = vec![
            condition(
                types::SUBNETS_READY,
                subnets.is_empty().then_some((
                    "SubnetsNotFound",
                    "SubnetSelector did not match any Subnets",
                )),
            ),
            condition(
                types::SECURITY_GROUPS_READY,
                security_groups.is_empty().then_some((
                    "SecurityGroupsNotFound",
                    "SecurityGroupSelector did not match any SecurityGroups",
                )),
            ),
            condition(
                types::AMIS_READY,
                amis.is_empty()
                    .then_some(("AMINotFound", "AMISelector did not match any AMIs")),
            ),
            condition(
                types::INSTANCE_PROFILE_READY,
                instance_profile.is_none().then_some((
                    "InstanceProfileNotSpecified",
                    "set spec.role or spec.instanceProfile",
                )),
            ),
            condition(types::VALIDATION_SUCCEEDED, None),
        ];
        let reservations_condition = (self.reserved_capacity()
            && !node_class
                .spec
                .capacity_reservation_selector_terms
                .is_empty())
        .then(|| {
            condition(
                types::CAPACITY_RESERVATIONS_READY,
                reservations.is_empty().then_some((
                    "CapacityReservationsNotFound",
                    "CapacityReservationSelector did not match any active capacity reservations",
                )),
            )
        });
        let unhealthy: Vec<String> = conditions
            .iter()
            .filter(|c| !c.is_true())
            .map(|c| format!("{}=False: {}", c.type_, c.message))
            .collect();
        let message = unhealthy.join("; ");
        conditions.push(condition(
            types::READY,
            (!unhealthy.is_empty()).then_some(("UnhealthyDependents", message.as_str())),
        ));
        conditions.extend(reservations_condition);
        EC2NodeClassStatus {
            subnets,
            security_groups,
            capacity_reservations: reservations,
            amis,
            instance_profile,
            conditions,
        }
    }

    async fn tag_instance(&self, node_claim: &NodeClaim) -> CloudResult<()> {
        let provider_id = launched_provider_id(node_claim)?;
        let instance_id = parse_aws_provider_id(provider_id)?.instance_id.to_owned();
        let not_found = |e: Ec2Error| CloudProviderError::NodeClaimNotFound {
            provider_id: provider_id.to_owned(),
            reason: e.to_string(),
        };
        let found = self
            .ec2()
            .describe_instances(&super::DescribeInstancesRequest {
                instance_ids: vec![instance_id.clone()],
                filters: vec![Filter::InstanceStateName(vec![
                    super::InstanceState::Pending,
                    super::InstanceState::Running,
                ])],
            })
            .await
            .map_err(not_found)?;
        let Some(instance) = found.first() else {
            return Err(CloudProviderError::NodeClaimNotFound {
                provider_id: provider_id.to_owned(),
                reason: "instance is terminated".to_owned(),
            });
        };
        let node_name = node_claim
            .status
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let missing: BTreeMap<String, String> = [
            (tags::NAME, node_name),
            (tags::NODECLAIM, node_claim.name().to_owned()),
            (tags::EKS_CLUSTER_NAME, self.cluster_name().to_owned()),
        ]
        .into_iter()
        .filter(|(k, _)| !instance.tags.contains_key(*k))
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.ec2()
            .create_tags(&[instance_id], &missing)
            .await
            .map_err(not_found)
    }
}

impl NodeClassReconciler for SimulatedCloudProvider {
    fn resolve<'a>(
        &'a self,
        node_class: &'a EC2NodeClass,
    ) -> BoxFuture<'a, CloudResult<NodeClassResolution>> {
        Box::pin(async move {
            Ok(NodeClassResolution {
                status: self.resolve_status(node_class),
                annotations: hash_annotations(node_class, None),
            })
        })
    }

    fn forget<'a>(&'a self, _node_class: &'a str) -> BoxFuture<'a, CloudResult<()>> {
        // Nothing is created per node class in the simulated region.
        Box::pin(async { Ok(()) })
    }
}

impl InstanceTagger for SimulatedCloudProvider {
    fn tag_registered<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(self.tag_instance(node_claim))
    }
}

/// Whether `term` selects the region's `image`: an alias always (its family's current image),
/// an SSM parameter on EKS's public paths; otherwise every field the term sets must match
/// (id exactly, name with AWS wildcards, owner `amazon` or `self`), and tags never do — the
/// simulated image carries none. A term that sets nothing selects nothing.
fn selects(term: &AmiSelectorTerm, image: &Ami) -> bool {
    if term.alias.is_some() {
        return true;
    }
    if let Some(parameter) = &term.ssm_parameter {
        return parameter.starts_with("/aws/service/");
    }
    let set = term.id.is_some() || term.name.is_some() || term.owner.is_some();
    let name = image.name.as_deref().unwrap_or_default();
    set && term.tags.is_empty()
        && term.id.as_deref().is_none_or(|id| id == image.id)
        && term
            .name
            .as_deref()
            .is_none_or(|pattern| kerf::wildcard::matches(pattern, name))
        && term
            .owner
            .as_deref()
            .is_none_or(|owner| matches!(owner, "amazon" | "self"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ec2::network::{DISCOVERY_TAG, security_group_id, subnet_id};
    use crate::ec2::{Ec2Config, SimulatedCloudProviderConfig};
    use kerf::api::Conditions;
    use kerf::api::ec2nodeclass::SecurityGroup;

    fn provider() -> SimulatedCloudProvider {
        SimulatedCloudProvider::for_region(
            "us-east-1",
            Ec2Config::instant("us-east-1"),
            SimulatedCloudProviderConfig::default(),
        )
        .expect("us-east-1 is in the catalog")
    }

    fn node_class(spec: serde_json::Value) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default", "generation": 3},
            "spec": spec,
        }))
        .expect("test node class parses")
    }

    fn resolve(p: &SimulatedCloudProvider, nc: &EC2NodeClass) -> NodeClassResolution {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(p.resolve(nc))
            .expect("simulated resolution does not fail")
    }

    /// The selectors of the Karpenter guides, with the simulated cluster's name.
    fn discovered_by(cluster: &str) -> serde_json::Value {
        serde_json::json!({"role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}],
            "securityGroupSelectorTerms": [{"tags": {DISCOVERY_TAG: cluster}}]})
    }

    fn ready(got: &NodeClassResolution) -> &Condition {
        got.status
            .conditions
            .condition(types::READY)
            .expect("Ready")
    }

    #[test]
    fn the_usual_discovery_tags_get_a_subnet_per_zone_and_the_node_group() {
        let p = provider();
        let got = resolve(&p, &node_class(discovered_by(p.cluster_name())));
        let zones: Vec<&str> = got.status.subnets.iter().map(|s| s.zone.as_str()).collect();
        assert!(zones.len() >= 3, "{zones:?}");
        assert!(zones.contains(&"us-east-1a"));
        assert_eq!(
            got.status.security_groups,
            [SecurityGroup {
                id: security_group_id(p.cluster_name()),
                name: Some(format!("{}-nodes", p.cluster_name())),
            }]
        );
        assert_eq!(got.status.amis[0].id, p.image_id());
        assert!(got.status.instance_profile.is_some());
        assert!(got.status.conditions.is_condition_true(types::READY));
        assert!(
            got.status
                .conditions
                .iter()
                .all(|c| c.observed_generation == Some(3))
        );
        assert_eq!(
            got.annotations[kerf::labels::EC2NODECLASS_HASH_VERSION],
            kerf::api::nodeclass_hash::HASH_VERSION
        );
    }

    #[test]
    fn another_clusters_discovery_tag_leaves_the_class_not_ready() {
        let p = provider();
        let got = resolve(&p, &node_class(discovered_by("some-other-cluster")));
        assert!(got.status.subnets.is_empty());
        assert!(got.status.security_groups.is_empty());
        for (type_, reason, message) in [
            (
                types::SUBNETS_READY,
                "SubnetsNotFound",
                "SubnetSelector did not match any Subnets",
            ),
            (
                types::SECURITY_GROUPS_READY,
                "SecurityGroupsNotFound",
                "SecurityGroupSelector did not match any SecurityGroups",
            ),
        ] {
            let c = got.status.conditions.condition(type_).expect("condition");
            assert_eq!(
                (c.status, c.reason.as_str(), c.message.as_str()),
                (ConditionStatus::False, reason, message)
            );
        }
        let ready = ready(&got);
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, "UnhealthyDependents");
        assert!(
            ready.message.contains("SubnetsReady=False"),
            "{}",
            ready.message
        );
        assert!(
            ready.message.contains("SecurityGroupsReady=False"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn ids_and_names_select_among_the_simulated_subnets_and_groups() {
        let p = provider();
        let nc = node_class(serde_json::json!({"role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": subnet_id("us-east-1b")}],
            "securityGroupSelectorTerms": [{"name": "eks-cluster-sg-*"}]}));
        let got = resolve(&p, &nc);
        assert_eq!(got.status.subnets.len(), 1);
        assert_eq!(got.status.subnets[0].zone, "us-east-1b");
        assert_eq!(
            got.status.security_groups[0].name,
            Some(format!("eks-cluster-sg-{}", p.cluster_name()))
        );
        assert!(got.status.conditions.is_condition_true(types::READY));

        let nc = node_class(serde_json::json!({"role": "r",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-0123456789abcdef0"}],
            "securityGroupSelectorTerms": [{"name": "nodes"}]}));
        let got = resolve(&p, &nc);
        assert!(got.status.subnets.is_empty());
        assert!(got.status.security_groups.is_empty());
        assert_eq!(ready(&got).status, ConditionStatus::False);
    }

    #[test]
    fn ami_terms_select_the_regions_image_by_alias_id_name_or_owner_and_tags_select_nothing() {
        let p = provider();
        let with_terms = |terms: serde_json::Value| {
            let mut spec = discovered_by(p.cluster_name());
            spec["amiSelectorTerms"] = terms;
            resolve(&p, &node_class(spec))
        };
        for terms in [
            serde_json::json!([{"id": p.image_id()}]),
            serde_json::json!([{"name": "simulated-*", "owner": "amazon"}]),
            serde_json::json!([{"tags": {"team": "a"}}, {"alias": "bottlerocket@latest"}]),
        ] {
            let got = with_terms(terms.clone());
            assert_eq!(got.status.amis.len(), 1, "{terms}");
            assert!(
                got.status.conditions.is_condition_true(types::READY),
                "{terms}"
            );
        }
        for terms in [
            serde_json::json!([{"tags": {"karpenter.sh/discovery": p.cluster_name()}}]),
            serde_json::json!([{"id": "ami-0123456789abcdef0"}]),
            serde_json::json!([{"name": "simulated-*", "owner": "123456789012"}]),
            serde_json::json!([{}]),
        ] {
            let got = with_terms(terms.clone());
            assert!(got.status.amis.is_empty(), "{terms}");
            let c = got
                .status
                .conditions
                .condition(types::AMIS_READY)
                .expect("AMIsReady");
            assert_eq!(
                (c.status, c.reason.as_str(), c.message.as_str()),
                (
                    ConditionStatus::False,
                    "AMINotFound",
                    "AMISelector did not match any AMIs"
                ),
                "{terms}"
            );
            assert!(ready(&got).message.contains("AMIsReady=False"), "{terms}");
        }
    }
}
