//! The AWS cloud `kerf controller` launches into: SDK clients from the standard AWS chains
//! (region from `AWS_REGION` / the profile / IMDS, credentials from the environment, IRSA or
//! Pod Identity web identity, profiles or the instance profile, `AWS_ENDPOINT_URL` to point
//! at an emulator or VPC endpoints; every call sent from the Kubernetes client's I/O runtime,
//! `kerf_actors::client::io`), a start-up check that STS and EC2 answer (failing with
//! the endpoint and the usual DNS / VPC endpoint causes), the cluster facts nodes need
//! ([`cluster`]), and the provider reading EC2NodeClasses from the controller's cluster
//! state. Its instance types, offerings and prices are refreshed in the background (at start
//! and every 12 hours); the embedded catalog of the region stands in until the first refresh.
//! Launch templates of the cluster found at start are remembered, so the leader deletes those
//! that stay unused; the Kubernetes version is re-read every 15 minutes ([`version`]). With
//! `INTERRUPTION_QUEUE`, the SQS queue is opened at start (a missing queue or permission
//! stops start-up, naming both) for the Interruption actor.

pub mod cluster;
pub mod version;

use std::sync::Arc;

use anyhow::Context as _;
use kerf::api::EC2NodeClass;
use kerf::catalog::Catalog;
use kerf_actors::mailbox::MailboxDepth;
use kerf_actors::offering_cache::{
    OFFERING_CACHE_MAILBOX_CAPACITY, OfferingCache, UNAVAILABLE_OFFERINGS_TTL,
};
use kerf_actors::state::{ClusterState, ObjectKey};
use kerf_actors::supervisor;
use kerf_actors::{Cloud, ValidSettings};
use kerf_aws::clients::AwsClients;
use kerf_aws::cloudprovider::{AwsCloudProvider, AwsSettings, NodeClassStore};
use kerf_aws::instance_status::Ec2InstanceStatus;
use kerf_aws::instancetype::INSTANCE_TYPES_REFRESH_INTERVAL;
use kerf_aws::interruption::SqsQueue;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The provider's view of the controller's EC2NodeClass store.
struct ClusterNodeClasses(Arc<ClusterState>);

impl NodeClassStore for ClusterNodeClasses {
    fn get(&self, name: &str) -> Option<EC2NodeClass> {
        self.0
            .nodeclasses
            .get(&ObjectKey::new(None, name))
            .map(|nc| EC2NodeClass::clone(&nc))
    }
}

/// The AWS cloud for the daemon, and the provider behind it.
pub struct AwsCloud {
    pub cloud: Cloud,
    pub provider: Arc<AwsCloudProvider>,
    /// The interruption queue, with `INTERRUPTION_QUEUE` set.
    pub interruption_queue: Option<Arc<SqsQueue>>,
    /// EC2's status checks for the instance-health poller.
    pub instance_status: Arc<Ec2InstanceStatus>,
}

