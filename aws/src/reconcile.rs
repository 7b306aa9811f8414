//! The AWS provider's side of the controller's node class and tagging loops: resolving an
//! EC2NodeClass into its status (subnets, security groups, AMIs, instance profile and their
//! conditions, through [`NodeClassResolver`](crate::nodeclass::NodeClassResolver)) plus the
//! hash annotations, with upstream's readiness rule that AL2023 node classes need the
//! cluster's service CIDR; deleting a deleted node class's launch templates and managed
//! instance profile; and tagging a registered NodeClaim's instance with its node name.

use crate::cloudprovider::{AwsCloudProvider, api_error, instance_error};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kerf::api::condition::types;
use kerf::api::nodeclass_hash::hash_annotations;
use kerf::api::{AmiFamily, ConditionStatus, EC2NodeClass, EC2NodeClassStatus, NodeClaim};
use kerf::cloudprovider::{
    BoxFuture, CloudResult, InstanceTagger, NodeClassReconciler, NodeClassResolution,
    launched_provider_id, parse_aws_provider_id,
};

/// `Ready=False` reason of an AL2023 node class when the service CIDR is unknown.
pub const CLUSTER_CIDR_NOT_DETECTED: &str = "ClusterCIDRNotDetected";

/// Why an AL2023 node class cannot be ready without the cluster's service CIDR.
pub const CLUSTER_CIDR_MESSAGE: &str = "Failed to detect the cluster CIDR, which AL2023 nodes need \
     (nodeadm's spec.cluster.cidr): kerf reads it from the `kubernetes` ServiceCIDR object \
     (networking.k8s.io/v1, Kubernetes 1.33+) or infers EKS's default from the ClusterIP of the \
     `kubernetes` Service (10.100.0.1 or 172.20.0.1); make one of them readable by the \
     controller, or use another AMI family";

/// Marks `status` not ready when `node_class` is AL2023 and no cluster CIDR is known.
pub fn require_cluster_cidr(
    node_class: &EC2NodeClass,
    cluster_cidr: Option<&str>,
    status: &mut EC2NodeClassStatus,
) {
    if node_class.ami_family() != AmiFamily::Al2023 || cluster_cidr.is_some_and(|c| !c.is_empty()) {
        return;
    }
    let Some(ready) = status
        .conditions
        .iter_mut()
        .find(|c| c.type_ == types::READY)
    else {
        return;
    };
    if ready.status == ConditionStatus::True {
        ready.status = ConditionStatus::False;
        ready.reason = CLUSTER_CIDR_NOT_DETECTED.to_owned();
        ready.message = CLUSTER_CIDR_MESSAGE.to_owned();
        ready.last_transition_time = Time(k8s_openapi::jiff::Timestamp::now());
    } else {
        ready.message = format!("{}; {CLUSTER_CIDR_MESSAGE}", ready.message);
    }
}

impl NodeClassReconciler for AwsCloudProvider {
    fn resolve<'a>(
        &'a self,
        node_class: &'a EC2NodeClass,
    ) -> BoxFuture<'a, CloudResult<NodeClassResolution>> {
        Box::pin(async move {
            let mut status = self.node_class_resolver().resolve(node_class).await;
            require_cluster_cidr(
                node_class,
                self.settings.cluster_cidr.as_deref(),
                &mut status,
            );
            Ok(NodeClassResolution {
                status,
                annotations: hash_annotations(node_class, self.settings.ca_bundle.as_deref()),
            })
        })
    }

    fn forget<'a>(&'a self, node_class: &'a str) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(async move {
            self.delete_node_class_resources(node_class)
                .await
                .map_err(api_error)
        })
    }
}

impl InstanceTagger for AwsCloudProvider {
    fn tag_registered<'a>(&'a self, node_claim: &'a NodeClaim) -> BoxFuture<'a, CloudResult<()>> {
        Box::pin(async move {
            let provider_id = launched_provider_id(node_claim)?;
            let id = parse_aws_provider_id(provider_id)?;
            let node_name = node_claim
                .status
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .unwrap_or_default();
            let wanted = self
                .instances
                .registration_tags(node_name, node_claim.name());
            self.instances
                .tag(id.instance_id, &wanted)
                .await
                .map_err(|e| instance_error(provider_id, e))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kerf::api::Condition;

    fn node_class(family: &str) -> EC2NodeClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "karpenter.k8s.aws/v1",
            "kind": "EC2NodeClass",
            "metadata": {"name": "default"},
            "spec": {"role": "r", "amiFamily": family,
                "amiSelectorTerms": [{"id": "ami-1"}],
                "subnetSelectorTerms": [{"id": "subnet-1"}],
                "securityGroupSelectorTerms": [{"id": "sg-1"}]},
        }))
        .expect("test node class parses")
    }

    fn status(ready: ConditionStatus) -> EC2NodeClassStatus {
        EC2NodeClassStatus {
            conditions: vec![Condition {
                type_: types::READY.to_owned(),
                status: ready,
                observed_generation: None,
                last_transition_time: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
                reason: "Ready".to_owned(),
                message: String::new(),
            }],
            ..EC2NodeClassStatus::default()
        }
    }

    #[test]
    fn al2023_without_a_cluster_cidr_is_not_ready() {
        let mut s = status(ConditionStatus::True);
        require_cluster_cidr(&node_class("AL2023"), None, &mut s);
        let ready = &s.conditions[0];
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, CLUSTER_CIDR_NOT_DETECTED);
        assert!(ready.message.contains("ServiceCIDR"), "{}", ready.message);

        let mut s = status(ConditionStatus::True);
        require_cluster_cidr(&node_class("AL2023"), Some("10.100.0.0/16"), &mut s);
        assert_eq!(s.conditions[0].status, ConditionStatus::True);

        let mut s = status(ConditionStatus::True);
        require_cluster_cidr(&node_class("Bottlerocket"), None, &mut s);
        assert_eq!(s.conditions[0].status, ConditionStatus::True);
    }

    #[test]
    fn an_unready_class_gets_the_cidr_problem_added_to_its_message() {
        let mut s = status(ConditionStatus::False);
        s.conditions[0].message = "SubnetsReady=False: no subnets".to_owned();
        require_cluster_cidr(&node_class("AL2023"), None, &mut s);
        let ready = &s.conditions[0];
        assert_eq!(ready.reason, "Ready");
        assert!(ready.message.starts_with("SubnetsReady=False"));
        assert!(ready.message.contains("cluster CIDR"));
    }
}
