//! EC2 instances launched for NodeClaims: launch through CreateFleet (one NodeClaim per call,
//! tagged at launch), describe and terminate through batchers (so many NodeClaims' calls
//! become one), list
//! by the cluster's tags, tag after registration, and garbage-collect instances whose
//! NodeClaim no longer exists. Only live instances count: pending, running, stopping,
//! stopped and shutting-down.

use crate::batcher::{
    Batcher, BoxFuture, DESCRIBE_INSTANCES_WINDOW, Executor, TERMINATE_INSTANCES_WINDOW,
};
use crate::errors::ApiError;
use crate::fleet::{self, FleetOutcome, FleetRequest};
use crate::selectors::filter;
use crate::tags;
use aws_sdk_ec2::types::Filter;
use kerf::labels::{CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_SPOT};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// TerminateInstances calls that failed, by the instance's zone (labels `zone`, `zone_id`).
pub const TERMINATION_FAILURES: &str =
    "karpenter_cloudprovider_instance_termination_failures_total";

/// Instances younger than this are never garbage-collected: their NodeClaim may not have
/// been written yet.
pub const GARBAGE_COLLECTION_MIN_AGE: Duration = Duration::from_secs(30);

const LIVE_STATES: [&str; 5] = ["pending", "running", "stopping", "stopped", "shutting-down"];

/// An EC2 instance as the provider sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Instance {
    pub id: String,
    pub instance_type: String,
    pub zone: String,
    pub zone_id: Option<String>,
    pub state: String,
    pub image_id: Option<String>,
    pub subnet_id: Option<String>,
    pub security_group_ids: Vec<String>,
    pub capacity_type: String,
    /// The reservation the instance runs in when it was launched into one only
    /// (`capacity-reservations-only`, as kerf launches reserved capacity); an instance that
    /// merely fell into an open reservation is not counted as reserved, as upstream.
    pub reservation: Option<InstanceReservation>,
    pub tags: BTreeMap<String, String>,
    pub launch_time: Option<SystemTime>,
    /// EC2's `StateReason` (`code: message`), e.g. why an instance ended.
    pub state_reason: Option<String>,
}

/// The capacity reservation an instance runs in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstanceReservation {
    pub id: String,
    /// `default`, or `capacity-block` for an instance of a Capacity Block.
    pub reservation_type: String,
    pub interruptible: bool,
}

/// Why an instance call failed.
#[derive(Clone, Debug, Error, PartialEq)]
pub enum InstanceError {
    #[error("instance {0} not found")]
    NotFound(String),
    /// EC2 still lists the instance, but it has ended; `reason` is EC2's `StateReason`.
    #[error("instance {id} is {state}: {reason}")]
    Ended {
        id: String,
        state: String,
        reason: String,
    },
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("{0}")]
    Batch(#[from] crate::batcher::BatchError),
}

type DescribeResult = Result<Option<Instance>, ApiError>;
type TerminateResult = Result<(), ApiError>;

/// Launches, finds and removes instances.
pub struct InstanceProvider {
    ec2: aws_sdk_ec2::Client,
    cluster_name: String,
    describe: Batcher<(), String, DescribeResult>,
    terminate: Batcher<(), String, TerminateResult>,
}

impl InstanceProvider {
    pub fn new(ec2: aws_sdk_ec2::Client, cluster_name: &str) -> Self {
        Self {
            describe: Batcher::new(DESCRIBE_INSTANCES_WINDOW, describe_executor(ec2.clone())),
            terminate: Batcher::new(TERMINATE_INSTANCES_WINDOW, terminate_executor(ec2.clone())),
            cluster_name: cluster_name.to_owned(),
            ec2,
        }
    }

    /// Launches one instance for `node_claim`, tagged with it, under `client_token`.
    pub async fn launch(
        &self,
        request: &FleetRequest,
        node_claim: &str,
        client_token: &str,
    ) -> Result<FleetOutcome, InstanceError> {
        Ok(fleet::launch(&self.ec2, request, node_claim, client_token).await?)
    }