/// Connects to AWS and builds the provider over `state`.
pub async fn connect(
    settings: &ValidSettings,
    client: &kube::Client,
    kube_config: &kube::Config,
    state: Arc<ClusterState>,
) -> anyhow::Result<AwsCloud> {
    // The runtime the Kubernetes client's requests run on: AWS calls go out from it too, so no
    // actor's thread holds a connection another actor's call may borrow.
    let io = kerf_actors::client::io::handle().context("starting the I/O runtime")?;
    let clients = AwsClients::from_environment(None, io)
        .await
        .context("configuring AWS")?;
    clients
        .check_connectivity()
        .await
        .context("checking AWS connectivity")?;
    tracing::info!(
        region = clients.region,
        endpoint = clients.endpoint_override.as_deref().unwrap_or("default"),
        "connected to AWS"
    );
    let interruption_queue = match &settings.interruption_queue {
        Some(name) => {
            let queue = SqsQueue::open(clients.sqs.clone(), name, &clients.region)
                .await
                .context("checking the interruption queue (INTERRUPTION_QUEUE)")?;
            tracing::info!(queue = name, url = queue.url(), "interruption queue found");
            Some(Arc::new(queue))
        }
        None => {
            // Said once: a team running spot needs to know its nodes get no two-minute notice.
            tracing::warn!(
                "INTERRUPTION_QUEUE is not set: interruption handling is off (spot interruptions, \
                 rebalance recommendations, scheduled maintenance and instance state changes are \
                 not watched); set it to the SQS queue's name to turn it on"
            );
            None
        }
    };
    let catalog = Catalog::embedded(&clients.region)
        .with_context(|| format!("no embedded EC2 catalog for region {}", clients.region))?;
    let facts = cluster::discover(
        client,
        &cluster::Configured {
            cluster_endpoint: settings.cluster_endpoint.as_deref(),
            ca_bundle: settings.cluster_ca_bundle.as_deref(),
            kube_config,
        },
    )
    .await
    .context("discovering the cluster's facts for new nodes")?;
    tracing::info!(
        kubernetes_version = facts.kubernetes_version,
        cluster_endpoint = facts.cluster_endpoint,
        kube_dns_ip = facts.kube_dns_ip.as_deref().unwrap_or("unknown"),
        cluster_cidr = facts.cluster_cidr.as_deref().unwrap_or("unknown"),
        ca_bundle = facts.ca_bundle.is_some(),
        "discovered cluster"
    );
    let aws_settings = AwsSettings {
        cluster_name: settings.cluster_name.clone(),
        cluster_endpoint: facts.cluster_endpoint,
        ca_bundle: facts.ca_bundle,
        cluster_cidr: facts.cluster_cidr,
        kube_dns_ip: facts.kube_dns_ip,
        kubernetes_version: facts.kubernetes_version.into(),
        isolated_vpc: settings.isolated_vpc,
        reserved_enis: settings.reserved_enis,
        vm_memory_overhead_percent: settings.vm_memory_overhead_percent,
        reserved_capacity: settings.feature_gates.reserved_capacity,
    };
    // One unavailable-offerings state: the OfferingCache actor, which the provider marks
    // from fleet errors and the NodeClaim lifecycle and schedulers read.
    let offerings = OfferingCache::start(
        UNAVAILABLE_OFFERINGS_TTL,
        MailboxDepth::new("offering_cache", OFFERING_CACHE_MAILBOX_CAPACITY),
    );
    let instance_status = Arc::new(Ec2InstanceStatus::new(clients.ec2.clone()));
    // The batchers run on a runtime of their own, outside the controller's supervision scope:
    // each captures the scope it is built in, so its panics count against the restart budget.
    kerf_aws::batcher::report_panics_with(|| {
        let scope = supervisor::Supervision::current();
        Arc::new(move |_, payload| scope.report_panic(kerf_aws::batcher::RESTART_LABEL, payload))
    });
    let provider = Arc::new(AwsCloudProvider::new(
        clients,
        aws_settings,
        Arc::new(ClusterNodeClasses(state)),
        Arc::new(offerings.clone()),
    ));
    match provider.launch_templates.hydrate().await {
        Ok(count) => tracing::debug!(count, "found the cluster's launch templates"),
        Err(error) => tracing::warn!(%error, "listing the cluster's launch templates"),
    }
    Ok(AwsCloud {
        cloud: Cloud {
            provider: provider.clone(),
            catalog,
            offerings: Some(offerings),
        },
        provider,
        interruption_queue,
        instance_status,
    })
}

impl AwsCloud {
    /// Starts the provider's upkeep, supervised: instance types, offerings and prices
    /// refreshed at once and every 12 hours, unused launch templates deleted while `leader`
    /// holds, and the cluster's Kubernetes version re-read every
    /// [`version::KUBERNETES_VERSION_REFRESH`]. Abort the tasks on shutdown.
    pub fn start_upkeep(
        &self,
        client: kube::Client,
        leader: watch::Receiver<bool>,
    ) -> Vec<JoinHandle<()>> {
        let provider = Arc::clone(&self.provider);
        let refresh = supervisor::task("aws_upkeep", move || {
            Arc::clone(&provider).run_upkeep(INSTANCE_TYPES_REFRESH_INTERVAL, leader.clone())
        });
        let follow = version::supervise(
            client,
            self.provider.settings.kubernetes_version.clone(),
            version::KUBERNETES_VERSION_REFRESH,
        );
        vec![refresh, follow]
    }
}
