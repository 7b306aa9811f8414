//! Which of a workload's pods already exist. A controller creates only the replicas it is
//! missing: the pods it controls (and, for a StatefulSet, the ordinals that exist) count
//! against its replica count. This keeps `kubectl get deploy,sts,rs,jobs,pods -o yaml | kerf
//! plan -f -` from planning every running replica a second time. Deployment pods are
//! controlled by a ReplicaSet named `<deployment>-<hash>`, and a ReplicaSet controlled by a
//! Deployment in the input is left to that Deployment.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use super::checks;
use super::workloads::{DEFAULT_NAMESPACE, Expansion};

/// The controller of an expansion, as adoption needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Workload {
    Deployment {
        namespace: String,
        name: String,
        selector: LabelSelector,
    },
    /// `deployment`: the Deployment controlling this ReplicaSet, if any.
    ReplicaSet {
        namespace: String,
        name: String,
        deployment: Option<String>,
    },
    StatefulSet {
        namespace: String,
        name: String,
    },
    Job {
        namespace: String,
        name: String,
    },
}

impl Workload {
    fn namespace(&self) -> &str {
        match self {
            Self::Deployment { namespace, .. }
            | Self::ReplicaSet { namespace, .. }
            | Self::StatefulSet { namespace, .. }
            | Self::Job { namespace, .. } => namespace,
        }
    }
}

/// The pods (and claims) of `expansion` its controller still has to create, given the pods
/// already in the input. `deployments` names (namespace, name) of every Deployment in the
/// input.
pub(crate) fn missing(
    workload: &Workload,
    mut expansion: Expansion,
    given: &[Pod],
    deployments: &HashSet<(String, String)>,
) -> Expansion {
    if let Workload::ReplicaSet {
        namespace,
        deployment: Some(deployment),
        ..
    } = workload
        && deployments.contains(&(namespace.clone(), deployment.clone()))
    {
        return Expansion::default();
    }
    let in_namespace = given
        .iter()
        .filter(|pod| namespace_of(pod) == workload.namespace());
    match workload {
        Workload::StatefulSet { .. } => {
            let existing: HashSet<&str> = in_namespace
                .filter_map(|pod| pod.metadata.name.as_deref())
                .collect();
            expansion.pods.retain(|pod| {
                !pod.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| existing.contains(name))
            });
        }
        _ => {
            let running = in_namespace
                .filter(|pod| is_active(pod) && controls(workload, pod))
                .count();
            let wanted = expansion.pods.len().saturating_sub(running);
            expansion.pods.truncate(wanted);
        }
    }
    expansion
}

/// The Deployment controlling a ReplicaSet, from its owner references.
pub(crate) fn owning_deployment(owners: Option<&Vec<OwnerReference>>) -> Option<String> {
    controller(owners)
        .filter(|owner| owner.kind == "Deployment")
        .map(|owner| owner.name.clone())
}

fn controls(workload: &Workload, pod: &Pod) -> bool {
    let Some(owner) = controller(pod.metadata.owner_references.as_ref()) else {
        return false;
    };
    match workload {
        Workload::Deployment { name, selector, .. } => {
            let labels = pod.metadata.labels.clone().unwrap_or_default();
            owner.kind == "ReplicaSet"
                && owner
                    .name
                    .strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
                && checks::selector_matches(selector, &labels, "spec.selector").unwrap_or(false)
        }
        Workload::ReplicaSet { name, .. } => owner.kind == "ReplicaSet" && owner.name == *name,
        Workload::Job { name, .. } => owner.kind == "Job" && owner.name == *name,
        Workload::StatefulSet { name, .. } => owner.kind == "StatefulSet" && owner.name == *name,
    }
}

/// The owner reference marked as controller, else the only one.
fn controller(owners: Option<&Vec<OwnerReference>>) -> Option<&OwnerReference> {
    let owners = owners?;
    owners
        .iter()
        .find(|owner| owner.controller == Some(true))
        .or(match owners.as_slice() {
            [only] => Some(only),
            _ => None,
        })
}

fn namespace_of(pod: &Pod) -> &str {
    pod.metadata
        .namespace
        .as_deref()
        .unwrap_or(DEFAULT_NAMESPACE)
}

