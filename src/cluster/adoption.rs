//! Which of a workload's pods already exist. A controller creates only the replicas it is
//! missing: the pods it controls (and, for a StatefulSet, the ordinals that exist) count
//! against its replica count. This keeps `kubectl get deploy,sts,rs,jobs,pods -o yaml | kerf
//! plan -f -` from planning every running replica a second time. Deployment pods are
//! controlled by a ReplicaSet named `<deployment>-<hash>`, and a ReplicaSet controlled by a
//! Deployment in the input is left to that Deployment.

use std::collections::{BTreeMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, OwnerReference};

use super::workloads::{DEFAULT_NAMESPACE, Expansion};
use crate::pods::{LeanPod, PodLike, is_active, selects};

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

/// The pods given in the input, indexed once so that each workload looks up its own pods
/// instead of scanning every pod (a dump has thousands of workloads and pods).
pub(crate) struct Given<'a> {
    /// (namespace, name) of every given pod.
    names: HashSet<(&'a str, &'a str)>,
    /// Active pods by (namespace, controller kind, controller name).
    controlled: BTreeMap<(&'a str, &'a str, &'a str), Vec<&'a LeanPod>>,
}

impl<'a> Given<'a> {
    pub(crate) fn new(pods: impl IntoIterator<Item = &'a LeanPod>) -> Self {
        let mut names = HashSet::new();
        let mut controlled: BTreeMap<_, Vec<&LeanPod>> = BTreeMap::new();
        for pod in pods {
            let namespace = namespace_of(pod);
            if let Some(name) = pod.meta().name {
                names.insert((namespace, name));
            }
            if let Some(owner) = controller(pod.meta().owner_references)
                && is_active(pod)
            {
                let key = (namespace, owner.kind.as_str(), owner.name.as_str());
                controlled.entry(key).or_default().push(pod);
            }
        }
        Self { names, controlled }
    }

    fn controlled_by(&self, namespace: &'a str, kind: &'a str, name: &'a str) -> &[&'a LeanPod] {
        self.controlled
            .get(&(namespace, kind, name))
            .map_or(&[], Vec::as_slice)
    }

    /// Active pods controlled by a ReplicaSet named `<deployment>-…`: a range of the index.
    fn of_deployment_replica_sets(&self, namespace: &str, deployment: &str) -> Vec<&'a LeanPod> {
        let prefix = format!("{deployment}-");
        let index: &BTreeMap<(&str, &str, &str), Vec<&'a LeanPod>> = &self.controlled;
        index
            .range((namespace, "ReplicaSet", prefix.as_str())..)
            .take_while(|((ns, kind, owner), _)| {
                *ns == namespace && *kind == "ReplicaSet" && owner.starts_with(&prefix)
            })
            .flat_map(|(_, pods)| pods.iter().copied())
            .collect()
    }
}

/// The pods (and claims) of `expansion` its controller still has to create, given the pods
/// already in the input. `deployments` names (namespace, name) of every Deployment in the
/// input.
pub(crate) fn missing(
    workload: &Workload,
    mut expansion: Expansion,
    given: &Given,
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
    let namespace = workload.namespace();
    let running = match workload {
        Workload::StatefulSet { .. } => {
            expansion.pods.retain(|pod| {
                !pod.metadata
                    .name
                    .as_deref()
                    .is_some_and(|name| given.names.contains(&(namespace, name)))
            });
            return expansion;
        }
        Workload::Deployment { name, selector, .. } => given
            .of_deployment_replica_sets(namespace, name)
            .into_iter()
            .filter(|pod| selects(selector, pod))
            .count(),
        Workload::ReplicaSet { name, .. } => {
            given.controlled_by(namespace, "ReplicaSet", name).len()
        }
        Workload::Job { name, .. } => given.controlled_by(namespace, "Job", name).len(),
    };
    let wanted = expansion.pods.len().saturating_sub(running);
    expansion.pods.truncate(wanted);
    expansion
}

/// The Deployment controlling a ReplicaSet, from its owner references.
pub(crate) fn owning_deployment(owners: &[OwnerReference]) -> Option<String> {
    controller(owners)
        .filter(|owner| owner.kind == "Deployment")
        .map(|owner| owner.name.clone())
}

/// The owner reference marked as controller, else the only one.
fn controller(owners: &[OwnerReference]) -> Option<&OwnerReference> {
    owners
        .iter()
        .find(|owner| owner.controller == Some(true))
        .or(match owners {
            [only] => Some(only),
            _ => None,
        })
}

fn namespace_of(pod: &LeanPod) -> &str {
    pod.meta().namespace.unwrap_or(DEFAULT_NAMESPACE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, owner: Option<(&str, &str)>, labels: &[(&str, &str)]) -> LeanPod {
        LeanPod::from(Pod {
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
        })
    }

    fn expansion(names: &[&str]) -> Expansion {
        Expansion {
            pods: names.iter().map(|n| pod(n, None, &[]).to_pod()).collect(),
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
            &Given::new(&given),
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
        )
        .to_pod();
        done.status = Some(PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        let done = LeanPod::from(done);
        let left = missing(
            &web(),
            expansion(&["web-0"]),
            &Given::new(&[done]),
            &HashSet::new(),
        );
        assert_eq!(names(&left), ["web-0"]);
    }

    #[test]
    fn unowned_pods_are_not_adopted() {
        let given = [pod("web-x", None, &[("app", "web")])];
        let left = missing(
            &web(),
            expansion(&["web-0"]),
            &Given::new(&given),
            &HashSet::new(),
        );
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
            &Given::new(&given),
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
                &Given::new(&given),
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
            missing(
                &rs,
                expansion(&["api-0"]),
                &Given::new(&given),
                &HashSet::new()
            )
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
            missing(
                &rs,
                expansion(&["web-5d8f-0"]),
                &Given::new(&[]),
                &deployments
            )
            .pods
            .is_empty()
        );
        assert_eq!(
            missing(
                &rs,
                expansion(&["web-5d8f-0"]),
                &Given::new(&[]),
                &HashSet::new()
            )
            .pods
            .len(),
            1
        );
    }
}