    /// The live instance `id`; an ended one is [`InstanceError::Ended`] with EC2's reason,
    /// so whoever notices a machine gone can say why.
    pub async fn get(&self, id: &str) -> Result<Instance, InstanceError> {
        let instance = self
            .describe
            .add((), id.to_owned())
            .await??
            .ok_or_else(|| InstanceError::NotFound(id.to_owned()))?;
        if LIVE_STATES.contains(&instance.state.as_str()) {
            return Ok(instance);
        }
        Err(InstanceError::Ended {
            reason: instance
                .state_reason
                .unwrap_or_else(|| "EC2 gave no reason".to_owned()),
            id: instance.id,
            state: instance.state,
        })
    }

    /// Every live instance this cluster launched for a NodePool.
    pub async fn list(&self) -> Result<Vec<Instance>, InstanceError> {
        let filters = vec![
            filter("tag-key", [tags::NODEPOOL.to_owned()]),
            filter("tag-key", [tags::EC2NODECLASS.to_owned()]),
            filter(
                &format!("tag:{}", tags::EKS_CLUSTER_NAME),
                [self.cluster_name.clone()],
            ),
            state_filter(),
        ];
        Ok(describe_pages(&self.ec2, None, filters).await?)
    }

    /// The oldest pending or running instance of this cluster tagged with the NodeClaim
    /// `node_claim`: what an earlier launch for it started, if its answer was lost.
    pub async fn find_by_node_claim(
        &self,
        node_claim: &str,
    ) -> Result<Option<Instance>, InstanceError> {
        let filters = vec![
            filter(&format!("tag:{}", tags::NODECLAIM), [node_claim.to_owned()]),
            filter(
                &format!("tag:{}", tags::EKS_CLUSTER_NAME),
                [self.cluster_name.clone()],
            ),
            filter(
                "instance-state-name",
                ["pending".to_owned(), "running".to_owned()],
            ),
        ];
        let found = describe_pages(&self.ec2, None, filters).await?;
        Ok(found.into_iter().min_by_key(|i| i.launch_time))
    }

    /// Terminates instance `id`; `NotFound` once it is gone, `Ok` while it shuts down.
    pub async fn terminate(&self, id: &str) -> Result<(), InstanceError> {
        let instance = self.get(id).await?;
        if instance.state == "shutting-down" {
            return Ok(());
        }
        let terminated = match self.terminate.add((), id.to_owned()).await {
            Ok(result) => result.map_err(InstanceError::from),
            Err(error) => Err(InstanceError::from(error)),
        };
        if terminated.is_err() {
            metrics::counter!(
                TERMINATION_FAILURES,
                "zone" => instance.zone.clone(),
                "zone_id" => instance.zone_id.clone().unwrap_or_default()
            )
            .increment(1);
        }
        terminated
    }