fn is_active(pod: &Pod) -> bool {
    let phase = pod
        .status
        .as_ref()
        .and_then(|status| status.phase.as_deref());
    !matches!(phase, Some("Succeeded" | "Failed")) && pod.metadata.deletion_timestamp.is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    fn pod(name: &str, owner: Option<(&str, &str)>, labels: &[(&str, &str)]) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                owner_references: owner.map(|(kind, name)| {
                    vec![OwnerReference {
                        kind: kind.into(),
                        name: name.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn expansion(names: &[&str]) -> Expansion {
        Expansion {
            pods: names.iter().map(|n| pod(n, None, &[])).collect(),
            claims: Vec::new(),
        }
    }

    fn names(expansion: &Expansion) -> Vec<&str> {
        expansion
            .pods
            .iter()
            .filter_map(|p| p.metadata.name.as_deref())
            .collect()
    }

    fn web() -> Workload {
        Workload::Deployment {
            namespace: "default".into(),
            name: "web".into(),
            selector: LabelSelector {
                match_labels: Some(BTreeMap::from([("app".to_string(), "web".to_string())])),
                ..Default::default()
            },
        }
    }

    #[test]
    fn running_deployment_pods_reduce_what_is_created() {
        let given = [
            pod(
                "web-5d8f-abcde",
                Some(("ReplicaSet", "web-5d8f")),
                &[("app", "web")],
            ),
            pod(
                "web-5d8f-fghij",
                Some(("ReplicaSet", "web-5d8f")),
                &[("app", "web")],
            ),
            pod(
                "webhook-77-x",
                Some(("ReplicaSet", "webhook-77")),
                &[("app", "web")],
            ),
            pod(
                "web-other",
                Some(("ReplicaSet", "web-9")),
                &[("app", "other")],
            ),
        ];
        let left = missing(
            &web(),
            expansion(&["web-0", "web-1", "web-2"]),
            &given,
            &HashSet::new(),
        );
        assert_eq!(names(&left), ["web-0"], "two of three replicas run already");
    }

    #[test]
    fn finished_pods_do_not_count() {
        let mut done = pod(
            "web-5d8f-abcde",
            Some(("ReplicaSet", "web-5d8f")),
            &[("app", "web")],
        );
        done.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let left = missing(&web(), expansion(&["web-0"]), &[done], &HashSet::new());
        assert_eq!(names(&left), ["web-0"]);
    }

    #[test]
    fn unowned_pods_are_not_adopted() {
        let given = [pod("web-x", None, &[("app", "web")])];
        let left = missing(&web(), expansion(&["web-0"]), &given, &HashSet::new());
        assert_eq!(names(&left), ["web-0"]);
    }

    #[test]
    fn stateful_set_ordinals_that_exist_are_not_recreated() {
        let workload = Workload::StatefulSet {
            namespace: "default".into(),
            name: "db".into(),
        };
        let given = [pod("db-1", Some(("StatefulSet", "db")), &[])];
        let left = missing(
            &workload,
            expansion(&["db-0", "db-1", "db-2"]),
            &given,
            &HashSet::new(),
        );
        assert_eq!(names(&left), ["db-0", "db-2"]);
    }

    #[test]
    fn jobs_and_replica_sets_count_their_own_pods() {
        let job = Workload::Job {
            namespace: "default".into(),
            name: "train".into(),
        };
        let given = [
            pod("train-abc", Some(("Job", "train")), &[]),
            pod("other", Some(("Job", "x")), &[]),
        ];
        assert_eq!(
            names(&missing(
                &job,
                expansion(&["train-0", "train-1"]),
                &given,
                &HashSet::new()
            )),
            ["train-0"]
        );
        let rs = Workload::ReplicaSet {
            namespace: "default".into(),
            name: "api".into(),
            deployment: None,
        };
        let given = [pod("api-x", Some(("ReplicaSet", "api")), &[])];
        assert!(
            missing(&rs, expansion(&["api-0"]), &given, &HashSet::new())
                .pods
                .is_empty()
        );
    }

    #[test]
    fn a_replica_set_of_an_input_deployment_is_left_to_it() {
        let rs = Workload::ReplicaSet {
            namespace: "default".into(),
            name: "web-5d8f".into(),
            deployment: Some("web".into()),
        };
        let deployments = HashSet::from([("default".to_string(), "web".to_string())]);
        assert!(
            missing(&rs, expansion(&["web-5d8f-0"]), &[], &deployments)
                .pods
                .is_empty()
        );
        assert_eq!(
            missing(&rs, expansion(&["web-5d8f-0"]), &[], &HashSet::new())
                .pods
                .len(),
            1
        );
    }
}
