//! The stack the drift, expiration and NodePool status tests share: the controller against
//! the emulator with the simulated EC2, kubelets and kube-scheduler, an EC2NodeClass
//! `default` and one NodePool; helpers to run pods and read NodeClaim conditions.

use std::sync::Arc;
use std::time::Duration;

use kerf_actors::{Daemon, Timings};
use kerf_loadtest::apiserver::{Cluster, PatchKind};
use kerf_loadtest::ec2::{Ec2Config, SimulatedCloudProvider};
use kerf_loadtest::kubelet::{self, KubeletHandle};
use kerf_loadtest::scheduler::{self, SchedulerConfig, SchedulerHandle};
use serde_json::{Value, json};

use crate::support::*;

pub const NODEPOOLS: (&str, &str) = ("karpenter.sh/v1", "nodepools");
pub const NODECLAIMS: (&str, &str) = ("karpenter.sh/v1", "nodeclaims");
pub const EC2NODECLASSES: (&str, &str) = ("karpenter.k8s.aws/v1", "ec2nodeclasses");

/// Budgets of zero: the disruption loop may not act on what these tests mark, so each
/// condition can be watched coming and going.
pub fn no_disruption() -> Value {
    json!({"spec": {"disruption": {"consolidateAfter": "Never", "budgets": [{"nodes": "0"}]}}})
}

pub fn ec2nodeclass(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
        "metadata": {"name": name},
        "spec": {"role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "kerf-sim"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "kerf-sim"}}]},
    })
}

pub struct Stack {
    pub harness: Harness,
    pub daemon: Daemon,
    pub provider: Arc<SimulatedCloudProvider>,
    _kubelets: KubeletHandle,
    _scheduler: SchedulerHandle,
}

impl Stack {
    /// The stack with the NodePool `default` built by [`nodepool_with`] and `overrides`.
    pub async fn start(pool_overrides: Value) -> Self {
        Self::start_as(pool_overrides, None).await
    }

    /// [`Stack::start`] with the controller's requests named `name` to the emulator, which
    /// logs its writes ([`named_client`]).
    pub async fn start_named(pool_overrides: Value, name: &str) -> Self {
        Self::start_as(pool_overrides, Some(name)).await
    }

    async fn start_as(pool_overrides: Value, name: Option<&str>) -> Self {
        Self::start_tuned(pool_overrides, name, None, Ec2Config::instant(REGION)).await
    }

    /// [`Stack::start`] with `extra` settings and the reconcilers' `timings`.
    pub async fn start_with(pool_overrides: Value, extra: &[&str], timings: Timings) -> Self {
        Self::start_tuned(
            pool_overrides,
            None,
            Some((extra, timings)),
            Ec2Config::instant(REGION),
        )
        .await
    }

    /// [`Stack::start`] with the simulated EC2 configured as `ec2`.
    pub async fn start_on(pool_overrides: Value, ec2: Ec2Config) -> Self {
        Self::start_tuned(pool_overrides, None, None, ec2).await
    }

    async fn start_tuned(
        pool_overrides: Value,
        name: Option<&str>,
        tuned: Option<(&[&str], Timings)>,
        ec2: Ec2Config,
    ) -> Self {
        let harness = start_cluster().await;
        let cluster = harness.cluster();
        cluster
            .create(EC2NODECLASSES.0, EC2NODECLASSES.1, ec2nodeclass("default"))
            .expect("node class created");
        create_nodepool(&cluster, nodepool_with("default", pool_overrides));
        let (provider, cloud) = simulated_cloud_with(ec2);
        let daemon = match (name, tuned) {
            (_, Some((extra, timings))) => {
                start_provisioner_with(harness.controller.clone(), cloud, extra, timings).await
            }
            (None, None) => start_provisioner(&harness, cloud).await,
            (Some(name), None) => {
                start_provisioner_on(named_client(&harness, name).await, cloud).await
            }
        };
        let kubelets = kubelet::start(
            harness.client.clone(),
            provider.clone(),
            kubelet::KubeletConfig::fast(),
        );
        let scheduler = scheduler::start(
            harness.client.clone(),
            SchedulerConfig {
                interval: Duration::from_millis(50),
                initial_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(500),
                ..SchedulerConfig::default()
            },
        );
        Self {
            harness,
            daemon,
            provider,
            _kubelets: kubelets,
            _scheduler: scheduler,
        }
    }

    pub fn cluster(&self) -> Cluster {
        self.harness.cluster()
    }

    pub fn nodeclaims(&self) -> Vec<Value> {
        self.cluster()
            .list(NODECLAIMS.0, NODECLAIMS.1, None, "")
            .expect("nodeclaims list")
    }

    pub fn nodeclaim(&self, name: &str) -> Option<Value> {
        self.cluster()
            .get(NODECLAIMS.0, NODECLAIMS.1, None, name)
            .ok()
    }

    pub fn nodepool(&self, name: &str) -> Value {
        self.cluster()
            .get(NODEPOOLS.0, NODEPOOLS.1, None, name)
            .expect("nodepool exists")
    }

    pub fn patch_nodepool(&self, name: &str, patch: &Value) {
        self.cluster()
            .patch(
                NODEPOOLS.0,
                NODEPOOLS.1,
                None,
                name,
                PatchKind::Merge,
                patch,
            )
            .expect("nodepool patched");
    }

    /// Creates the pod `name` and waits until it runs; the name of the NodeClaim under it.
    pub async fn running_pod(&self, name: &str) -> String {
        let cluster = self.cluster();
        create_pod(&cluster, name, json!({}));
        let mut node = String::new();
        eventually("the pod runs", || {
            cluster
                .get("v1", "pods", Some("default"), name)
                .is_ok_and(|p| {
                    node = p["spec"]["nodeName"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned();
                    !node.is_empty() && p["status"]["phase"] == "Running"
                })
        })
        .await;
        let mut claim = String::new();
        eventually("the node's nodeclaim is initialized", || {
            self.nodeclaims().iter().any(|c| {
                claim = name_of(c);
                c["status"]["nodeName"] == node
                    && condition(c, "Initialized").is_some_and(|c| c["status"] == "True")
            })
        })
        .await;
        claim
    }

    pub async fn stop(self) {
        drop(self._scheduler);
        drop(self._kubelets);
        self.daemon.stop().await;
        self.harness.stop().await;
    }
}

pub fn name_of(object: &Value) -> String {
    object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

pub fn condition<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Waits until the NodeClaim `name`'s `type_` condition satisfies `check` (`None`: absent).
pub async fn until_condition(
    stack: &Stack,
    name: &str,
    type_: &str,
    what: &str,
    check: impl Fn(Option<&Value>) -> bool,
) -> Value {
    let mut seen = Value::Null;
    eventually(what, || {
        stack.nodeclaim(name).is_some_and(|c| {
            let ok = check(condition(&c, type_));
            seen = c;
            ok
        })
    })
    .await;
    seen
}

/// A check for `Drifted=True` with `reason`.
pub fn drifted(reason: &'static str) -> impl Fn(Option<&Value>) -> bool {
    move |c| c.is_some_and(|c| c["status"] == "True" && c["reason"] == reason)
}