    /// Adds those of `wanted` whose keys the instance does not carry yet; a key it has
    /// (e.g. a `Name` the user set through `spec.tags`) keeps its value, as upstream.
    pub async fn tag(
        &self,
        id: &str,
        wanted: &BTreeMap<String, String>,
    ) -> Result<(), InstanceError> {
        let instance = self.get(id).await?;
        let missing: BTreeMap<String, String> = wanted
            .iter()
            .filter(|(k, _)| !instance.tags.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if missing.is_empty() {
            return Ok(());
        }
        self.ec2
            .create_tags()
            .resources(id)
            .set_tags(Some(tags::to_ec2(&missing)))
            .send()
            .await
            .map_err(|e| {
                let err = ApiError::from_sdk("CreateTags", e);
                if err.is_not_found() {
                    InstanceError::NotFound(id.to_owned())
                } else {
                    InstanceError::Api(err)
                }
            })?;
        Ok(())
    }

    /// The tags an instance gets once its node registered: `Name` = node name, its
    /// NodeClaim and the cluster.
    pub fn registration_tags(&self, node_name: &str, node_claim: &str) -> BTreeMap<String, String> {
        BTreeMap::from([
            (tags::NAME.to_owned(), node_name.to_owned()),
            (tags::NODECLAIM.to_owned(), node_claim.to_owned()),
            (tags::EKS_CLUSTER_NAME.to_owned(), self.cluster_name.clone()),
        ])
    }

    /// Terminates the cluster's instances that no NodeClaim accounts for (ids not in
    /// `known`) and that are older than `min_age`; returns the terminated ids.
    pub async fn garbage_collect(
        &self,
        known: &HashSet<String>,
        min_age: Duration,
    ) -> Result<Vec<String>, InstanceError> {
        let now = SystemTime::now();
        let mut leaked: Vec<String> = self
            .list()
            .await?
            .into_iter()
            .filter(|i| !known.contains(&i.id) && i.state != "shutting-down")
            .filter(|i| {
                i.launch_time
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|age| age >= min_age)
            })
            .map(|i| i.id)
            .collect();
        leaked.sort();
        for id in &leaked {
            tracing::info!(
                instance_id = id,
                "garbage collecting instance with no nodeclaim"
            );
            match self.terminate.add((), id.clone()).await? {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(leaked)
    }
}

fn state_filter() -> Filter {
    filter(
        "instance-state-name",
        LIVE_STATES.iter().map(|s| (*s).to_owned()),
    )
}

async fn describe_pages(
    ec2: &aws_sdk_ec2::Client,
    ids: Option<Vec<String>>,
    filters: Vec<Filter>,
) -> Result<Vec<Instance>, ApiError> {
    let mut pages = ec2
        .describe_instances()
        .set_instance_ids(ids)
        .set_filters(Some(filters))
        .into_paginator()
        .send();
    let mut found = Vec::new();
    while let Some(page) = pages.next().await {
        let page = page.map_err(|e| ApiError::from_sdk("DescribeInstances", e))?;
        for reservation in page.reservations() {
            found.extend(reservation.instances().iter().filter_map(instance_of));
        }
    }
    Ok(found)
}

fn describe_executor(ec2: aws_sdk_ec2::Client) -> Executor<(), String, DescribeResult> {
    Arc::new(
        move |(), ids: Vec<String>| -> BoxFuture<Vec<DescribeResult>> {
            let ec2 = ec2.clone();
            Box::pin(async move {
                let unique: Vec<String> = ids
                    .iter()
                    .cloned()
                    .collect::<HashSet<_>>()
                    .into_iter()
                    .collect();
                // By id, in every state: an ended instance is answered with its reason.
                match describe_pages(&ec2, Some(unique), Vec::new()).await {
                    Ok(found) => {
                        let by_id: HashMap<String, Instance> =
                            found.into_iter().map(|i| (i.id.clone(), i)).collect();
                        ids.iter().map(|id| Ok(by_id.get(id).cloned())).collect()
                    }
                    // One unknown id fails the whole call: ask for each id on its own.
                    Err(e) if e.is_not_found() && ids.len() > 1 => {
                        let mut results = Vec::with_capacity(ids.len());
                        for id in &ids {
                            results.push(describe_one(&ec2, id).await);
                        }
                        results
                    }
                    Err(e) if e.is_not_found() => vec![Ok(None)],
                    Err(e) => vec![Err(e); ids.len()],
                }
            })
        },
    )
}

async fn describe_one(ec2: &aws_sdk_ec2::Client, id: &str) -> DescribeResult {
    match describe_pages(ec2, Some(vec![id.to_owned()]), Vec::new()).await {
        Ok(found) => Ok(found.into_iter().next()),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

fn terminate_executor(ec2: aws_sdk_ec2::Client) -> Executor<(), String, TerminateResult> {
    Arc::new(
        move |(), ids: Vec<String>| -> BoxFuture<Vec<TerminateResult>> {
            let ec2 = ec2.clone();
            Box::pin(async move {
                let unique: Vec<String> = ids
                    .iter()
                    .cloned()
                    .collect::<HashSet<_>>()
                    .into_iter()
                    .collect();
                match terminate_call(&ec2, unique).await {
                    Ok(()) => vec![Ok(()); ids.len()],
                    Err(_) if ids.len() > 1 => {
                        let mut results = Vec::with_capacity(ids.len());
                        for id in &ids {
                            results.push(terminate_call(&ec2, vec![id.clone()]).await);
                        }
                        results
                    }
                    Err(e) => vec![Err(e)],
                }
            })
        },
    )
}

async fn terminate_call(ec2: &aws_sdk_ec2::Client, ids: Vec<String>) -> TerminateResult {
    ec2.terminate_instances()
        .set_instance_ids(Some(ids))
        .send()
        .await
        .map(|_| ())
        .map_err(|e| ApiError::from_sdk("TerminateInstances", e))
}

fn instance_of(i: &aws_sdk_ec2::types::Instance) -> Option<Instance> {
    let placement = i.placement();
    Some(Instance {
        id: i.instance_id()?.to_owned(),
        instance_type: i
            .instance_type()
            .map(|t| t.as_str().to_owned())
            .unwrap_or_default(),
        zone: placement
            .and_then(|p| p.availability_zone())
            .unwrap_or_default()
            .to_owned(),
        zone_id: placement
            .and_then(|p| p.availability_zone_id())
            .map(str::to_owned),
        state: i
            .state()
            .and_then(|s| s.name())
            .map(|n| n.as_str().to_owned())
            .unwrap_or_default(),
        state_reason: i.state_reason().map(|r| match (r.code(), r.message()) {
            (Some(code), Some(message)) if !message.starts_with(code) => {
                format!("{code}: {message}")
            }
            (_, Some(message)) => message.to_owned(),
            (code, None) => code.unwrap_or_default().to_owned(),
        }),
        image_id: i.image_id().map(str::to_owned),
        subnet_id: i.subnet_id().map(str::to_owned),
        security_group_ids: i
            .security_groups()
            .iter()
            .filter_map(|g| g.group_id().map(str::to_owned))
            .collect(),
        capacity_type: if i.spot_instance_request_id().is_some()
            || i.instance_lifecycle() == Some(&aws_sdk_ec2::types::InstanceLifecycleType::Spot)
        {
            CAPACITY_TYPE_SPOT.to_owned()
        } else {
            CAPACITY_TYPE_ON_DEMAND.to_owned()
        },
        reservation: instance_reservation(i),
        tags: tags::from_ec2(i.tags()),
        launch_time: i.launch_time().and_then(|t| SystemTime::try_from(*t).ok()),
    })
}

fn instance_reservation(i: &aws_sdk_ec2::types::Instance) -> Option<InstanceReservation> {
    use aws_sdk_ec2::types::{CapacityReservationPreference, InstanceLifecycleType};
    let only = i
        .capacity_reservation_specification()
        .and_then(|s| s.capacity_reservation_preference())
        == Some(&CapacityReservationPreference::CapacityReservationsOnly);
    let id = i.capacity_reservation_id().filter(|_| only)?;
    let lifecycle = i.instance_lifecycle();
    Some(InstanceReservation {
        id: id.to_owned(),
        reservation_type: if lifecycle == Some(&InstanceLifecycleType::CapacityBlock) {
            kerf::catalog::CAPACITY_BLOCK
        } else {
            kerf::catalog::RESERVATION_TYPE_DEFAULT
        }
        .to_owned(),
        interruptible: lifecycle == Some(&InstanceLifecycleType::InterruptibleCapacityReservation),
    })
}
